"""GPU templates (target kind `cuda`): elementwise/injective kernels and a thread-tiled GEMM.

* `cuda_injective`: the output's axes are fused into one index space, split as
  [block, per_thread, thread]; blocks and threads are bound to blockIdx.x / threadIdx.x, and each
  thread handles `per_thread` elements one block-width apart (so a warp's accesses stay contiguous,
  coalesced). Producers are inlined.
* `cuda_reduction` (every other reduction): see `cuda_reduction.py`.
* `cuda_dense` (dense, matmul, batch_matmul): each block computes a (threads_y·tile_m) x
  (threads_x·tile_n) tile of the output; each thread a tile_m x tile_n register tile
  (CacheWrite + ComputeAt at its thread loop, rows/columns unrolled), the reduction loop
  outermost in it and unrolled by `unroll_k`. Batches are blockIdx.z. With `shared_k` > 0 the
  reduction is tiled by it and both operands' k-tiles are copied into shared memory by all the
  block's threads (CacheRead + ComputeAt), between barriers; every thread then reads its rows and
  columns from there. With 0 every thread reads A and B from global memory (through L1/L2).

Knob combinations that exceed the target's threads per block are ScheduleErrors where the steps
are made, so a tuner prunes them.
"""

from __future__ import annotations

import math

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.generic import _outer_fuse
from autorelay.target import Target
from autorelay.te.expr import Read
from autorelay.te.nn import GEMM_TAGS
from autorelay.te.tensor import ComputeDef, topo_order
from autorelay.te.traverse import walk


def max_threads(target: Target) -> int:
    return target.max_threads_per_block if target.kind == "cuda" else 1024


def check_threads(template: str, threads: int, target: Target, shape: str = "") -> None:
    """ScheduleError when a block of `threads` (laid out as `shape`, e.g. "16x8") exceeds the
    target's threads per block: where the steps are made, so a tuner prunes the config."""
    if threads > max_threads(target):
        raise ScheduleError(f"{template}: {shape or threads} threads exceed the target's "
                            f"{max_threads(target)} per block")


def threads_knob(target: Target) -> Knob:
    """Threads per block, powers of two from a warp up to the target's limit."""
    return Knob("threads", [t for t in (32, 64, 128, 256, 512, 1024) if t <= max_threads(target)])


