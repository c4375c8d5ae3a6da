"""bf16 templates: the dense and the NCHW convolution of `autorelay.te.nn_bf16`, float32 accumulators.

The int8 dense's register tile (`int8.DenseInt8Template`) with the weight packed in pairs of K
(`[N/NR, K/2, NR, 2]`, K zero-padded to even: the word 0 is +0.0) and the pair tensorized as a
bf16 dot (`Tensorize(stage, axis, "dot")`): one `vdpbf16ps` per vector of float32 accumulators
with AVX512-BF16, two multiply-adds on the widened words elsewhere (`codegen.llvm.dot`). A row's
pair of data words is one 32-bit broadcast serving every vector of the tile. Knobs are the int8
dense's; vector widths and register counts come from the target.

The convolution (`conv2d_nchw_bf16`, even channel counts) is the fp32 NCHW template's register tile
(vectors of output channels x output pixels, the weight packed so a vector of output channels is
contiguous, each input pixel broadcast), with the weight packed once more in pairs of input
channels (`[O/ob, C/2, KH, KW, ob, 2]`) and the pair tensorized as the bf16 dot; the convolution's
padding stage has already interleaved channel pairs, so a pixel's pair is one 32-bit broadcast.
"""

from __future__ import annotations

from autorelay.codegen.llvm.dot import BF16_GROUP, bf16_dot_kind
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.conv import _padded, _prologue, _width_tiles, nchw_output_tile
from autorelay.schedule.templates.int8 import DenseInt8Template, _weight_of
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

__all__ = ["Conv2dNCHWBf16Template", "DenseBf16Template"]


class DenseBf16Template(DenseInt8Template):
    """bf16 dense `[M, K] x [N, K] -> float32 [M, N]`; see the module docstring."""

    name = "dense_bf16"
    tags = ("dense_bf16",)

    @staticmethod
    def _group(red: Tensor, target: Target) -> int:
        return BF16_GROUP

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The tile with the most products per load whose accumulators, weight vectors and broadcast
        pair fit the registers (twice the weight vectors and the pair on the FMA path, which widens
        each into its low and high words)."""
        _, m, n, _ = self._shape(cdef)
        lanes = target.vector_lanes("float32")
        widened = 1 if bf16_dot_kind(target, lanes) == "dpbf16ps" else 2
        best = (0.0, 1, 1)
        for c in (x for x in (4, 3, 2, 1) if (x - 1) * lanes < n):
            for r in (x for x in (8, 6, 4, 3, 2, 1) if x <= max(m, 1)):
                if r * c + widened * (c + 1) > target.vector_registers - 1:
                    continue
                score = r * c / (r + c) / (tile_waste(m, r) * tile_waste(n, c * lanes))
                if score > best[0]:
                    best = (score, r, c)
        return Config(self.name, (("tile_m", best[1]), ("tile_n_vectors", best[2]), ("outer", "n"),
                                  ("unroll_k", 4)))


class Conv2dNCHWBf16Template(Template):
    """bf16 NCHW convolution, channel pairs as the bf16 dot; see the module docstring. Knobs: the
    register tile (output-channel vectors x rows x pixels), the reduction order, unrolling the
    kernel width, which block loop is outer in the parallel loop, root or inline padding."""

    name = "conv2d_nchw_bf16"
    tags = ("conv2d_nchw_bf16",)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        red = pattern(cdef).reduce
        oc, oh, ow = red.shape[1], red.shape[2], red.shape[3]  # type: ignore[union-attr]
        lanes = target.vector_lanes()
        return Space(self.name, (
            Knob("tile_oc_vectors", [t for t in (1, 2, 3, 4) if (t - 1) * lanes < oc] or [1]),
            Knob("tile_ow", _width_tiles(ow, 16)),
            Knob("tile_oh", [t for t in (1, 2, 3, 4) if t <= oh]),
            Knob("reduce_order", ("c_h_w", "h_w_c")),
            Knob("unroll_kw", (0, 1)),
            Knob("outer", ("oc", "oh")),
            Knob("pad", ("root", "inline") if _padded(cdef) else ("inline",)),
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        red = pattern(cdef).reduce
        oc, ow = red.shape[1], red.shape[3]  # type: ignore[union-attr]
        lanes, regs = target.vector_lanes(), target.vector_registers
        # accumulators + weight vectors + the broadcast pair; the FMA path widens each weight vector
        # and the pair into two float vectors (low and high words), vdpbf16ps reads them as they are
        widened = 1 if bf16_dot_kind(target, lanes) == "dpbf16ps" else 2
        best = (0.0, 1, 1)
        for tv in (1, 2, 3, 4):
            for tow in _width_tiles(ow, 14):
                if tow * tv + widened * (tv + 1) > regs - 1 or (tv - 1) * lanes >= oc:
                    continue
                score = tow * tv / (tow + tv) / (tile_waste(ow, tow) * tile_waste(oc, tv * lanes))
                if score > best[0]:
                    best = (score, tv, tow)
        return Config(self.name, (
            ("tile_oc_vectors", best[1]), ("tile_ow", best[2]), ("tile_oh", 1), ("reduce_order", "c_h_w"),
            ("unroll_kw", 0), ("outer", "oc"), ("pad", "root" if _padded(cdef) else "inline"),
        ))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        lanes = target.vector_lanes()
        steps, out, acc, red = _prologue(cdef, config["pad"], lanes)
        tv, tow, toh = config["tile_oc_vectors"], config["tile_ow"], config["tile_oh"]
        weight = _weight_of(red, 4)  # the OIHW placeholder the reduction reads (the data: via the pad stage)
        _n, oc, oh, ow = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        rc, rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
        # [O, C, KH, KW] -> [O/ob, C, KH, KW, ob] -> [O/ob, C/2, KH, KW, ob, 2]
        steps[:0] = [S.Pack(weight, 0, tv * lanes), S.Pack(weight, 1, BF16_GROUP)]
        tiles, _, pixel_tile = nchw_output_tile(cdef, out, config["outer"], tv * lanes, toh, tow, lanes)
        steps += tiles
        steps += [
            S.ComputeAt(acc, out, pixel_tile),
            S.Split(acc, rc, BF16_GROUP, f"{rc}_o", f"{rc}_p"),
            S.Split(acc, oc, lanes),
        ]
        red_order = (f"{rc}_o", rh, rw) if config["reduce_order"] == "c_h_w" else (rh, rw, f"{rc}_o")
        steps += [
            S.Reorder(acc, (*red_order, oh, ow, f"{oc}_o", f"{rc}_p", f"{oc}_i")),
            S.Unroll(acc, oh),
            S.Unroll(acc, ow),
            S.Unroll(acc, f"{oc}_o"),
            S.Tensorize(acc, f"{rc}_p", "dot"),
            S.Vectorize(acc, f"{oc}_i"),
        ]
        if config["unroll_kw"]:
            steps.append(S.Unroll(acc, rw))
        return tuple(steps)


register(DenseBf16Template())
register(Conv2dNCHWBf16Template())
