"""GPU convolution as an implicit GEMM (target kind `cuda`): `conv2d_nchw` computes, groups == 1.

The alternative to the direct `cuda_conv2d` for the same computes. The direct template reads its
input through L1/L2 only, because a fused-row pixel tile of the 4-D input is no interval and so
cannot be a ComputeAt region. `ImplicitGemm` recomputes the convolution over flat axes (see
`autorelay.schedule.implicit_gemm`): M = output channels, N = batch x output pixels,
K = input channels x kernel taps, with the weight viewed as [M, K] and the im2col matrix [K, N]
built element by element from the flat indices (padding as a guard). Then it is `cuda_dense`: each
block computes a (threads_y·tile_m) x (threads_x·tile_n) tile of the GEMM, each thread a
tile_m x tile_n register tile (accumulators computed at its thread loop of the output, rows and
columns unrolled), and per `shared_k` chunk of K both operand tiles — [Mtile, Ktile] of the
weight and [Ktile, Ntile] of im2col — are copied into shared memory by all the block's threads,
between barriers. The output loop fuses (n, oh, ow) back into N, so the epilogue (bias, relu,
residual add: inlined) is applied as the register tile is stored into the NCHW output.

The tuner chooses between the two forms by template (`template_for(cdef, "cuda_conv2d_igemm")`,
`kernel_task(..., template=...)`, `template_choices`); `cuda_conv2d` stays the claimant that
`template_for` returns first, so untuned builds are unchanged.
"""

from __future__ import annotations

import numpy as np

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.implicit_gemm import conv_operands
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.cuda import check_threads, max_threads
from autorelay.schedule.templates.cuda_conv import FILL_THREADS_PER_SM, _registers
from autorelay.schedule.templates.generic import _outer_fuse
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

KNOBS = ("threads_x", "threads_y", "tile_m", "tile_n", "shared_k", "unroll_k")


def _conv(cdef: ComputeDef) -> Tensor:
    red = pattern(cdef).reduce
    if red is None or red.op is None or red.op.tag != "conv2d_nchw":
        raise ScheduleError(f"{cdef.name}: the cuda_conv2d_igemm template needs an NCHW conv2d stage")
    return red


def _gemm_dims(red: Tensor) -> tuple[int, int, int]:
    """(M, N, K) of the implicit GEMM: output channels, batch x output pixels, channels x taps."""
    n, oc, oh, ow = red.shape
    k = 1
    for a in red.op.reduce_axes:  # type: ignore[union-attr]
        k *= a.extent
    return oc, n * oh * ow, k


def shared_bytes(config: Config, itemsize: int) -> int:
    """Shared memory of one block: the [Mtile, Ktile] weight tile plus the [Ktile, Ntile] im2col tile."""
    tx, ty, tm, tn, sk = (config[k] for k in KNOBS[:5])
    return (ty * tm + tx * tn) * sk * itemsize


