"""Lowering of a `CrossThreadReduce` stage: a block of T threads per output element.

One thread per output element reducing serially leaves a GPU mostly idle when there are few
outputs and long reductions (softmax over 1000 classes at batch 1, global pooling, a sum over a
long axis): a few hundred threads each walk a thousand elements, with uncoalesced reads. Here each
output element is one block (blockIdx.x over the fused output axes) of T threads:

1. thread t folds reduction points k = t, t+T, t+2T, ... (the reduction axes fused, a guard for
   the ragged end and for K < T) into a private accumulator that starts at the combiner's identity,
   and stores it to `partial[t]` in shared memory — neighbouring threads read neighbouring
   elements when the reduction axis is innermost in memory;
2. a tree: for s = T/2, T/4, ..., 1, threads t < s set `partial[t] = combine(partial[t],
   partial[t+s])`. A barrier precedes every round (the partials it reads were written by other
   threads in the round before) and sits outside the `t < s` condition, since a barrier must be
   reached by every thread of the block (`codegen.nvptx.launch`);
3. thread 0 stores `partial[0]` (which it wrote itself in the last round: no barrier needed).

Each stage stays its own kernel (segment): a later stage that needs the row statistic (softmax's
normalisation) reads it from global memory in the next kernel. No warp shuffles yet: the last
five rounds go through shared memory like the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from autorelay.errors import ScheduleError
from autorelay.schedule.lower import _combine, _identity
from autorelay.schedule.state import Stage
from autorelay.te.expr import Bin, Cmp, Const, Expr, Load, Var
from autorelay.tir.nodes import Allocate, Barrier, Buffer, For, If, Stmt, Store, seq

if TYPE_CHECKING:
    from autorelay.schedule.lower import Lowerer


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
    threads, dtype, comb = st.cross_threads, st.tensor.dtype, st.combiner
    lay = lw.layout[st.name]
    out_ext = [lay.root_ext[a.var] for a in st.axes]
    red_ext = [a.extent for a in st.raxes]
    k_total = math.prod(red_ext)
    block = Var(f"{st.name}.xb")
    out_idx = _unflatten(block, out_ext) if out_ext else []
    spatial: dict[Var, Expr] = {a.var: e for a, e in zip(st.axes, out_idx)}
    part = Buffer(f"{st.name}_partial", (threads,), dtype, "shared")
    acc = Buffer(f"{st.name}_acc", (1,), dtype, "local")
    zero = Const(0, "int64")

    def fold(t: Var) -> Stmt:
        ko = Var(f"{st.name}.xk")
        k = Bin("add", Bin("mul", ko, Const(threads, "int64"), "int64"), t, "int64")
        vals = {**spatial, **{a.var: e for a, e in zip(st.raxes, _unflatten(k, red_ext))}}
        step = Store(acc, zero, _combine(comb, Load(acc, zero, dtype), lw.element(st, vals)))
        loop = For(ko, -(-k_total // threads), If(Cmp("lt", k, Const(k_total, "int64")), step))
        return Allocate(acc, seq([Store(acc, zero, _identity(comb, dtype)), loop,
                                  Store(part, t, Load(acc, zero, dtype))]))

    def round_(s: int) -> Callable[[Var], Stmt]:
        def body(t: Var) -> Stmt:
            other = Load(part, Bin("add", t, Const(s, "int64"), "int64"), dtype)
            both = _combine(comb, Load(part, t, dtype), other)
            return If(Cmp("lt", t, Const(s, "int64")), Store(part, t, both))
        return body

    stmts: list[Stmt] = [_threads(f"{st.name}.xt", threads, fold)]
    s = threads // 2
    while s >= 1:
        stmts += [Barrier(), _threads(f"{st.name}.xt{s}", threads, round_(s))]
        s //= 2
    result = Store(lay.buffer, lay.flat(out_idx), Load(part, zero, dtype))
    stmts.append(_threads(f"{st.name}.xt0", threads, lambda t: If(Cmp("eq", t, zero), result)))
    return For(block, math.prod(out_ext), Allocate(part, seq(stmts)), "blockIdx.x")
