"""Winograd F(2x2, 3x3) / F(4x4, 3x3) in channel blocks (`autorelay.te.winograd.conv2d_winograd_nchwc`):
three loop nests in one kernel, every one of them vectorised over a block of channels.

1. Input transform V [P, C/ic, T, ic] into a workspace: parallel over (channel block, tile row),
   the positions unrolled (their selects fold to a few adds each), the block's channels as the
   vector, so every load of the (m+2) x (m+2) window is one contiguous vector shared by all
   positions that read it.
2. The P GEMMs M[z] = V[z] U[z] as the direct NCHW[x]c convolution computes: a register tile of
   `tile_p` tiles x `tile_k_blocks` blocks of output channels, each tile's V value broadcast,
   each block's U vector loaded once per input channel and used by every tile, parallel over
   (position, outer block).
3. Output transform plus the fused epilogue as the kernel output, per (channel block, tile row)
   and tile along it: the P vectors of M are loaded once and the m x m outputs computed from them
   (unrolled), each stored as a contiguous vector of channels.

Knobs: the GEMM's register tile, which of its block loops is outer, and whether the padding is
materialised first (`root`: one vectorised copy, then unconditional loads) or folded into the
input transform's loads (`inline`: a bounds select per vector).
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.conv import root_pad_copy
from autorelay.schedule.templates.generic import vector_axis
from autorelay.schedule.templates.winograd import winograd_stages
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

TILE_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)


def _stages(cdef: ComputeDef) -> tuple[Tensor, Tensor, Tensor | None, list[Tensor]]:
    """(V, M, the padding stage or None, stages to inline) of a blocked Winograd kernel."""
    v, m, rest = winograd_stages(cdef, "conv2d_winograd_nchwc")
    pad = next((t for t in rest if t.op is not None and t.op.tag == "pad"), None)
    return v, m, pad, [t for t in rest if t is not pad]


def _vectors(block: int, lanes: int) -> int:
    """Vectors per channel block (a block narrower than the target's vector is one vector)."""
    return max(1, block // min(lanes, block))


class Conv2dWinogradNCHWcTemplate(Template):
    name = "conv2d_winograd_nchwc"
    tags = ("conv2d_winograd_nchwc",)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, m, pad, _ = _stages(cdef)
        _, kb, p, _ = m.shape
        return Space(
            self.name,
            (
                Knob("tile_p", [t for t in TILE_COUNTS if t <= p]),
                Knob("tile_k_blocks", [t for t in (1, 2, 3, 4) if kb % t == 0]),
                Knob("outer", ("k", "p")),
                Knob("pad", ("root", "inline") if pad is not None else ("inline",)),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """An eighth of the registers for U's vectors (four blocks on AVX-512, two on AVX2) and as
        many tiles as the rest holds, less an eighth kept free and less ragged waste. Timed on
        ResNet-18's 56- and 28-pixel layers (F(4x4), AVX-512, 2 threads, weights evicted), 6 tiles
        x 4 blocks ran 404 and 522 us where 14 x 2 (the direct kernel's shape, which fills every
        register) ran 867 and 839 us: the GEMM's address arithmetic needs registers of its own."""
        _, m, pad, _ = _stages(cdef)
        _, kb, p, oc = m.shape
        regs = target.vector_registers
        nv = _vectors(oc, target.vector_lanes())
        tk = max(t for t in (1, 2, 3, 4) if kb % t == 0 and t * nv <= max(regs // 8, nv))
        room = regs - regs // 8 - tk * nv - (0 if target.has("avx512f") else 1)
        fits = [t for t in TILE_COUNTS if t <= p and t * tk * nv <= room] or [1]
        tp = max(fits, key=lambda t: (t / tile_waste(p, t), t))
        return Config(self.name, (("tile_p", tp), ("tile_k_blocks", tk), ("outer", "k"),
                                  ("pad", "root" if pad is not None else "inline")))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        v, m, pad, inlined = _stages(cdef)
        lanes = target.vector_lanes()
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in inlined]
        if pad is not None:
            steps += root_pad_copy(pad, lanes) if config["pad"] == "root" else [S.ComputeInline(pad.name)]
        steps += _input_transform(v, m.op.attrs["tiles_w"], lanes)  # type: ignore[union-attr]
        steps += _gemm(m, config, lanes)
        steps += _output_transform(pattern(cdef).output, m.op.attrs["tile"], lanes)  # type: ignore[union-attr]
        return tuple(steps)


def _input_transform(v: Tensor, tw: int, lanes: int) -> list[S.Step]:
    z, cb, p, c = (a.name for a in v.op.axes)  # type: ignore[union-attr]
    return [
        S.Split(v.name, p, tw, f"{p}_row", f"{p}_t"),  # tile row (image x tile row), tile column
        S.Reorder(v.name, (cb, f"{p}_row", f"{p}_t", z, c)),
        S.Fuse(v.name, cb, f"{p}_row"),
        S.Parallel(v.name, f"{cb}_{p}_row"),
        S.Unroll(v.name, z),
        *vector_axis(v.name, c, v.shape[-1], lanes),
    ]


def _gemm(m: Tensor, config: Config, lanes: int) -> list[S.Step]:
    z, k, p, o = (a.name for a in m.op.axes)  # type: ignore[union-attr]
    rc = m.op.reduce_axes[0].name  # type: ignore[union-attr]
    ic = m.op.attrs["ic_bn"]  # type: ignore[union-attr]
    name, acc = m.name, f"{m.name}_local"
    blocks = (f"{k}_o", f"{p}_o") if config["outer"] == "k" else (f"{p}_o", f"{k}_o")
    return [
        S.CacheWrite(name),
        S.Split(name, k, config["tile_k_blocks"]),
        S.Split(name, p, config["tile_p"]),
        S.Reorder(name, (z, *blocks, f"{k}_i", f"{p}_i", o)),
        S.ComputeAt(acc, name, blocks[1]),
        S.Fuse(name, z, blocks[0]),
        S.Parallel(name, f"{z}_{blocks[0]}"),
        S.Unroll(name, f"{k}_i"),
        *vector_axis(name, o, m.shape[-1], lanes),
        # the register tile: input channels outermost, then every tile x block x vector unrolled
        S.Split(acc, rc, ic),
        S.Split(acc, o, min(lanes, m.shape[-1])),
        S.Reorder(acc, (f"{rc}_o", f"{rc}_i", k, p, f"{o}_o", f"{o}_i")),
        S.Unroll(acc, k),
        S.Unroll(acc, p),
        S.Unroll(acc, f"{o}_o"),
        S.Vectorize(acc, f"{o}_i"),
    ]


def _output_transform(out: Tensor, tile: int, lanes: int) -> list[S.Step]:
    n, k, y, x, o = (a.name for a in out.op.axes)  # type: ignore[union-attr]
    return [
        S.Split(out.name, y, tile),
        S.Split(out.name, x, tile),
        S.Reorder(out.name, (n, k, f"{y}_o", f"{x}_o", f"{y}_i", f"{x}_i", o)),
        S.Fuse(out.name, n, k),
        S.Fuse(out.name, f"{n}_{k}", f"{y}_o"),
        S.Parallel(out.name, f"{n}_{k}_{y}_o"),
        S.Unroll(out.name, f"{y}_i"),
        S.Unroll(out.name, f"{x}_i"),
        *vector_axis(out.name, o, out.shape[-1], lanes),
    ]


register(Conv2dWinogradNCHWcTemplate())
