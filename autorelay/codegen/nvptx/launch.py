"""How a GPU-scheduled segment of loop IR maps onto a kernel launch.

Every top-level statement (segment) of a scheduled PrimFunc becomes one kernel. Its loops bound to
`blockIdx.*` must be its outermost loops (a perfect nest, each index once): they give the grid.
Loops bound to `threadIdx.*` may appear anywhere inside (several times, e.g. one nest to compute
and one to copy out), never one inside another with the same index: the block's extent of each
index is the largest extent bound to it, and a smaller loop is guarded. Code outside every thread
loop runs in every thread of the block. A segment with no bound loops runs on one thread.

The emitter (`emit.py`) and the CPU emulation (`emulate.py`) both read this one description, so
a schedule the emulation accepts is the schedule the GPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorelay.errors import ScheduleError
from autorelay.target import Target
from autorelay.te.expr import Var
from autorelay.tir.nodes import BLOCK_TAGS, THREAD_TAGS, For, Stmt, stmt_children, walk_stmts

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
    _threads(body, block, frozenset())
    for name, dims, top in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        for d, (n, m) in enumerate(zip(dims, top)):
            if n > m:
                raise ScheduleError(f"kernel {name} dimension {'xyz'[d]} is {n}, above CUDA's {m}")
    launch = Launch((grid[0], grid[1], grid[2]), (block[0], block[1], block[2]))
    if target is not None and launch.threads > target.max_threads_per_block:
        raise ScheduleError(f"a block of {launch.threads} threads {launch.block} exceeds the target's "
                            f"{target.max_threads_per_block} threads per block")
    return launch


def _threads(s: Stmt, block: list[int], active: frozenset[str]) -> None:
    """Record the largest extent bound to each threadIdx in `block`; check the nesting."""
    if isinstance(s, For):
        if s.kind in BLOCK_TAGS:
            raise ScheduleError(f"loop {s.var.name} bound to {s.kind} must be among the kernel's "
                                f"outermost loops (above every other loop)")
        if s.kind == "parallel":
            raise ScheduleError(f"loop {s.var.name}: a GPU kernel has no parallel (CPU thread) loops")
        if s.kind in THREAD_TAGS:
            if s.kind in active:
                raise ScheduleError(f"loop {s.var.name}: {s.kind} is bound inside a loop bound to it")
            axis = "xyz".index(s.kind[-1])
            block[axis] = max(block[axis], s.extent)
            active = active | {s.kind}
        _threads(s.body, block, active)
        return
    for c in stmt_children(s):
        _threads(c, block, active)


def bound_vars(seg: Stmt) -> dict[Var, str]:
    """Every bound loop variable of a segment and its tag."""
    tags = BLOCK_TAGS + THREAD_TAGS
    return {t.var: t.kind for t in walk_stmts(seg) if isinstance(t, For) and t.kind in tags}
