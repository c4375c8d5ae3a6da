"""Lowering a scheduled State to loop IR (`PrimFunc`).

Order of work: (1) extents — root stages loop over their full shape; a stage computed at another
stage's loop gets the *region* its consumer reads inside that loop (interval of the consumer's
index expressions over the inner loops), consumers first (the arithmetic of both lives in
`schedule.stage_layout`); (2) loop nests, with attached producers
emitted at the top of the loop they are attached to, reduction initialisation before the first
reduction loop, and guards for ragged splits and regions that overhang the tensor; (3) the
simplifier removes every guard the loop bounds prove.

Two choices keep register tiles fast. A local (attached) buffer is laid out with the axis of its
vectorized loop innermost, so accumulators are whole vectors at constant offsets. And a local stage
whose region overhangs the tensor (a ragged last tile) computes the overhang instead of testing
each element, when every load provably stays in memory (a workspace grows its leading dimension
for it):
the extra values are never copied out, and the inner loop keeps no lane-dependent branch.
"""

from __future__ import annotations

from autorelay.errors import ScheduleError
from autorelay.schedule.stage_layout import (
    RegionRead,
    StageLayout,
    bound_region,
    flat_index,
    leaf_extents,
    reads_of,
    vector_last_perm,
)
from autorelay.schedule.state import Stage, State
from autorelay.te.expr import Bin, Cmp, Const, Expr, Load, Read, Var, all_of
from autorelay.te.traverse import distinct_nodes, substitute, transform
from autorelay.tir.nodes import DOT_KINDS, Allocate, Barrier, Buffer, For, If, PrimFunc, Stmt, Store, seq
from autorelay.tir.simplify import interval, simplify, simplify_stmt

MAX_VECTOR = 64
MAX_UNROLL = 64


