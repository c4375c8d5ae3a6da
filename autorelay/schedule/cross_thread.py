"""Lowering of a `CrossThreadReduce` stage: a block of T threads per output element.

One thread per output element reducing serially leaves a GPU mostly idle when there are few
outputs and long reductions (softmax over 1000 classes at batch 1, global pooling, a sum over a
long axis): a few hundred threads each walk a thousand elements, with uncoalesced reads. Here each
output element is one block (blockIdx.x over the fused output axes) of T threads. First, thread t
folds reduction points k = t, t+T, t+2T, ... (the reduction axes fused, a guard for the ragged
end and for K < T) into a private accumulator that starts at the combiner's identity —
neighbouring threads read neighbouring elements when the reduction axis is innermost in memory.
Then the T partials are combined, in one of two ways.

With warp shuffles (the step's `warp` = W > 0, the target's warp size; T >= W and at most W
warps), as CUB's and TVM's block reductions do:

1. within each warp, for s = W/2, ..., 1, every lane combines its accumulator with lane l + s's
   (`shfl.sync.down`, `tir.nodes.shfl_down`): lane 0 then holds the warp's result. The lanes
   exchange registers directly, with no shared memory and no barrier;
2. if T > W: lane 0 of each warp stores it to `partial[warp]` in shared memory; one barrier;
   every warp reads the T/W partials (lanes past them take the identity) and combines them by
   shuffles again. Every warp does this second round, not only the first, because a shuffle must
   be reached by whole warps and a condition on the thread index around it is refused (the other
   warps would be idle anyway, and the reads of `partial` are broadcasts);
3. thread 0 stores the result.

One barrier instead of log2(T) + 1, and the shared-memory traffic of the last five rounds (those
within a warp, where the tree left most threads idle) is gone. The same work with fewer barriers
and no shared-memory round trips: there is no case for the tree to win, so this is the target's
choice (the template passes its warp size), not a tuning knob. Shuffles move any dtype: the
emitter splits a 64-bit value into two 32-bit shuffles and widens narrower ones.

Without (`warp` = 0, or T < W, or W > 32, the lanes `shfl.sync` spans, or more than W warps: a
second round of shuffles could not hold every partial), the shared-memory tree of the first
versions: thread t stores its accumulator to `partial[t]`; for s = T/2, T/4, ..., 1, threads
t < s set `partial[t] = combine(partial[t], partial[t+s])`, a barrier before every round (the
partials it reads were written by other threads in the round before), outside the `t < s`
condition since every thread of the block must reach it (`codegen.nvptx.launch`); thread 0
stores `partial[0]`.

Each stage stays its own kernel (segment): a later stage that needs the row statistic (softmax's
normalisation) reads it from global memory in the next kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from autorelay.errors import ScheduleError
from autorelay.schedule.lower import _combine, _identity
from autorelay.schedule.state import Stage
from autorelay.te.expr import Bin, Cmp, Const, Expr, Load, Var
from autorelay.tir.nodes import Allocate, Barrier, Buffer, For, If, Stmt, Store, seq, shfl_down

if TYPE_CHECKING:
    from autorelay.schedule.lower import Lowerer


_SHFL_LANES = 32  # `shfl.sync` moves values within 32 lanes: a wider "warp" cannot use it


def _unflatten(i: Expr, extents: list[int]) -> list[Expr]:
    """Row-major indices of flat position `i` in a box of `extents`."""
    out: list[Expr] = []
    stride = math.prod(extents)
    for e in extents:
        stride //= e
        q = Bin("floordiv", i, Const(stride, "int64"), "int64") if stride > 1 else i
        out.append(Bin("mod", q, Const(e, "int64"), "int64") if out else q)
    return out


def _check(lw: Lowerer, st: Stage) -> None:
    if st.attach is not None or st.rels or any(k != "serial" for k in st.kind.values()):
        raise ScheduleError(f"CrossThreadReduce {st.name}: the stage must keep its root loops "
                            "(no Split, Fuse, Bind, ComputeAt … on it)")
    if any(s.attach is not None and s.attach[0] == st.name for s in lw.stages):
        raise ScheduleError(f"CrossThreadReduce {st.name}: no stage may be computed at its loops")


def _threads(name: str, t: int, body: Callable[[Var], Stmt]) -> For:
    """A loop over the block's `t` threads whose body is `body(thread index)`."""
    v = Var(name)
    return For(v, t, body(v), "threadIdx.x")


