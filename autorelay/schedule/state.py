"""Schedule state: per-stage loop structure that the steps edit before lowering.

A stage starts with one leaf loop per root axis (spatial then reduce). Split and Fuse record
relations between variables; extents are computed only at lowering time, because the extent of a
stage that is computed at another stage's loop is the *region* that loop needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.te.expr import Expr, IterVar, Read, Reduce, Var
from autorelay.te.tensor import ComputeDef, Tensor, topo_order
from autorelay.te.traverse import distinct_nodes, substitute, transform


@dataclass
class Stage:
    name: str
    tensor: Tensor
    axes: list[IterVar]  # spatial root axes
    raxes: list[IterVar]  # reduction root axes
    body: Expr  # element value (for a reduction: the reduced expression)
    combiner: str | None
    is_output: bool
    scope: str = "global"
    leaves: list[Var] = field(default_factory=list)
    root_leaf: dict[Var, Var] = field(default_factory=dict)
    rels: list[tuple] = field(default_factory=list)
    kind: dict[Var, str] = field(default_factory=dict)
    is_reduce_var: set[Var] = field(default_factory=set)
    attach: tuple[str, Var] | None = None
    inline: bool = False
    cross_threads: int = 0  # > 0: a block of this many threads per output element (CrossThreadReduce)
    cross_warp: int = 0  # > 0: the target's warp size; shuffles within warps (see cross_thread)

    def leaf(self, name: str) -> Var:
        for v in self.leaves:
            if v.name == f"{self.name}.{name}":
                return v
        known = ", ".join(v.name.split(".", 1)[1] for v in self.leaves)
        raise ScheduleError(f"stage {self.name}: no loop axis {name!r} (axes: {known})")

    def new_var(self, name: str) -> Var:
        full = f"{self.name}.{name}"
        if any(v.name == full for v in self.leaves):
            raise ScheduleError(f"stage {self.name}: axis name {name!r} already exists")
        return Var(full)


def make_stage(t: Tensor, is_output: bool, name: str | None = None, scope: str = "global") -> Stage:
    op = t.op
    assert op is not None
    body = op.body
    combiner = None
    raxes: list[IterVar] = []
    if isinstance(body, Reduce):
        combiner, raxes, body = body.combiner, list(body.axes), body.body
    st = Stage(name or t.name, t, list(op.axes), raxes, body, combiner, is_output, scope)
    for ax in list(op.axes) + raxes:
        v = Var(f"{st.name}.{ax.name}")
        st.leaves.append(v)
        st.root_leaf[ax.var] = v
        st.kind[v] = "serial"
        if ax.kind == "reduce":
            st.is_reduce_var.add(v)
    return st


class State:
    """All stages of one kernel plus input re-layouts, edited by `apply_step`."""

    def __init__(self, cdef: ComputeDef):
        self.cdef = cdef
        outs = {id(t) for t in cdef.outputs}
        self.stages: list[Stage] = [
            make_stage(t, id(t) in outs) for t in topo_order(cdef.outputs) if t.op is not None
        ]
        names = [s.name for s in self.stages] + [t.name for t in cdef.inputs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ScheduleError(f"tensor names must be unique within a kernel, repeated: {sorted(dup)}")
        # input name -> (current placeholder, list of numpy re-layouts applied at bind time)
        self.inputs: dict[str, Tensor] = {t.name: t for t in cdef.inputs}
        self.relayouts: dict[str, list[S.Pack | tuple]] = {t.name: [] for t in cdef.inputs}

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ScheduleError(f"no stage named {name!r} (stages: {', '.join(s.name for s in self.stages)})")

    def stage_of(self, t: Tensor) -> Stage | None:
        for s in self.stages:
            if s.tensor is t:
                return s
        return None

    def computed_inside(self, st: Stage, outer: Stage) -> bool:
        """Whether `st` is computed at a loop of `outer`, directly or through stages that are."""
        seen = set()
        while st.attach is not None and st.name not in seen:
            seen.add(st.name)
            if st.attach[0] == outer.name:
                return True
            st = self.stage(st.attach[0])
        return False

    def consumers(self, st: Stage) -> list[Stage]:
        """Stages that read `st` once inlined stages are substituted: those whose body reads it, or
        reads an inlined stage that does (the substitution keeps what a body reads, so this follows
        the reads instead of building the inlined bodies, which a Winograd transform makes large)."""
        inlined = {id(s.tensor): s for s in self.stages if s.inline}
        known: dict[int, bool] = {}

        def reads_it(body: Expr) -> bool:
            for n in distinct_nodes(body):
                if not isinstance(n, Read):
                    continue
                if n.tensor is st.tensor:
                    return True
                via = inlined.get(id(n.tensor))
                if via is not None:
                    if id(via) not in known:
                        known[id(via)] = False  # while its own reads are followed
                        known[id(via)] = reads_it(via.body)
                    if known[id(via)]:
                        return True
            return False

        return [c for c in self.stages if not c.inline and reads_it(c.body)]

    def inline_into(self, body: Expr) -> Expr:
        """`body` with every read of an inlined stage replaced by that stage's *current* body: a
        CacheWrite or Pack may have rewritten what the stage reads since its compute was declared."""
        inlined = {id(s.tensor): s for s in self.stages if s.inline}

        def fn(n: Expr) -> Expr | None:
            if isinstance(n, Read) and id(n.tensor) in inlined:
                st = inlined[id(n.tensor)]
                return self.inline_into(substitute(st.body, {a.var: i for a, i in zip(st.axes, n.indices)}))
            return None

        return transform(body, fn) if inlined else body

    def rewrite_reads(self, fn) -> None:
        for s in self.stages:
            s.body = transform(s.body, lambda n: fn(n) if isinstance(n, Read) else None)