class CudaInjectiveTemplate(Template):
    name = "cuda_injective"
    kind = "cuda"

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        return Space(self.name, (threads_knob(target), Knob("per_thread", (1, 2, 4))))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        n = math.prod(cdef.output.shape)
        threads = min(256, max_threads(target))
        per = 4 if n >= threads * 4 * 1024 else 1  # many elements: fewer, fuller blocks
        return Config(self.name, (("threads", threads), ("per_thread", per)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        out = cdef.output
        check_threads(self.name, config["threads"], target)
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in topo_order([out])
                               if t.op is not None and t is not out]
        axes = [a.name for a in out.op.axes]  # type: ignore[union-attr]
        if not axes:
            return tuple(steps)
        fs, ax = _outer_fuse(out.name, axes)
        assert ax is not None
        steps += fs
        steps += [S.Split(out.name, ax, config["threads"], f"{ax}.b", f"{ax}.t")]
        block = f"{ax}.b"
        if config["per_thread"] > 1:
            steps += [S.Split(out.name, block, config["per_thread"], f"{ax}.bb", f"{ax}.u"),
                      S.Unroll(out.name, f"{ax}.u")]
            block = f"{ax}.bb"
        steps += [S.Bind(out.name, block, "blockIdx.x"), S.Bind(out.name, f"{ax}.t", "threadIdx.x")]
        return tuple(steps)


def _gemm(cdef: ComputeDef) -> tuple[int, int, int]:
    red = pattern(cdef).reduce
    if red is None or red.op is None:
        raise ScheduleError(f"{cdef.name}: the cuda_dense template needs a reduction stage")
    return red.shape[-2], red.shape[-1], red.op.reduce_axes[0].extent


class CudaDenseTemplate(Template):
    name = "cuda_dense"
    tags = GEMM_TAGS
    kind = "cuda"

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        m, n, _ = _gemm(cdef)
        return Space(self.name, (
            Knob("threads_x", (8, 16, 32)),
            Knob("threads_y", (1, 2, 4, 8, 16)),
            Knob("tile_m", [t for t in (1, 2, 4, 8) if t == 1 or t <= m]),
            Knob("tile_n", [t for t in (1, 2, 4, 8) if t == 1 or t <= n]),
            Knob("unroll_k", (1, 2, 4)),
            Knob("shared_k", (0, 8, 16)),
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """256-thread blocks of 4x4 register tiles (64x64 outputs per block), shrunk for small
        problems by the work wasted on ragged edge tiles and by a grid with fewer blocks than the
        GPU has multiprocessors (a batch-1 GEMV: a 16-block grid left most of an H200 idle)."""
        m, n, _ = _gemm(cdef)
        batch = math.prod(pattern(cdef).output.shape[:-2])
        space = self.space(cdef, target)
        best = None
        for tx in (16, 8):
            for ty in (16, 8, 4, 2, 1):
                for tm in (4, 2, 1):
                    for tn in (4, 2, 1):
                        if tx * ty > max_threads(target) or tm not in space.knob("tile_m").values \
                                or tn not in space.knob("tile_n").values:
                            continue
                        waste = tile_waste(m, ty * tm) * tile_waste(n, tx * tn)
                        blocks = batch * -(-m // (ty * tm)) * -(-n // (tx * tn))
                        fill = min(1.0, blocks / target.multiprocessors)
                        score = (tm * tn / (tm + tn)) / waste ** 2 * min(tx * ty, 256) * fill
                        if best is None or score > best[0]:
                            best = (score, tx, ty, tm, tn)
        assert best is not None
        _, tx, ty, tm, tn = best
        shared = 8 if m >= ty * tm and n >= tx * tn else 0  # a barrier needs every thread busy
        return Config(self.name, (("threads_x", tx), ("threads_y", ty), ("tile_m", tm), ("tile_n", tn),
                                  ("unroll_k", 4), ("shared_k", shared)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        tx, ty, tm, tn = (config[k] for k in ("threads_x", "threads_y", "tile_m", "tile_n"))
        check_threads(self.name, tx * ty, target, f"{tx}x{ty}")
        pat = pattern(cdef)
        red = pat.reduce
        assert red is not None and red.op is not None
        out = pat.output.name
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in pat.others]
        if red is pat.output:
            steps.append(S.CacheWrite(out))
            acc = f"{out}_local"
        else:
            acc = red.name
        ax = [a.name for a in pat.output.op.axes]  # type: ignore[union-attr]
        i, j = ax[-2], ax[-1]
        steps += [S.Split(out, i, ty * tm, f"{i}.b", f"{i}.in"),
                  S.Split(out, f"{i}.in", tm, f"{i}.t", f"{i}.r"),
                  S.Split(out, j, tx * tn, f"{j}.b", f"{j}.in"),
                  S.Split(out, f"{j}.in", tn, f"{j}.t", f"{j}.r"),
                  S.Reorder(out, (*ax[:-2], f"{i}.b", f"{j}.b", f"{i}.t", f"{j}.t", f"{i}.r", f"{j}.r")),
                  S.Bind(out, f"{i}.b", "blockIdx.y"), S.Bind(out, f"{j}.b", "blockIdx.x"),
                  S.Bind(out, f"{i}.t", "threadIdx.y"), S.Bind(out, f"{j}.t", "threadIdx.x"),
                  S.ComputeAt(acc, out, f"{j}.t"),
                  S.Unroll(out, f"{i}.r"), S.Unroll(out, f"{j}.r")]
        batch = ax[: int(pat.reduce.op.attrs.get("batch", 0))]  # the GEMM's batch axes, outermost
        if batch:  # all of them, fused, on blockIdx.z
            fuse, fused = _outer_fuse(out, batch)
            steps += [*fuse, S.Bind(out, fused, "blockIdx.z")]
        k = red.op.reduce_axes[0].name
        acc_ax = [a.name for a in red.op.axes]
        ai, aj = acc_ax[-2], acc_ax[-1]
        uk, sk = config["unroll_k"], config["shared_k"]
        order: list[str] = []
        if sk:
            steps.append(S.Split(acc, k, sk, "k.s", "k.in"))
            order, k = ["k.s"], "k.in"
        if uk > 1:
            steps.append(S.Split(acc, k, uk, f"{k}.o", f"{k}.u"))
            order += [f"{k}.o", f"{k}.u"]
        else:
            order.append(k)
        steps.append(S.Reorder(acc, (*order, ai, aj)))
        if uk > 1:
            steps.append(S.Unroll(acc, f"{k}.u"))
        steps += [S.Unroll(acc, ai), S.Unroll(acc, aj)]
        if sk:
            steps += _shared_copies(cdef, red, acc, tx, ty)
        return tuple(steps)


def _shared_copies(cdef: ComputeDef, red, acc: str, tx: int, ty: int) -> list[S.Step]:
    """Both GEMM operands through shared memory, one k-tile per iteration of the accumulator's
    `k.s` loop, each copied by all tx x ty threads of the block (consecutive threads, consecutive
    elements)."""
    steps: list[S.Step] = []
    reads = {n.tensor.name for n in walk(red.op.body) if isinstance(n, Read)}
    for t in cdef.inputs:
        if t.name not in reads:
            continue
        copy = f"{t.name}_shared"
        fs, ax = _outer_fuse(copy, [f"ax{d}" for d in range(t.ndim)])
        assert ax is not None
        steps += [S.CacheRead(t.name, (acc,)), S.ComputeAt(copy, acc, "k.s"), *fs,
                  S.Split(copy, ax, tx, "c.o", "c.x"), S.Split(copy, "c.o", ty, "c.oo", "c.y"),
                  S.Bind(copy, "c.x", "threadIdx.x"), S.Bind(copy, "c.y", "threadIdx.y")]
    return steps


register(CudaInjectiveTemplate())
register(CudaDenseTemplate())
