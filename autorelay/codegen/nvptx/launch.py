"""How a GPU-scheduled segment of loop IR maps onto a kernel launch.

Every top-level statement (segment) of a scheduled PrimFunc becomes one kernel. Its loops bound to
`blockIdx.*` must be its outermost loops (a perfect nest, each index once): they give the grid.
Loops bound to `threadIdx.*` may appear anywhere inside, several times (one nest to compute, one
to copy out) and even inside one bound to the same index (a shared-memory copy inside a thread's
work: the same index again, the threads cooperating): the block's extent of each index is the
largest extent bound to it, and a smaller loop is guarded. Code outside every thread loop runs in
every thread of the block. A segment with no bound loops runs on one thread. A barrier (and a warp
shuffle, which every lane of a warp must reach) must be reached by every thread: never under a
guard or branch that depends on the thread index.

The emitter (`emit.py`) and the CPU emulation (`emulate.py`) both read this one description, so
a schedule the emulation accepts is the schedule the GPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autorelay.errors import ScheduleError
from autorelay.target import Target
from autorelay.te.expr import Var
from autorelay.te.traverse import free_vars
from autorelay.tir.nodes import (
    BLOCK_TAGS,
    THREAD_TAGS,
    Allocate,
    Barrier,
    For,
    If,
    Stmt,
    Store,
    shuffles,
    stmt_children,
    walk_stmts,
)

MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)


@dataclass(frozen=True)
class Launch:
    """Grid and block dimensions (x, y, z) of one kernel, and its outer block loops peeled off."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def extent(self, tag: str) -> int:
        axis = "xyz".index(tag[-1])
        return (self.grid if tag.startswith("blockIdx") else self.block)[axis]


def peel_blocks(seg: Stmt) -> tuple[list[For], Stmt]:
    """The segment's outermost blockIdx loops (outermost first) and the body inside them."""
    loops: list[For] = []
    while isinstance(seg, For) and seg.kind in BLOCK_TAGS:
        loops.append(seg)
        seg = seg.body
    return loops, seg


def launch_of(seg: Stmt, target: Target | None = None) -> Launch:
    """The launch of a segment; ScheduleError if its bound loops nest illegally or exceed the
    target's (or CUDA's) limits."""
    blocks, body = peel_blocks(seg)
    grid = [1, 1, 1]
    for loop in blocks:
        axis = "xyz".index(loop.kind[-1])
        if grid[axis] != 1:
            raise ScheduleError(f"loop {loop.var.name}: {loop.kind} is bound twice in one kernel")
        grid[axis] = loop.extent
    block = [1, 1, 1]
    _threads(body, block)
    for name, dims, top in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        for d, (n, m) in enumerate(zip(dims, top)):
            if n > m:
                raise ScheduleError(f"kernel {name} dimension {'xyz'[d]} is {n}, above CUDA's {m}")
    launch = Launch((grid[0], grid[1], grid[2]), (block[0], block[1], block[2]))
    if target is not None and launch.threads > target.max_threads_per_block:
        raise ScheduleError(f"a block of {launch.threads} threads {launch.block} exceeds the target's "
                            f"{target.max_threads_per_block} threads per block")
    _check_barriers(body, launch, frozenset(), False)
    smem = shared_bytes(seg)
    if target is not None and smem > target.max_shared_memory_per_block:
        raise ScheduleError(f"the kernel's {smem} bytes of shared memory exceed the target's "
                            f"{target.max_shared_memory_per_block} per block")
    return launch


def _threads(s: Stmt, block: list[int]) -> None:
    """Record the largest extent bound to each threadIdx in `block`; check the nesting."""
    if isinstance(s, For):
        if s.kind in BLOCK_TAGS:
            raise ScheduleError(f"loop {s.var.name} bound to {s.kind} must be among the kernel's "
                                f"outermost loops (above every other loop)")
        if s.kind == "parallel":
            raise ScheduleError(f"loop {s.var.name}: a GPU kernel has no parallel (CPU thread) loops")
        if s.kind in THREAD_TAGS:
            axis = "xyz".index(s.kind[-1])
            block[axis] = max(block[axis], s.extent)
    for c in stmt_children(s):
        _threads(c, block)


def _check_barriers(s: Stmt, launch: Launch, tvars: frozenset[Var], divergent: bool) -> None:
    """A barrier (or warp shuffle) every thread reaches: none under a shortened thread loop or a
    thread-dependent If."""
    if isinstance(s, Barrier) and divergent:
        raise ScheduleError("a barrier (around a shared-memory copy) is under a condition on the thread "
                            "index; make the loops around it cover the whole block")
    if isinstance(s, Store) and shuffles(s.value) and divergent:
        raise ScheduleError("a warp shuffle is under a condition on the thread index: every lane of a "
                            "warp must reach it (make the loops around it cover the whole block)")
    if isinstance(s, For) and s.kind in THREAD_TAGS:
        divergent = divergent or s.extent < launch.extent(s.kind)
        tvars = tvars | {s.var}
    if isinstance(s, If) and free_vars(s.cond) & tvars:
        divergent = True
    for c in stmt_children(s):
        _check_barriers(c, launch, tvars, divergent)


def shared_bytes(seg: Stmt) -> int:
    """Bytes of shared memory a kernel allocates."""
    return sum(t.buffer.size * np.dtype(t.buffer.dtype).itemsize for t in walk_stmts(seg)
               if isinstance(t, Allocate) and t.buffer.scope == "shared")


def bound_vars(seg: Stmt) -> dict[Var, str]:
    """Every bound loop variable of a segment and its tag."""
    tags = BLOCK_TAGS + THREAD_TAGS
    return {t.var: t.kind for t in walk_stmts(seg) if isinstance(t, For) and t.kind in tags}
