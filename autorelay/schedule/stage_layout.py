"""Where a stage's values lie, worked out before any loop is emitted (`schedule.lower` step 1).

For each stage: the extent of every leaf loop its splits and fuses leave, each root axis as an
expression in those leaves, the guards a ragged split needs, the order of its buffer's dimensions
(a local buffer puts its vectorized axis last, so a register tile's accumulators are whole vectors
at constant offsets) and, for a stage computed at a consumer's loop, the region of it that one
iteration of that loop reads (`bound_region`): the interval of the consumer's read indices over the
loops inside the attach point, at an offset that depends only on the loops outside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorelay.errors import ScheduleError
from autorelay.schedule.state import Stage
from autorelay.te.expr import Bin, Cmp, Const, Expr, Read, Var
from autorelay.te.traverse import distinct_nodes, free_vars, substitute
from autorelay.tir.linear_form import from_linear, linear
from autorelay.tir.nodes import Buffer
from autorelay.tir.simplify import interval, simplify

Bounds = dict[Var, tuple[int, int]]


@dataclass
class StageLayout:
    """Per-stage lowering facts: root extents, base offsets (regions), leaf extents, buffer."""

    root_ext: dict[Var, int]
    base: list[Expr]
    leaf_ext: dict[Var, int]
    env: dict[Var, Expr]  # every relation var (root/leaf/intermediate) -> expression in leaves
    guards: list[tuple[Expr, bool, bool]]  # (condition, involves a reduction var, region overhang)
    buffer: Buffer
    perm: list[int]  # buffer dimension order (a local buffer puts its vectorized axis last)
    clamped: tuple[int, ...] = ()  # dimensions whose region was shifted inside the tensor (`bound_region`)

    def flat(self, idx: list[Expr]) -> Expr:
        return flat_index([idx[d] for d in self.perm], self.buffer.strides_shape)


def vector_last_perm(st: Stage) -> list[int]:
    """Dimension order that makes the root axis of the stage's vectorized leaf innermost."""
    origin: dict[Var, Var] = {st.root_leaf[a.var]: a.var for a in st.axes + st.raxes}
    for rel in st.rels:
        if rel[0] == "split":
            origin[rel[2]] = origin[rel[3]] = origin[rel[1]]
        else:
            origin[rel[3]] = origin[rel[2]]
    dims = list(range(len(st.axes)))
    vec = [v for v in st.leaves if st.kind[v] == "vectorized"]
    if st.scope == "local" and vec:
        root = origin[vec[0]]
        pos = [d for d, a in enumerate(st.axes) if a.var is root]
        if pos:
            dims = [d for d in dims if d != pos[0]] + [pos[0]]
    return dims


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def leaf_extents(st: Stage, root_ext: dict[Var, int]) -> tuple[dict[Var, int], dict[Var, Expr], list]:
    """The extent of every relation variable, each one as an expression in the leaf loops, and the
    guards of the splits whose tiles run past their axis (those that may not shift the last tile
    back instead)."""
    ext: dict[Var, int] = {st.root_leaf[a.var]: root_ext[a.var] for a in st.axes + st.raxes}
    guards_rel = []
    shifted: set[Var] = set()
    for rel in st.rels:
        if rel[0] == "split":
            _, p, o, i, f, shift = rel
            ext[o], ext[i] = _ceil(ext[p], f), min(f, ext[p]) if ext[p] < f else f
            if ext[o] * ext[i] != ext[p]:
                if shift and ext[p] >= f:
                    shifted.add(p)
                else:
                    guards_rel.append(p)
        else:
            _, a, b, f = rel
            ext[f] = ext[a] * ext[b]
    if shifted and st.raxes and st.scope != "local":
        # two tiles would both initialise and accumulate the overlap in the same memory
        raise ScheduleError(f"stage {st.name}: a reduction written to memory cannot shift a split's tail")
    env: dict[Var, Expr] = {v: v for v in st.leaves}
    for rel in reversed(st.rels):
        if rel[0] == "split":
            _, p, o, i, f, _shift = rel
            start: Expr = Bin("mul", env[o], Const(f, "int64"), "int64")
            if p in shifted:  # the last tile starts f before the end instead of running past it
                start = Bin("min", start, Const(ext[p] - f, "int64"), "int64")
            env[p] = Bin("add", start, env[i], "int64")
        else:
            _, a, b, f = rel
            env[a] = Bin("floordiv", env[f], Const(ext[b], "int64"), "int64")
            env[b] = Bin("mod", env[f], Const(ext[b], "int64"), "int64")
    guards = [(Cmp("lt", env[p], Const(ext[p], "int64")), p in st.is_reduce_var, False) for p in guards_rel]
    return ext, env, guards


# one read of the producer by a consumer: the read, the consumer's root axes in its leaves, the
# bounds of all its leaves, and those of the loops inside the attach point
RegionRead = tuple[Read, dict[Var, Expr], Bounds, Bounds]


