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

A warp shuffle (`tir.nodes.shfl_down`) reads a register of another lane, so between barriers a
part holding shuffles runs warp by warp (lanes in order or reversed, warps too), and within a
warp a shuffle splits the lanes' program into phases as a barrier splits the block's: every lane
first writes the shuffled value to its slot of a per-warp exchange buffer, then every lane reads
its partner's slot (lane + offset, its own past the warp's end). A wrong offset or a missing
shuffle reads the wrong value; since only the warp synchronises there, a read of shared memory
that another warp writes still needs a barrier to come out right in both orders.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.codegen.llvm.backend import CPU_BACKEND
from autorelay.codegen.llvm.host import host_target
from autorelay.codegen.nvptx.launch import launch_of, peel_blocks
from autorelay.errors import ScheduleError
from autorelay.kernel import KernelCode, load_kernel
from autorelay.te.expr import Bin, Call, Cmp, Const, Expr, Load, Var
from autorelay.te.traverse import free_vars, transform
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
    shuffles,
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


def _is_barrier(s: Stmt) -> bool:
    return isinstance(s, Barrier)


def _is_shuffle(s: Stmt) -> bool:
    return isinstance(s, Store) and bool(shuffles(s.value))


def _holds(s: Stmt, is_sync: Callable[[Stmt], bool]) -> bool:
    return any(is_sync(t) for t in walk_stmts(s))


