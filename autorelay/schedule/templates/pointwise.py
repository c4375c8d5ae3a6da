"""1x1 convolution on NCHW data (`autorelay.te.nn.conv2d_1x1_nchw`) scheduled as a GEMM over pixels.

NCHW keeps each channel's pixels contiguous, so the natural register tile is `tile_k` output
channels x `tile_p_vectors` vectors of pixels: per input channel, the tile's pixel vectors are
contiguous loads of the input, the `tile_k` weights are broadcast, and the tile's outputs are
contiguous stores with the fused epilogue (bias, activation, residual) applied on the way out. The
output's (row, column) loops are fused into one pixel loop first, so a tile may span rows: the
flattened index simplifies back to the pixel, and only the last, ragged tile is guarded.

This is the same GEMM as the dense and Winograd templates (`dense.accumulator_tile`); the knobs
are the tile, which block loop is outer (and parallel) and the unrolling of the channel loop.
Depthwise-separable networks spend most of their FLOPs here.
"""

from __future__ import annotations

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.dense import accumulator_tile, gemm_tile_knobs
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor


def _gemm_stage(cdef: ComputeDef) -> tuple[Tensor, int, int, int]:
    """(GEMM stage, output channels K, pixels P, input channels C) of a 1x1 conv kernel."""
    m = pattern(cdef).reduce
    if m is None or m.op is None or m.op.tag != "conv2d_1x1_nchw":
        raise ScheduleError(f"{cdef.name}: the pointwise template needs a conv2d_1x1_nchw stage")
    _, k, p = m.shape
    return m, k, p, m.op.reduce_axes[0].extent


class Conv2d1x1NCHWTemplate(Template):
    name = "conv2d_1x1_nchw"
    tags = ("conv2d_1x1_nchw",)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, k, p, c = _gemm_stage(cdef)
        lanes = target.vector_lanes()
        return Space(
            self.name,
            (
                *gemm_tile_knobs(k, p, lanes),
                Knob("outer", ("k", "p")),
                Knob("unroll_c", [u for u in (1, 2, 4) if c % u == 0]),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The tile with the most FMAs per load that fits the register file (accumulators, one
        row of input vectors, one broadcast weight), discounted by the work wasted on ragged
        edge tiles in either dimension. The pixel tile fits the map (one vector on maps narrower
        than two): the last tile shifts back to end with the map, which a tile wider than the map
        cannot, and its guarded pixels ran 10-30x slower (160 -> 1280 channels on 3x3: 4.0 ms
        against 0.12 ms)."""
        _, k, p, c = _gemm_stage(cdef)
        lanes, regs = target.vector_lanes(), target.vector_registers
        best = (0.0, 1, 1)
        for tk in (8, 6, 4, 3, 2, 1):
            for pv in (4, 3, 2, 1):
                if tk * pv + pv + 1 > regs - 1 or tk > k or (pv > 1 and pv * lanes > p):
                    continue  # a tile wider than the map has no full position: every pixel guarded
                score = tk * pv / (tk + pv) / (tile_waste(k, tk) * tile_waste(p, pv * lanes))
                if score > best[0]:
                    best = (score, tk, pv)
        unroll = max(u for u in (1, 2, 4) if c % u == 0)
        return Config(self.name, (("tile_k", best[1]), ("tile_p_vectors", best[2]), ("outer", "k"),
                                  ("unroll_c", unroll)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        m, _, _, _ = _gemm_stage(cdef)
        pat = pattern(cdef)
        out = pat.output
        lanes = target.vector_lanes()
        tk, nr = config["tile_k"], config["tile_p_vectors"] * lanes
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in pat.others]
        n, k, y, x = (a.name for a in out.op.axes)  # type: ignore[union-attr]
        yx = f"{y}_{x}"
        blocks = (f"{k}_o", f"{yx}_o") if config["outer"] == "k" else (f"{yx}_o", f"{k}_o")
        steps += [
            S.Fuse(out.name, y, x),
            S.Split(out.name, k, tk),
            S.Split(out.name, yx, nr, shift_tail=True),
            S.Reorder(out.name, (n, *blocks, f"{k}_i", f"{yx}_i")),
            S.ComputeAt(m.name, out.name, blocks[1]),
            S.Fuse(out.name, n, blocks[0]),
            S.Parallel(out.name, f"{n}_{blocks[0]}"),
            S.Split(out.name, f"{yx}_i", lanes, f"{yx}_v", f"{yx}_w"),
            S.Unroll(out.name, f"{k}_i"),
            S.Unroll(out.name, f"{yx}_v"),
            S.Vectorize(out.name, f"{yx}_w"),
        ]
        _, mk, mp = (a.name for a in m.op.axes)  # type: ignore[union-attr]
        return tuple(steps + accumulator_tile(m.name, m.op.reduce_axes[0].name, mk, mp, lanes,  # type: ignore[union-attr]
                                              config["unroll_c"]))


register(Conv2d1x1NCHWTemplate())