def bound_region(prod: Stage, cons: Stage, reads: list[RegionRead]
                 ) -> tuple[list[Expr], list[int], tuple[int, ...]]:
    """Base expressions and extents of the region of `prod` that `reads` touch within one
    iteration of `prod`'s attach loop in `cons`: each index is a linear form whose terms in the
    inner loops span an interval and whose other terms give the base; every read must sit at a
    constant offset from the first.

    An index clamped into a range (an inlined pad reads its input at `max(min(j, n - 1), 0)`) is
    bounded by its unclamped form's interval, and that interval is then shifted into the range
    (`_clamp_region`): the region never leaves the tensor, so the producer computes no row outside
    it, and it still holds every value the clamped index can take. Those dimensions are returned
    too: a read's offset into such a region is clamped to it (`Lowerer._load`), a no-op that lets
    the verifier's interval arithmetic prove what it cannot see (the index and the region's start
    move together)."""
    assert prod.attach is not None
    bases: list[Expr | None] = [None] * len(prod.axes)
    lo_hi: list[tuple[int, int]] = [(0, 0)] * len(prod.axes)
    clamps: list[tuple[int | None, int | None] | None] = [None] * len(prod.axes)
    for r, vals, all_b, inner in reads:
        for d, idx in enumerate(r.indices):
            idx = simplify(substitute(idx, vals), all_b)
            fv = free_vars(idx)
            clamp = _clamp_of(idx) if fv & inner.keys() and not fv <= inner.keys() else None
            if clamp is not None:
                idx, clamp = clamp[0], clamp[1:]
            if bases[d] is not None and clamp != clamps[d]:
                raise ScheduleError(f"ComputeAt {prod.name}: reads of {prod.name} in {cons.name} clamp "
                                    f"dimension {d} differently")
            clamps[d] = clamp
            terms, c = linear(idx)
            outer_terms: dict[Expr, int] = {}
            lo = hi = 0
            for atom, k in terms.items():
                fv = free_vars(atom)
                if not fv & inner.keys():
                    outer_terms[atom] = k
                    continue
                if not fv <= inner.keys():
                    raise ScheduleError(
                        f"ComputeAt {prod.name}: cannot bound index {idx} of {prod.name} at "
                        f"{cons.name}.{prod.attach[1].name} (mixes loops inside and outside it)"
                    )
                iv = interval(atom, inner)
                assert iv is not None
                a, b = k * iv[0], k * iv[1]
                lo, hi = lo + min(a, b), hi + max(a, b)
            base = from_linear(outer_terms, c)
            if bases[d] is None:
                bases[d], lo_hi[d] = base, (lo, hi)
            else:
                diff = simplify(Bin("sub", base, bases[d], "int64"))
                if not isinstance(diff, Const):
                    raise ScheduleError(f"ComputeAt {prod.name}: reads at unrelated offsets in {cons.name}")
                off = int(diff.value)
                lo_hi[d] = (min(lo_hi[d][0], lo + off), max(lo_hi[d][1], hi + off))
    out_base: list[Expr] = []
    extents: list[int] = []
    for b, (lo, hi), clamp in zip(bases, lo_hi, clamps):
        start = simplify(Bin("add", b, Const(lo, "int64"), "int64"))
        n = hi - lo + 1
        if clamp is not None:
            start, n = _clamp_region(start, n, *clamp)
        out_base.append(start)
        extents.append(n)
    return out_base, extents, tuple(d for d, c in enumerate(clamps) if c is not None)


def _clamp_of(e: Expr) -> tuple[Expr, int | None, int | None] | None:
    """`e` as (j, lo, hi) when it is j clamped into [lo, hi] by constant bounds (`max(min(j, hi),
    lo)`, either order, or one side alone); else None."""
    lo = hi = None
    while isinstance(e, Bin) and e.op in ("max", "min") and isinstance(e.b, Const):
        if e.op == "max" and lo is None:
            lo = int(e.b.value)
        elif e.op == "min" and hi is None:
            hi = int(e.b.value)
        else:
            break
        e = e.a
    return None if lo is None and hi is None else (e, lo, hi)


def _clamp_region(start: Expr, n: int, lo: int | None, hi: int | None) -> tuple[Expr, int]:
    """The region [start, start + n) of an index, shifted to lie inside [lo, hi] (as a ragged split's
    last tile is shifted back). Clamping is monotone, so the clamped values of [start, start + n)
    lie between clamp(start) and clamp(start + n - 1), which this region holds."""
    if lo is not None and hi is not None:
        n = min(n, hi - lo + 1)
    if lo is not None:
        start = Bin("max", start, Const(lo, "int64"), "int64")
    if hi is not None:
        start = Bin("min", start, Const(hi - n + 1, "int64"), "int64")
    return simplify(start), n


def reads_of(e: Expr) -> list[Read]:
    """The tensor reads of a stage's body, each node once."""
    return [n for n in distinct_nodes(e) if isinstance(n, Read)]


def flat_index(idx: list[Expr], shape: tuple[int, ...]) -> Expr:
    """The row-major offset of `idx` in a buffer of `shape`."""
    out: Expr = Const(0, "int64")
    stride = 1
    for i, s in reversed(list(zip(idx, shape))):
        out = Bin("add", out, Bin("mul", i, Const(stride, "int64"), "int64"), "int64")
        stride *= s
    return out