class CudaConv2dIgemmTemplate(Template):
    """Knobs: threads_x / threads_y (the block: N and M), tile_m / tile_n (the register tile),
    shared_k (the K-chunk of both shared tiles), unroll_k (the unrolled part of the chunk's loop).
    Refused (ScheduleError, where the steps are made): blocks beyond the target's threads, shared
    memory or (likely) registers per block, and blocks larger than the GEMM in M or N — a barrier
    needs every thread of the block in the loop nest."""

    name = "cuda_conv2d_igemm"
    tags = ("conv2d_nchw",)
    kind = "cuda"

    def claims(self, cdef: ComputeDef) -> bool:
        """Exactly the computes `ImplicitGemm` accepts: an OIHW weight read at [f, rc, rh, rw] times
        a data factor (groups == 1; transposed and grouped convolutions keep their templates)."""
        red = pattern(cdef).reduce
        if red is None or red.op is None or red.op.tag != "conv2d_nchw" or not red.op.reduce_axes:
            return False
        body = red.op.body
        found = conv_operands(body.body, red.op.attrs, red.op.axes, red.op.reduce_axes)  # type: ignore[attr-defined]
        return not isinstance(found, str)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        m, n, _ = _gemm_dims(_conv(cdef))
        return Space(self.name, (
            # narrower blocks only where N is: a block wider than the GEMM is refused
            Knob("threads_x", [t for t in (1, 2, 4) if n < 8] + [8, 16, 32]),
            Knob("threads_y", (1, 2, 4, 8, 16)),
            Knob("tile_m", [t for t in (1, 2, 4, 8) if t == 1 or t <= m]),
            Knob("tile_n", [t for t in (1, 2, 4, 8) if t == 1 or t <= n]),
            Knob("shared_k", (8, 16, 32, 64)),
            Knob("unroll_k", (1, 2, 4)),
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """As `cuda_dense`: the register tile with the most multiply-adds per shared load
        (tm·tn / (tm + tn)), divided by the work ragged tiles waste, times how well the grid fills
        the target's multiprocessors (threads against FILL_THREADS_PER_SM each); 64..256 threads.
        The K-chunk is the largest whose tiles take at most a quarter of the target's shared
        memory per block (several blocks per multiprocessor) and that K fills at least half of."""
        m, n, k = _gemm_dims(_conv(cdef))
        space = self.space(cdef, target)
        sms = target.multiprocessors
        best: tuple[float, int, int, int, int] | None = None
        for tx in (16, 32, 8):
            for ty in (16, 8, 4, 2, 1):
                for tm in space.knob("tile_m").values:
                    for tn in space.knob("tile_n").values:
                        threads = tx * ty
                        if not 64 <= threads <= min(256, max_threads(target)) or tm * tn > 32 \
                                or ty * tm > m or tx * tn > n:
                            continue
                        waste = tile_waste(m, ty * tm) * tile_waste(n, tx * tn)
                        blocks = -(-m // (ty * tm)) * -(-n // (tx * tn))
                        fill = (min(1.0, blocks * threads / waste / (FILL_THREADS_PER_SM * sms))
                                * min(1.0, blocks / sms))
                        score = tm * tn / (tm + tn) / waste * fill
                        if best is None or score > best[0] * 1.0001:
                            best = (score, tx, ty, tm, tn)
        if best is None:  # a GEMM smaller than 64 threads: one block as large as it allows
            tx = max(t for t in space.knob("threads_x").values if t <= n)
            ty = max(t for t in space.knob("threads_y").values if t <= m)
            best = (0.0, tx, ty, 1, 1)
        _, tx, ty, tm, tn = best
        budget = target.max_shared_memory_per_block // 4
        sk = 8
        for c in space.knob("shared_k").values:
            if (ty * tm + tx * tn) * c * 4 <= budget and 2 * k >= c:
                sk = c
        return Config(self.name, (("threads_x", tx), ("threads_y", ty), ("tile_m", tm), ("tile_n", tn),
                                  ("shared_k", sk), ("unroll_k", 4)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        tx, ty, tm, tn, sk, uk = (config[k] for k in KNOBS)
        check_threads(self.name, tx * ty, target, f"{tx}x{ty}")
        red = _conv(cdef)
        m, n, _ = _gemm_dims(red)
        if ty * tm > m or tx * tn > n:
            raise ScheduleError(f"{self.name}: a {ty * tm}x{tx * tn} block tile exceeds the {m}x{n} GEMM "
                                "(threads past its edge would skip the block's barriers)")
        smem = shared_bytes(config, np.dtype(red.dtype).itemsize)
        if smem > target.max_shared_memory_per_block:
            raise ScheduleError(f"{self.name}: {smem} bytes of shared tiles exceed the target's "
                                f"{target.max_shared_memory_per_block} per block")
        if _registers(tm, tn) * tx * ty > target.registers_per_block:
            raise ScheduleError(f"{self.name}: a {tm}x{tn} register tile in {tx}x{ty} threads needs "
                                f"more than the target's {target.registers_per_block} registers per block")
        pat = pattern(cdef)
        out, conv = pat.output.name, red.name
        gemm = f"{conv}_gemm"
        steps: list[S.Step] = [S.ImplicitGemm(conv), *(S.ComputeInline(t.name) for t in pat.others)]
        if red is not pat.output:
            steps.append(S.ComputeInline(conv))  # the 4-D view of the GEMM, into the epilogue
        on, of, oy, ox = (a.name for a in pat.output.op.axes)  # type: ignore[union-attr]
        # N = batch x pixels: the output loop fuses (n, oh, ow) back into p. Axes of extent 1 stay
        # out of the fusion (innermost loops of one iteration): an epilogue that broadcasts reads
        # the conv at a constant 0 there, which would leave (n, oh, ow) nothing to fold back with
        ext = dict(zip((on, oy, ox), (red.shape[0], red.shape[2], red.shape[3])))
        big = [a for a in (on, oy, ox) if ext[a] > 1] or [ox]
        ones = tuple(a for a in (on, oy, ox) if a not in big)
        fuse, p = _outer_fuse(out, big)
        steps += [S.Reorder(out, (of, *big, *ones)), *fuse]
        steps += [S.Split(out, of, ty * tm, "f.b", "f.in"), S.Split(out, "f.in", tm, "f.t", "f.r"),
                  S.Split(out, p, tx * tn, "p.b", "p.in"), S.Split(out, "p.in", tn, "p.t", "p.r"),
                  S.Reorder(out, ("f.b", "p.b", "f.t", "p.t", "f.r", "p.r", *ones)),
                  S.Bind(out, "f.b", "blockIdx.y"), S.Bind(out, "p.b", "blockIdx.x"),
                  S.Bind(out, "f.t", "threadIdx.y"), S.Bind(out, "p.t", "threadIdx.x"),
                  S.ComputeAt(gemm, out, "p.t"), S.Unroll(out, "f.r"), S.Unroll(out, "p.r"),
                  S.Split(gemm, "k", sk, "k.s", "k.in")]
        inner = ["k.in"]
        if uk > 1:
            steps.append(S.Split(gemm, "k.in", uk, "k.o", "k.u"))
            inner = ["k.o", "k.u"]
        steps += [S.Reorder(gemm, ("k.s", *inner, "m", "p")), S.Unroll(gemm, "m"), S.Unroll(gemm, "p")]
        if uk > 1:
            steps.append(S.Unroll(gemm, "k.u"))
        for tile, (a, b) in ((f"{conv}_wt", ("m", "k")), (f"{conv}_col", ("k", "p"))):
            # the block's tile of each operand, once per K-chunk, by all tx x ty threads
            # (consecutive threads, consecutive elements)
            steps += [S.ComputeAt(tile, gemm, "k.s"), S.Fuse(tile, a, b, "c"),
                      S.Split(tile, "c", tx, "c.o", "c.x"), S.Split(tile, "c.o", ty, "c.oo", "c.y"),
                      S.Bind(tile, "c.x", "threadIdx.x"), S.Bind(tile, "c.y", "threadIdx.y")]
        return tuple(steps)


register(CudaConv2dIgemmTemplate())