def cross_thread_nest(lw: Lowerer, st: Stage) -> Stmt:
    """The kernel (segment) that computes `st` with `st.cross_threads` threads per output."""
    _check(lw, st)
    assert st.combiner is not None
    threads, warp, dtype, comb = st.cross_threads, st.cross_warp, st.tensor.dtype, st.combiner
    lay = lw.layout[st.name]
    out_ext = [lay.root_ext[a.var] for a in st.axes]
    red_ext = [a.extent for a in st.raxes]
    k_total = math.prod(red_ext)
    block = Var(f"{st.name}.xb")
    out_idx = _unflatten(block, out_ext) if out_ext else []
    spatial: dict[Var, Expr] = {a.var: e for a, e in zip(st.axes, out_idx)}
    acc = Buffer(f"{st.name}_acc", (1,), dtype, "local")
    zero = Const(0, "int64")
    result = Store(lay.buffer, lay.flat(out_idx), Load(acc, zero, dtype))

    def fold(t: Var) -> list[Stmt]:
        ko = Var(f"{st.name}.xk")
        k = Bin("add", Bin("mul", ko, Const(threads, "int64"), "int64"), t, "int64")
        vals = {**spatial, **{a.var: e for a, e in zip(st.raxes, _unflatten(k, red_ext))}}
        step = Store(acc, zero, _combine(comb, Load(acc, zero, dtype), lw.element(st, vals)))
        loop = For(ko, -(-k_total // threads), If(Cmp("lt", k, Const(k_total, "int64")), step))
        return [Store(acc, zero, _identity(comb, dtype)), loop]

    if 0 < warp <= min(threads, _SHFL_LANES) and threads <= warp * warp:
        body = _by_shuffles(st, threads, warp, acc, fold, result)
    else:
        body = _by_shared_tree(st, threads, acc, fold, result)
    return For(block, math.prod(out_ext), body, "blockIdx.x")


def _shuffle_rounds(acc: Buffer, comb: str, top: int, warp: int) -> list[Stmt]:
    """acc = combine(acc, acc of lane + s) for s = top, top/2, ..., 1: lane 0 gets lanes 0..2 top-1."""
    zero, out, s = Const(0, "int64"), [], top
    while s >= 1:
        mine = Load(acc, zero, acc.dtype)
        out.append(Store(acc, zero, _combine(comb, mine, shfl_down(mine, s, warp))))
        s //= 2
    return out


def _by_shuffles(st: Stage, threads: int, warp: int, acc: Buffer, fold: Callable[[Var], list[Stmt]],
                 result: Store) -> Stmt:
    """Fold, shuffles within each warp, per-warp partials through shared memory, shuffles again."""
    assert st.combiner is not None
    comb, dtype, zero, w = st.combiner, acc.dtype, Const(0, "int64"), Const(warp, "int64")
    warps = threads // warp
    part = Buffer(f"{st.name}_partial", (warps,), dtype, "shared")

    def reduce_warp(t: Var) -> Stmt:
        if warps == 1:
            keep: Stmt = If(Cmp("eq", t, zero), result)
        else:
            lane0 = Cmp("eq", Bin("mod", t, w, "int64"), zero)
            keep = If(lane0, Store(part, Bin("floordiv", t, w, "int64"), Load(acc, zero, dtype)))
        return Allocate(acc, seq([*fold(t), *_shuffle_rounds(acc, comb, warp // 2, warp), keep]))

    if warps == 1:  # one warp: no shared memory, no barrier
        return _threads(f"{st.name}.xt", threads, reduce_warp)

    wacc = Buffer(f"{st.name}_wacc", (1,), dtype, "local")
    final = Store(result.buffer, result.index, Load(wacc, zero, dtype))

    def reduce_partials(t: Var) -> Stmt:
        lane = Bin("mod", t, w, "int64")
        init = If(Cmp("lt", lane, Const(warps, "int64")), Store(wacc, zero, Load(part, lane, dtype)),
                  Store(wacc, zero, _identity(comb, dtype)))
        return Allocate(wacc, seq([init, *_shuffle_rounds(wacc, comb, warps // 2, warp),
                                   If(Cmp("eq", t, zero), final)]))

    return Allocate(part, seq([_threads(f"{st.name}.xt", threads, reduce_warp), Barrier(),
                               _threads(f"{st.name}.xtw", threads, reduce_partials)]))


def _by_shared_tree(st: Stage, threads: int, acc: Buffer, fold: Callable[[Var], list[Stmt]],
                    result: Store) -> Stmt:
    """Fold, then a shared-memory tree with a barrier before every round."""
    assert st.combiner is not None
    comb, dtype, zero = st.combiner, acc.dtype, Const(0, "int64")
    part = Buffer(f"{st.name}_partial", (threads,), dtype, "shared")

    def first(t: Var) -> Stmt:
        return Allocate(acc, seq([*fold(t), Store(part, t, Load(acc, zero, dtype))]))

    def round_(s: int) -> Callable[[Var], Stmt]:
        def body(t: Var) -> Stmt:
            other = Load(part, Bin("add", t, Const(s, "int64"), "int64"), dtype)
            both = _combine(comb, Load(part, t, dtype), other)
            return If(Cmp("lt", t, Const(s, "int64")), Store(part, t, both))
        return body

    stmts: list[Stmt] = [_threads(f"{st.name}.xt", threads, first)]
    s = threads // 2
    while s >= 1:
        stmts += [Barrier(), _threads(f"{st.name}.xt{s}", threads, round_(s))]
        s //= 2
    final = Store(result.buffer, result.index, Load(part, zero, dtype))
    stmts.append(_threads(f"{st.name}.xt0", threads, lambda t: If(Cmp("eq", t, zero), final)))
    return Allocate(part, seq(stmts))
