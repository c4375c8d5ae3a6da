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

A barrier splits the per-thread program into phases, each run for all threads before the next:
the loops around a barrier run once (every thread runs them alike), a shared buffer is one per
block, and a thread's private buffer that lives across a barrier gets one copy per thread. Without
a barrier between a shared-memory copy and its use, threads read parts not yet copied and the
emulation is wrong, as the GPU would be.
"""

from __future__ import annotations

import numpy as np

from autorelay.codegen.llvm.backend import CPU_BACKEND
from autorelay.codegen.llvm.host import host_target
from autorelay.codegen.nvptx.launch import launch_of, peel_blocks
from autorelay.errors import ScheduleError
from autorelay.kernel import KernelCode, load_kernel
from autorelay.te.expr import Bin, Cmp, Const, Expr, Load, Var, free_vars, transform
from autorelay.tir.nodes import (
    THREAD_TAGS,
    Allocate,
    Barrier,
    Buffer,
    For,
    If,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    seq,
    walk_stmts,
)
from autorelay.tir.printer import structural_hash
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


def _all_threads(s: Stmt, tids: dict[str, Var], block: dict[str, int], reverse: bool) -> Stmt:
    """`s` (a per-thread program) run by every thread of the block, one after another."""
    for tag in THREAD_TAGS:  # x innermost: the order of a warp's lanes
        n = block[tag]
        loop_var = Var(f"emu.loop.{tag}")
        index: Expr = Bin("sub", Const(n - 1, "int64"), loop_var, "int64") if reverse else loop_var
        s = For(loop_var, n, substitute_stmt(s, {tids[tag]: index}))
    return s


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(t, Barrier) for t in walk_stmts(s))


def _phases(s: Stmt, tids: dict[str, Var], block: dict[str, int], reverse: bool) -> Stmt:
    """The per-thread program `s` for all threads: barrier-free parts run thread by thread; a
    barrier ends one phase (every thread's part) before the next begins."""
    if not _has_barrier(s):
        return _all_threads(s, tids, block, reverse)
    if isinstance(s, Barrier):
        return Seq(())
    if isinstance(s, Seq):
        out: list[Stmt] = []
        run: list[Stmt] = []
        for t in [*s.stmts, None]:
            if t is None or _has_barrier(t):
                if run:
                    out.append(_all_threads(seq(run), tids, block, reverse))
                    run = []
                if t is not None:
                    out.append(_phases(t, tids, block, reverse))
            else:
                run.append(t)
        return seq(out)
    if isinstance(s, For):  # a loop every thread runs alike (its bounds do not depend on the thread)
        kind = s.kind if s.kind in ("serial", "unrolled") else "serial"
        return For(s.var, s.extent, _phases(s.body, tids, block, reverse), kind)
    if isinstance(s, If):
        if free_vars(s.cond) & set(tids.values()):
            raise ScheduleError("a barrier is under a condition on the thread index")
        return If(s.cond, _phases(s.then, tids, block, reverse),
                  None if s.orelse is None else _phases(s.orelse, tids, block, reverse))
    if isinstance(s, Allocate) and s.buffer.scope != "shared":
        # private memory live across a barrier: one copy per thread, indexed by the thread
        b = s.buffer
        n = block["threadIdx.x"] * block["threadIdx.y"] * block["threadIdx.z"]
        mine = Buffer(f"{b.name}.threads", (n * b.size,), b.dtype, "local")
        lin: Expr = tids["threadIdx.z"]
        for tag in ("threadIdx.y", "threadIdx.x"):
            lin = Bin("add", Bin("mul", lin, Const(block[tag], "int64"), "int64"), tids[tag], "int64")
        offset = Bin("mul", lin, Const(b.size, "int64"), "int64")
        return Allocate(mine, _phases(_rebuffer(s.body, b, mine, offset), tids, block, reverse))
    assert isinstance(s, Allocate)
    return Allocate(s.buffer, _phases(s.body, tids, block, reverse))


def _rebuffer(s: Stmt, old: Buffer, new: Buffer, offset: Expr) -> Stmt:
    """`s` with every access of `old` made to `new` at `offset` further."""

    def fix(e: Expr) -> Expr:
        return transform(e, lambda n: Load(new, Bin("add", fix(n.index), offset, "int64"), n.dtype)
                         if isinstance(n, Load) and n.buffer is old else None)

    if isinstance(s, Store):
        idx = fix(s.index)
        if s.buffer is old:
            return Store(new, Bin("add", idx, offset, "int64"), fix(s.value))
        return Store(s.buffer, idx, fix(s.value))
    if isinstance(s, For):
        return For(s.var, s.extent, _rebuffer(s.body, old, new, offset), s.kind)
    if isinstance(s, Seq):
        return Seq(tuple(_rebuffer(t, old, new, offset) for t in s.stmts))
    if isinstance(s, If):
        return If(fix(s.cond), _rebuffer(s.then, old, new, offset),
                  None if s.orelse is None else _rebuffer(s.orelse, old, new, offset))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _rebuffer(s.body, old, new, offset))
    return s


def emulate_segment(seg: Stmt, reverse: bool = False) -> Stmt:
    """One kernel as serial CPU loops (see the module docstring)."""
    launch = launch_of(seg)
    blocks, body = peel_blocks(seg)
    block = {tag: launch.extent(tag) for tag in THREAD_TAGS}
    tids = {tag: Var(f"emu.{tag}") for tag in THREAD_TAGS}
    out = _phases(_per_thread(body, tids, block), tids, block, reverse)
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
    key = structural_hash(func, f"emulated|{cpu.key()}")  # the kernel cache's key: the emulated IR
    cpu_code = KernelCode(code.cdef, func, code.steps, code.relayouts,
                          CPU_BACKEND.emit(func, cpu, f"emu_{key[:16]}"), key, cpu)
    return load_kernel(cpu_code).run(*arrays)


def run_both_orders(code: KernelCode, *arrays: np.ndarray) -> list:
    """The emulated outputs with threads in launch order and reversed."""
    return [emulate(code, *arrays, reverse=r) for r in (False, True)]


__all__ = ["emulate", "emulate_func", "emulate_segment", "run_both_orders"]