class Lowerer:
    def __init__(self, state: State, name: str):
        self.state = state
        self.name = name
        self.stages = [s for s in state.stages if not s.inline]
        self.layout: dict[str, StageLayout] = {}
        self.bodies: dict[str, Expr] = {s.name: state.inline_into(s.body) for s in self.stages}
        self.pitches = dict(state.cdef.pitches)
        self.params = {n: Buffer(n, t.shape, t.dtype, pitch=self.pitches.get(n))
                       for n, t in state.inputs.items()}
        self.tensor_stage = {id(s.tensor): s for s in self.stages}

    # ---- extents and regions -------------------------------------------------------------
    def _root_vals(self, st: Stage) -> dict[Var, Expr]:
        lay = self.layout[st.name]
        vals: dict[Var, Expr] = {}
        for d, a in enumerate(st.axes):
            vals[a.var] = Bin("add", lay.base[d], lay.env[st.root_leaf[a.var]], "int64")
        for a in st.raxes:
            vals[a.var] = lay.env[st.root_leaf[a.var]]
        return vals

    def _layout_root(self, st: Stage, root_ext: dict[Var, int], base: list[Expr], extra: list) -> None:
        for v in st.leaves:
            k = st.kind[v]
            if k == "parallel" and (st.attach is not None or st.leaves[0] is not v):
                raise ScheduleError(
                    f"stage {st.name}: a parallel axis must be the outermost loop of a root stage"
                )
        ext, env, guards = leaf_extents(st, root_ext)
        perm = vector_last_perm(st)
        shape = tuple(root_ext[st.axes[d].var] for d in perm)
        pitch = self.pitches.get(st.name) if st.is_output and st.attach is None else None
        if pitch is not None and perm != list(range(len(perm))):
            raise ScheduleError(f"stage {st.name}: an output stored with a pitch must keep its axis order")
        buf = Buffer(st.name if st.scope != "local" else f"{st.name}_l", shape, st.tensor.dtype, st.scope,
                     pitch=pitch)
        self.layout[st.name] = StageLayout(root_ext, base, ext, env, guards + extra, buf, perm)

    def _region(self, prod: Stage, cons: Stage) -> tuple[list[Expr], list[int], tuple[int, ...]]:
        """Base expressions and extents of `prod` read by `cons` inside its attach loop."""
        assert prod.attach is not None
        readers: list[tuple[Stage, list[Var], dict[Var, tuple[int, int]]]] = []
        for c in self.stages:
            if c is prod or not any(r.tensor is prod.tensor for r in reads_of(self.bodies[c.name])):
                continue
            if c is cons:
                readers.append((c, cons.leaves[cons.leaves.index(prod.attach[1]) + 1 :],
                                self._leaf_bounds(c, c.leaves)))
            elif (nested := self._loops_inside(c, prod.attach)) is not None:
                readers.append((c, list(nested), nested))
            else:
                raise ScheduleError(
                    f"ComputeAt {prod.name}: {c.name} also reads it but is neither {cons.name} nor "
                    f"computed inside the same loop"
                )
        # a block's shared copy serves all its threads: thread indices count as inner loops
        relax = self._thread_bounds() if prod.scope == "shared" else {}
        reads: list[RegionRead] = []
        for c, inner_vars, all_b in readers:
            vals = self._root_vals(c)
            inner = {**relax, **{v: all_b[v] for v in inner_vars}}
            # one per distinct index tuple: a Winograd transform reads each input element in many
            # branches of its select chains, as distinct but equal reads
            same = {n.indices: n for n in reads_of(self.bodies[c.name]) if n.tensor is prod.tensor}
            reads += [(n, vals, all_b, inner) for n in same.values()]
        if not reads:
            raise ScheduleError(f"ComputeAt {prod.name}: {cons.name} does not read it")
        return bound_region(prod, cons, reads)

    def _loops_inside(self, st: Stage, loop: tuple[str, Var]) -> dict[Var, tuple[int, int]] | None:
        """Bounds of the loops a read by `st` varies over within one iteration of `loop`: those of
        `st` and of every stage it is computed inside, up to one computed at `loop` or at a loop
        nested in it (a GEMM's register tile computed inside a stage that is itself computed at
        an output's loop reads its input over both stages' loops). None when `st` is not computed
        inside `loop` or a stage on the way is not laid out yet."""
        bounds: dict[Var, tuple[int, int]] = {}
        while st.attach is not None and st.name in self.layout:
            bounds.update(self._leaf_bounds(st, st.leaves))
            if st.attach == loop:
                return bounds
            owner = self.state.stage(st.attach[0])
            if owner.name == loop[0]:  # at a loop of the same stage: inside `loop` if nested in it
                leaves = owner.leaves
                if loop[1] not in leaves or leaves.index(st.attach[1]) <= leaves.index(loop[1]):
                    return None
                return {**bounds, **self._leaf_bounds(owner, leaves[leaves.index(loop[1]) + 1 :])}
            st = owner
        return None

    def _leaf_bounds(self, st: Stage, leaves: list[Var]) -> dict[Var, tuple[int, int]]:
        lay = self.layout[st.name]
        return {v: (0, lay.leaf_ext[v] - 1) for v in leaves}

    def _thread_bounds(self) -> dict[Var, tuple[int, int]]:
        """Bounds of every loop bound to a GPU thread index in the stages laid out so far."""
        out: dict[Var, tuple[int, int]] = {}
        for s in self.stages:
            lay = self.layout.get(s.name)
            for v in s.leaves if lay is not None else ():
                if s.kind[v].startswith("threadIdx"):
                    out[v] = (0, lay.leaf_ext[v] - 1)  # type: ignore[union-attr]
        return out

    def compute_layouts(self) -> None:
        for st in reversed(self.stages):  # consumers before producers
            if st.attach is None and st.scope == "shared":
                raise ScheduleError(f"stage {st.name}: shared memory must be computed at a loop (ComputeAt)")
            if st.attach is None:
                root_ext = {a.var: a.extent for a in st.axes + st.raxes}
                self._layout_root(st, root_ext, [Const(0, "int64")] * len(st.axes), [])
                continue
            cons = self.state.stage(st.attach[0])
            if cons.name not in self.layout:
                raise ScheduleError(f"ComputeAt {st.name}: target {cons.name} is not scheduled after it")
            if st.attach[1] not in cons.leaves:
                raise ScheduleError(
                    f"ComputeAt {st.name}: loop {st.attach[1].name} of {cons.name} "
                    "was split or fused afterwards"
                )
            base, exts, clamped = self._region(st, cons)
            root_ext = {a.var: e for a, e in zip(st.axes, exts)}
            root_ext.update({a.var: a.extent for a in st.raxes})
            self._layout_root(st, root_ext, base, [])
            lay = self.layout[st.name]
            lay.clamped = clamped
            env_pos = [
                Bin("add", base[d], lay.env[st.root_leaf[a.var]], "int64") for d, a in enumerate(st.axes)
            ]
            for d, a in enumerate(st.axes):
                lay.guards.append((Cmp("lt", env_pos[d], Const(a.extent, "int64")), False, True))
                lay.guards.append((Cmp("ge", env_pos[d], Const(0, "int64")), False, True))

    # ---- loop nests ----------------------------------------------------------------------
    def _value(self, st: Stage) -> tuple[Expr, Expr]:
        """(flat store index, element value) of `st` in terms of its leaf loops."""
        lay = self.layout[st.name]
        local_idx = [lay.env[st.root_leaf[a.var]] for a in st.axes]
        return lay.flat(local_idx), self.element(st, self._root_vals(st))

    def element(self, st: Stage, vals: dict[Var, Expr]) -> Expr:
        """The stage's element value with its root axes (spatial and reduction) set to `vals`,
        every read of a tensor a load of its buffer."""
        body = substitute(self.bodies[st.name], vals)
        return transform(body, lambda n: self._load(n) if isinstance(n, Read) else None)

    def _load(self, r: Read) -> Expr:
        t = r.tensor
        if t.op is None:
            buf = self.params[t.name]
            return Load(buf, flat_index(list(r.indices), buf.strides_shape), r.dtype)
        st = self.tensor_stage[id(t)]
        lay = self.layout[st.name]
        idx = [Bin("sub", i, b, "int64") for i, b in zip(r.indices, lay.base)]
        for d in lay.clamped:  # inside the region already (`bound_region`); the clamp says so
            top = Const(lay.root_ext[st.axes[d].var] - 1, "int64")
            idx[d] = Bin("max", Bin("min", idx[d], top, "int64"), Const(0, "int64"), "int64")
        return Load(lay.buffer, lay.flat(idx), r.dtype)

    def _guard(self, st: Stage, stmt: Stmt, with_reduce: bool, overhang: bool = True) -> Stmt:
        conds = [
            c
            for c, red, over in self.layout[st.name].guards
            if (with_reduce or not red) and (overhang or not over)
        ]
        return stmt if not conds else If(all_of(*conds), stmt)

    def _overhang_safe(self, st: Stage, value: Expr) -> bool:
        """A local stage may compute the part of its region that overhangs the tensor (the values
        are never copied out) if every load stays in memory: parameters provably in bounds,
        workspaces within their allocation once it is given slack at the end."""
        if st.scope != "local" or not any(over for _, _, over in self.layout[st.name].guards):
            return False
        bounds = self.all_bounds
        need: dict[int, tuple[Buffer, int]] = {}
        for ld in {n: None for n in distinct_nodes(value) if isinstance(n, Load)}:  # equal loads once
            b = ld.buffer
            if b.scope == "local":
                continue
            iv = interval(simplify(ld.index, bounds), bounds)
            if iv is None or iv[0] < 0:
                return False
            if id(b) in self.param_ids:
                if iv[1] >= b.size:
                    return False
            elif iv[1] >= b.size:
                need[id(b)] = (b, max(need.get(id(b), (b, 0))[1], iv[1] + 1 - b.size))
        for key, (b, extra) in need.items():
            self.slack[key] = (b, max(self.slack.get(key, (b, 0))[1], extra))
        return True

    def nest(self, st: Stage) -> Stmt:
        if st.cross_threads:
            from autorelay.schedule.cross_thread import cross_thread_nest

            return cross_thread_nest(self, st)
        lay = self.layout[st.name]
        n = len(st.leaves)
        for p, v in enumerate(st.leaves):
            k = st.kind[v]
            if k == "vectorized":
                if p != n - 1:
                    raise ScheduleError(f"Vectorize {v.name}: only the innermost loop can be vectorized")
                if lay.leaf_ext[v] > MAX_VECTOR:
                    raise ScheduleError(
                        f"Vectorize {v.name}: extent {lay.leaf_ext[v]} exceeds {MAX_VECTOR} lanes"
                    )
            if k in DOT_KINDS and (p != n - 2 or st.kind[st.leaves[-1]] != "vectorized"):
                raise ScheduleError(
                    f"Tensorize {v.name}: a dot loop must directly enclose the innermost, vectorized loop"
                )
            if (k == "unrolled" or k in DOT_KINDS) and lay.leaf_ext[v] > MAX_UNROLL:
                raise ScheduleError(f"Unroll {v.name}: extent {lay.leaf_ext[v]} exceeds {MAX_UNROLL}")
        index, value = self._value(st)
        keep_over = not self._overhang_safe(st, value)
        if st.combiner is None:
            main: Stmt = self._guard(st, Store(lay.buffer, index, value), True, keep_over)
        else:
            acc = Load(lay.buffer, index, value.dtype)
            main = self._guard(
                st, Store(lay.buffer, index, _combine(st.combiner, acc, value)), True, keep_over
            )
        first_red = next((p for p, v in enumerate(st.leaves) if v in st.is_reduce_var), None)
        attached = {}
        for s in self.stages:
            if s.attach is not None and s.attach[0] == st.name:
                attached.setdefault(s.attach[1], []).append(s)

        def build(p: int) -> Stmt:
            if p == n:
                return main
            v = st.leaves[p]
            prods = attached.get(v, [])
            copies = [self.nest(s) for s in prods]
            if any(s.scope == "shared" for s in prods):
                # every thread's part of the copy lands before any thread reads it, and every
                # thread has read it before the next iteration overwrites it
                inner = seq([*copies, Barrier(), build(p + 1), Barrier()])
            else:
                inner = seq([*copies, build(p + 1)])
            for s in prods:
                inner = Allocate(self.layout[s.name].buffer, inner)
            loop = For(v, lay.leaf_ext[v], inner, st.kind[v])
            if p == first_red:
                return seq([self._init(st, p, index, keep_over), loop])
            return loop

        return build(0)

    def _init(self, st: Stage, p: int, index: Expr, overhang: bool) -> Stmt:
        lay = self.layout[st.name]
        init = _identity(st.combiner or "sum", st.tensor.dtype)
        body: Stmt = self._guard(st, Store(lay.buffer, index, init), False, overhang)
        for v in reversed(st.leaves[p:]):
            if v not in st.is_reduce_var:
                body = For(v, lay.leaf_ext[v], body, st.kind[v])
        return body

    def lower(self) -> PrimFunc:
        self.compute_layouts()
        placed = {n for n, lay in self.layout.items() if lay.buffer.pitch is not None}
        placed |= set(self.state.inputs)
        if missing := [n for n in self.pitches if n not in placed]:
            raise ScheduleError(f"{self.name}: pitched buffer {missing[0]} is not an input or a root output")
        self.all_bounds = {v: (0, e - 1) for lay in self.layout.values() for v, e in lay.leaf_ext.items()}
        self.param_ids = {id(b) for b in self.params.values()}
        self.slack: dict[int, tuple[Buffer, int]] = {}
        segments: list[Stmt] = []
        for st in self.stages:
            if st.attach is None:
                segments.append(self.nest(st))
        outs = [self.layout[s.name].buffer for s in self.stages if s.is_output]
        ws = [self.layout[s.name].buffer for s in self.stages if s.attach is None and not s.is_output]
        params = tuple(self.params[t.name] for t in self.state.cdef.inputs) + tuple(outs)
        for b, extra in self.slack.values():
            # grow the leading dimension: row-major strides ignore it, so every index stays valid
            # and anyone allocating from `shape` allocates the slack too
            stride = b.size // b.shape[0]
            grown = (b.shape[0] + -(-extra // stride), *b.shape[1:])
            object.__setattr__(b, "shape", grown)  # set once, before the buffer leaves the lowering
        body = simplify_stmt(seq(segments)) or seq([])
        return PrimFunc(self.name, params, tuple(ws), body)


def _combine(combiner: str, acc: Expr, value: Expr) -> Expr:
    op = {"sum": "add", "max": "max", "min": "min", "prod": "mul"}[combiner]
    return Bin(op, acc, value, value.dtype)


def _identity(combiner: str, dtype: str) -> Const:
    import numpy as np

    if combiner in ("sum", "prod"):
        one = int(combiner == "prod")
        return Const(float(one) if dtype.startswith("float") else one, dtype)
    if dtype.startswith("float"):
        return Const(float("-inf") if combiner == "max" else float("inf"), dtype)
    info = np.iinfo(dtype)
    return Const(int(info.min if combiner == "max" else info.max), dtype)