class _Block:
    """The threads of one block as the emulation runs them (see the module docstring)."""

    def __init__(self, tids: dict[str, Var], block: dict[str, int], reverse: bool) -> None:
        self.tids, self.block, self.reverse = tids, block, reverse
        self.n = block["threadIdx.x"] * block["threadIdx.y"] * block["threadIdx.z"]

    def linear(self) -> Expr:
        """The thread's linear index (x fastest: how a block's threads form warps)."""
        lin: Expr = self.tids["threadIdx.z"]
        for tag in ("threadIdx.y", "threadIdx.x"):
            scaled = Bin("mul", lin, Const(self.block[tag], "int64"), "int64")
            lin = Bin("add", scaled, self.tids[tag], "int64")
        return lin

    def phases(self, s: Stmt) -> Stmt:
        """Block level: a barrier ends one phase (every thread's part) before the next begins."""
        return self._split(s, _is_barrier, lambda _: Seq(()), self._run)

    def _run(self, s: Stmt) -> Stmt:
        return self._warps(s) if _holds(s, _is_shuffle) else _all_threads(s, self.tids, self.block,
                                                                         self.reverse)

    def _split(self, s: Stmt, is_sync: Callable[[Stmt], bool], at_sync: Callable[[Stmt], Stmt],
               run: Callable[[Stmt], Stmt]) -> Stmt:
        """`s` for all threads: sync-free parts by `run`, each sync point by `at_sync`, in order."""
        if not _holds(s, is_sync):
            return run(s)
        if is_sync(s):
            return at_sync(s)
        if isinstance(s, Seq):
            out: list[Stmt] = []
            part: list[Stmt] = []
            for t in [*s.stmts, None]:
                if t is None or _holds(t, is_sync):
                    if part:
                        out.append(run(seq(part)))
                        part = []
                    if t is not None:
                        out.append(self._split(t, is_sync, at_sync, run))
                else:
                    part.append(t)
            return seq(out)
        if isinstance(s, For):  # a loop every thread runs alike (its bounds do not depend on the thread)
            kind = s.kind if s.kind in ("serial", "unrolled") else "serial"
            return For(s.var, s.extent, self._split(s.body, is_sync, at_sync, run), kind)
        if isinstance(s, If):
            if free_vars(s.cond) & set(self.tids.values()):
                raise ScheduleError("a barrier or warp shuffle is under a condition on the thread index")
            return If(s.cond, self._split(s.then, is_sync, at_sync, run),
                      None if s.orelse is None else self._split(s.orelse, is_sync, at_sync, run))
        assert isinstance(s, Allocate)
        if s.buffer.scope == "shared":
            return Allocate(s.buffer, self._split(s.body, is_sync, at_sync, run))
        # private memory live across a sync point: one copy per thread, indexed by the thread
        b = s.buffer
        mine = Buffer(f"{b.name}.threads", (self.n * b.size,), b.dtype, "local")
        offset = Bin("mul", self.linear(), Const(b.size, "int64"), "int64")
        return Allocate(mine, self._split(_rebuffer(s.body, b, mine, offset), is_sync, at_sync, run))

    def _warps(self, s: Stmt) -> Stmt:
        """`s` (barrier-free, with shuffles) warp after warp; within a warp, a shuffle ends one
        phase (every lane's part) before the next."""
        widths = {int(c.args[2].value) for t in walk_stmts(s) if isinstance(t, Store)  # type: ignore[attr-defined]
                  for c in shuffles(t.value)}
        if len(widths) != 1:
            raise ScheduleError(f"warp shuffles of different widths {sorted(widths)} in one kernel")
        (width,) = widths
        if self.n % width:
            raise ScheduleError(f"a warp shuffle in a block of {self.n} threads, not a multiple of the "
                                f"warp ({width} lanes)")
        count = self.n // width
        loop = Var("emu.warp")
        warp: Expr = Bin("sub", Const(count - 1, "int64"), loop, "int64") if self.reverse else loop
        body = self._split(s, _is_shuffle, lambda t: self._exchange(t, warp, width),
                           lambda t: self._lanes(t, warp, width))
        return For(loop, count, body)

    def _lanes(self, s: Stmt, warp: Expr, width: int) -> Stmt:
        """`s` (a per-thread program) run by the lanes of warp `warp`, one after another."""
        loop = Var("emu.lane")
        lane: Expr = Bin("sub", Const(width - 1, "int64"), loop, "int64") if self.reverse else loop
        lin = Bin("add", Bin("mul", warp, Const(width, "int64"), "int64"), lane, "int64")
        x, y = self.block["threadIdx.x"], self.block["threadIdx.y"]
        at = {self.tids["threadIdx.x"]: Bin("mod", lin, Const(x, "int64"), "int64"),
              self.tids["threadIdx.y"]: Bin("mod", Bin("floordiv", lin, Const(x, "int64"), "int64"),
                                            Const(y, "int64"), "int64"),
              self.tids["threadIdx.z"]: Bin("floordiv", lin, Const(x * y, "int64"), "int64")}
        if x == self.n:
            at = {self.tids["threadIdx.x"]: lin, self.tids["threadIdx.y"]: Const(0, "int64"),
                  self.tids["threadIdx.z"]: Const(0, "int64")}
        return For(loop, width, substitute_stmt(s, at))

    def _exchange(self, s: Stmt, warp: Expr, width: int) -> Stmt:
        """A store holding shuffles: every lane writes each shuffled value to its slot of an
        exchange buffer; then every lane reads its partner's slot (lane + offset within the warp,
        or its own past the end, as `shfl.sync.down` does) in place of the shuffle."""
        assert isinstance(s, Store)
        calls = list(dict.fromkeys(shuffles(s.value)))
        if any(shuffles(a) for c in calls for a in c.args):
            raise ScheduleError("a warp shuffle of a value that is itself shuffled")
        lane = Bin("mod", self.linear(), Const(width, "int64"), "int64")
        slots = {c: Buffer(f"emu.shfl{k}", (width,), c.dtype, "local") for k, c in enumerate(calls)}

        def read(todo: list[Call], got: dict[Call, Expr]) -> Stmt:
            """The store with each shuffle replaced by its partner's slot (an If per shuffle)."""
            if not todo:
                value = transform(s.value, lambda n: got.get(n) if isinstance(n, Call) else None)
                return Store(s.buffer, s.index, value)
            c, rest = todo[0], todo[1:]
            there = Bin("add", lane, Const(int(c.args[1].value), "int64"), "int64")  # type: ignore[attr-defined]
            return If(Cmp("lt", there, Const(width, "int64")),
                      read(rest, {**got, c: Load(slots[c], there, c.dtype)}),
                      read(rest, {**got, c: Load(slots[c], lane, c.dtype)}))

        write = seq([Store(b, lane, c.args[0]) for c, b in slots.items()])
        out: Stmt = Seq((self._lanes(write, warp, width),
                         self._lanes(read(calls, {}), warp, width)))
        for b in slots.values():
            out = Allocate(b, out)
        return out


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
    out = _Block(tids, block, reverse).phases(_per_thread(body, tids, block))
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
