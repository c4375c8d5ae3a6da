"""Run GPU-scheduled loop IR on the CPU: blocks and threads become loops, so a wrong GPU schedule
gives a wrong answer in CI, where there is no GPU.

Each kernel (segment) becomes serial loops over its grid, and inside each block serial loops over
its threads (x fastest) around the *per-thread program*: the block's body with every loop bound to
`threadIdx.t` replaced by its body at `t` (guarded where the loop is shorter than the launch) —
exactly what each GPU thread executes, code outside thread loops included. Threads of a block run
one after another, in launch order or reversed (`reverse=True`): a kernel whose threads race
(one reads what another writes without a barrier between) gives different answers in the two
orders. A thread's local (private) buffers start as NaN, so a schedule that reads what another
thread computed into its own registers fails. The result is plain loop IR, compiled and run by
the CPU backend.

Barriers and shared memory are not emitted by any schedule yet; when they are, a barrier splits
the per-thread program into phases, each run for all threads before the next.
"""

from __future__ import annotations

import numpy as np

from autorelay.codegen.llvm.backend import CPU_BACKEND
from autorelay.codegen.llvm.host import host_target
from autorelay.codegen.nvptx.launch import launch_of, peel_blocks
from autorelay.kernel import KernelCode, load_kernel
from autorelay.te.expr import Bin, Cmp, Const, Expr, Var
from autorelay.tir.nodes import THREAD_TAGS, Allocate, For, If, PrimFunc, Seq, Stmt, Store
from autorelay.tir.simplify import simplify_stmt, substitute_stmt
from autorelay.tir.verify import verify


def _per_thread(s: Stmt, tids: dict[str, Var], block: dict[str, int]) -> Stmt:
    """`s` as one thread runs it: thread loops become their body at that thread's index."""
    if isinstance(s, For):
        body = _per_thread(s.body, tids, block)
        if s.kind not in THREAD_TAGS:
            return For(s.var, s.extent, body, s.kind)
        t = tids[s.kind]
        body = substitute_stmt(body, {s.var: t})
        return body if s.extent == block[s.kind] else If(Cmp("lt", t, Const(s.extent, "int64")), body)
    if isinstance(s, Seq):
        return Seq(tuple(_per_thread(t, tids, block) for t in s.stmts))
    if isinstance(s, If):
        return If(s.cond, _per_thread(s.then, tids, block),
                  None if s.orelse is None else _per_thread(s.orelse, tids, block))
    if isinstance(s, Allocate):
        body = _per_thread(s.body, tids, block)
        if s.buffer.dtype.startswith("float"):  # a thread's private memory starts undefined: NaN
            i = Var(f"emu.init.{s.buffer.name}")
            body = Seq((For(i, s.buffer.size, Store(s.buffer, i, Const(float("nan"), s.buffer.dtype))), body))
        return Allocate(s.buffer, body)
    return s


def emulate_segment(seg: Stmt, reverse: bool = False) -> Stmt:
    """One kernel as serial CPU loops (see the module docstring)."""
    launch = launch_of(seg)
    blocks, body = peel_blocks(seg)
    block = {tag: launch.extent(tag) for tag in THREAD_TAGS}
    tids = {tag: Var(f"emu.{tag}") for tag in THREAD_TAGS}
    out = _per_thread(body, tids, block)
    for tag in THREAD_TAGS:  # x innermost: the order of a warp's lanes
        n = block[tag]
        loop_var = Var(f"emu.loop.{tag}")
        index: Expr = Bin("sub", Const(n - 1, "int64"), loop_var, "int64") if reverse else loop_var
        out = For(loop_var, n, substitute_stmt(out, {tids[tag]: index}))
    for loop in reversed(blocks):
        out = For(loop.var, loop.extent, out)
    return out


def emulate_func(f: PrimFunc, reverse: bool = False) -> PrimFunc:
    segs = f.body.stmts if isinstance(f.body, Seq) else (f.body,)
    body = simplify_stmt(Seq(tuple(emulate_segment(s, reverse) for s in segs))) or Seq(())
    out = f.with_body(body)
    verify(out)
    return out


def emulate(code: KernelCode, *arrays: np.ndarray,
            reverse: bool = False) -> np.ndarray | tuple[np.ndarray, ...]:
    """Run the GPU kernel `code` (from `emit_kernel(..., target=cuda)`) on the CPU; returns its
    outputs like `Kernel.run`."""
    func = emulate_func(code.func, reverse)
    cpu = host_target().with_threads(1)
    symbol = f"emu_{code.key[:16]}"
    cpu_code = KernelCode(code.cdef, func, code.steps, code.relayouts, CPU_BACKEND.emit(func, cpu, symbol),
                          f"{symbol}{'r' if reverse else ''}|{cpu.key()}", cpu)
    return load_kernel(cpu_code).run(*arrays)


def run_both_orders(code: KernelCode, *arrays: np.ndarray) -> list:
    """The emulated outputs with threads in launch order and reversed."""
    return [emulate(code, *arrays, reverse=r) for r in (False, True)]


__all__ = ["emulate", "emulate_func", "emulate_segment", "run_both_orders"]
