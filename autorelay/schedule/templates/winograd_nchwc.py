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

Or fused (`unit` (r, g)): one parallel loop over units of r tile rows x g output channel blocks
(of one image), each computing its rows' V (every input block), then the GEMMs of its g blocks,
then their output transform, so V and M live in per-unit buffers that stay in the core's caches
instead of going to memory between the stages. A unit reads the U of its g blocks; units that
split the blocks compute the same V each (see `default_unit` for when each pays).

Knobs: the GEMM's register tile, which of its block loops is outer, whether the padding is
materialised first (`root`: one vectorised copy, then unconditional loads) or folded into the
input transform's loads (`inline`: a bounds select per vector), and the fused unit ((0, 0): the
three stages apart).
"""

from __future__ import annotations

import numpy as np

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.conv import root_pad_copy
from autorelay.schedule.templates.generic import vector_axis
from autorelay.schedule.templates.winograd import winograd_stages
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

TILE_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
FUSED_ROWS = (1, 2, 4)
STAGED = (0, 0)
# a unit of tile rows of about this many tiles: ResNet-18's 56- and 28-pixel layers (F(4x4),
# AVX-512, 2 threads, weights evicted) ran 418-480 us at 2 rows x 14 tiles against 445-500 at
# 1 x 14 and 600-680 staged, and 504 us at 4 rows x 7 tiles against 603 at 2 x 7 and 620 staged
UNIT_TILES = 28
# units of rows (each reading all of U) only where U stays in the caches between units: the 64-
# and 128-channel layers' U (0.6 and 2.4 MB) did, at 1.2-1.4x the staged kernel; the 256- and
# 512-channel layers' (9.4 and 38 MB) did not, at 0.75-0.9x
FUSED_WEIGHT_BYTES = 4 << 20


def _stages(cdef: ComputeDef) -> tuple[Tensor, Tensor, Tensor | None, list[Tensor]]:
    """(V, M, the padding stage or None, stages to inline) of a blocked Winograd kernel."""
    v, m, rest = winograd_stages(cdef, "conv2d_winograd_nchwc")
    pad = next((t for t in rest if t.op is not None and t.op.tag == "pad"), None)
    return v, m, pad, [t for t in rest if t is not pad]


def _unit_bytes(m: Tensor, rows: int, blocks: int) -> int:
    """Bytes of a fused unit's V (every input channel) and M (its output blocks) buffers."""
    positions, _, _, oc = m.shape
    ic = m.op.reduce_axes[0].extent  # type: ignore[union-attr]
    tiles = rows * m.op.attrs["tiles_w"]  # type: ignore[union-attr]
    return positions * (ic + blocks * oc) * tiles * np.dtype(m.dtype).itemsize


def fused_units(m: Tensor, target: Target) -> list[tuple[int, int]]:
    """The fused units (tile rows, output blocks) of GEMM stage `m` whose buffers fit the target's
    budget for local buffers, less a quarter for the rounding of their regions and the register
    tile: rows from `FUSED_ROWS` or all of an image's, blocks all or a half, quarter or eighth."""
    kb, th = m.shape[1], m.op.attrs["tiles_h"]  # type: ignore[union-attr]
    rows = sorted({r for r in FUSED_ROWS if r < th} | {th})
    blocks = sorted({kb // d for d in (1, 2, 4, 8) if kb % d == 0}, reverse=True)
    return [(r, g) for r in rows for g in blocks if _unit_bytes(m, r, g) <= target.local_bytes * 3 // 4]


def default_unit(m: Tensor, target: Target) -> tuple[int, int]:
    """The default form of GEMM stage `m`'s kernel:

    * where one image's V and a thread's share of its output blocks fit (small maps): a unit per
      thread of all rows x the thread's blocks, so U is read once in all and V computed once per
      thread. In such units ResNet-18's 14-pixel layer ran 682 us against 920 staged (and 925
      direct), its 28-pixel layer 383 against 441 in units of 4 rows (weights evicted);
    * else, where U stays cached (`FUSED_WEIGHT_BYTES`): units of the fewest rows that make about
      `UNIT_TILES` tiles, while every thread still gets one;
    * else the three stages apart."""
    positions, kb, _, oc = m.shape
    th, tw = m.op.attrs["tiles_h"], m.op.attrs["tiles_w"]  # type: ignore[union-attr]
    units = fused_units(m, target)
    share = kb // target.threads if kb % target.threads == 0 else 0
    if (th, share) in units:
        return th, share
    ic = m.op.reduce_axes[0].extent  # type: ignore[union-attr]
    rows = [r for r, g in units if g == kb and -(-th // r) >= min(target.threads, th)]
    if positions * kb * oc * ic * np.dtype(m.dtype).itemsize > FUSED_WEIGHT_BYTES or not rows:
        return STAGED
    return next((r for r in rows if r * tw >= UNIT_TILES), rows[-1]), kb


def _vectors(block: int, lanes: int) -> int:
    """Vectors per channel block (a block narrower than the target's vector is one vector)."""
    return max(1, block // min(lanes, block))


def gemm_knobs(m: Tensor, pad: Tensor | None) -> tuple[Knob, ...]:
    """The knobs of GEMM stage `m`'s register tile, block order and padding (`pad`: the padding
    stage, if any), which the pooled kernel shares."""
    _, kb, p, _ = m.shape
    return (
        Knob("tile_p", [t for t in TILE_COUNTS if t <= p]),
        Knob("tile_k_blocks", [t for t in (1, 2, 3, 4) if kb % t == 0]),
        Knob("outer", ("k", "p")),
        Knob("pad", ("root", "inline") if pad is not None else ("inline",)),
    )


def default_gemm(m: Tensor, pad: Tensor | None, target: Target) -> tuple[tuple[str, object], ...]:
    """The default GEMM tile, block order and padding of stage `m`: an eighth of the registers
    for U's vectors (four blocks on AVX-512, two on AVX2) and as many tiles as the rest holds,
    less an eighth kept free and less ragged waste. Timed on ResNet-18's 56- and 28-pixel layers
    (F(4x4), AVX-512, 2 threads, weights evicted), 6 tiles x 4 blocks ran 404 and 522 us where
    14 x 2 (the direct kernel's shape, which fills every register) ran 867 and 839 us: the
    GEMM's address arithmetic needs registers of its own."""
    _, kb, p, oc = m.shape
    regs = target.vector_registers
    nv = _vectors(oc, target.vector_lanes())
    tk = max(t for t in (1, 2, 3, 4) if kb % t == 0 and t * nv <= max(regs // 8, nv))
    room = regs - regs // 8 - tk * nv - (0 if target.has("avx512f") else 1)
    fits = [t for t in TILE_COUNTS if t <= p and t * tk * nv <= room] or [1]
    tp = max(fits, key=lambda t: (t / tile_waste(p, t), t))
    return (("tile_p", tp), ("tile_k_blocks", tk), ("outer", "k"),
            ("pad", "root" if pad is not None else "inline"))


class Conv2dWinogradNCHWcTemplate(Template):
    name = "conv2d_winograd_nchwc"
    tags = ("conv2d_winograd_nchwc",)
    batch_knobs = ("unit",)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, m, pad, _ = _stages(cdef)
        return Space(self.name, (*gemm_knobs(m, pad), Knob("unit", [STAGED, *fused_units(m, target)])))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The GEMM's default tile (`default_gemm`) and the default form (`default_unit`)."""
        _, m, pad, _ = _stages(cdef)
        return Config(self.name, (*default_gemm(m, pad, target), ("unit", default_unit(m, target))))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        v, m, pad, inlined = _stages(cdef)
        lanes = target.vector_lanes()
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in inlined]
        if pad is not None:
            steps += root_pad_copy(pad, lanes) if config["pad"] == "root" else [S.ComputeInline(pad.name)]
        out, tile = pattern(cdef).output, m.op.attrs["tile"]  # type: ignore[union-attr]
        if config["unit"] != STAGED:
            unit_steps, unit = _fused_output(out, tile, *config["unit"], lanes)
            steps += unit_steps
            steps += _gemm(m, config, lanes, at=unit)
            steps += _fused_input(v, lanes, at=unit)
        else:
            steps += _input_transform(v, m.op.attrs["tiles_w"], lanes)  # type: ignore[union-attr]
            steps += _gemm(m, config, lanes)
            steps += _output_transform(out, tile, lanes)
        return tuple(steps)


def _fused_output(out: Tensor, tile: int, rows: int, blocks: int, lanes: int
                  ) -> tuple[list[S.Step], tuple[str, str]]:
    """The output transform's loops in fused units, and the unit loop (stage, axis): (image,
    group of `blocks` output blocks, group of `rows` tile rows) fused and parallel, then the
    unit's blocks, tile rows, tiles and each tile's pixels."""
    n, k, y, x, o = (a.name for a in out.op.axes)  # type: ignore[union-attr]
    unit = f"{n}_{k}_o_{y}_o"
    return [
        S.Split(out.name, k, blocks),
        S.Split(out.name, y, tile * rows),
        S.Split(out.name, x, tile),
        S.Split(out.name, f"{y}_i", tile),
        S.Reorder(out.name, (n, f"{k}_o", f"{y}_o", f"{k}_i", f"{y}_i_o", f"{x}_o", f"{y}_i_i", f"{x}_i", o)),
        S.Fuse(out.name, n, f"{k}_o"),
        S.Fuse(out.name, f"{n}_{k}_o", f"{y}_o"),
        S.Parallel(out.name, unit),
        S.Unroll(out.name, f"{y}_i_i"),
        S.Unroll(out.name, f"{x}_i"),
        *vector_axis(out.name, o, out.shape[-1], lanes),
    ], (out.name, unit)


def _fused_input(v: Tensor, lanes: int, at: tuple[str, str]) -> list[S.Step]:
    """A fused unit's input transform: its tiles of every input block, positions unrolled."""
    z, cb, p, c = (a.name for a in v.op.axes)  # type: ignore[union-attr]
    return [
        S.ComputeAt(v.name, *at),
        S.Reorder(v.name, (cb, p, z, c)),
        S.Unroll(v.name, z),
        *vector_axis(v.name, c, v.shape[-1], lanes),
    ]


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


def _gemm(m: Tensor, config: Config, lanes: int, at: tuple[str, str] | None = None) -> list[S.Step]:
    """The GEMMs' register tiles: parallel over (position, outer block), or computed at a fused
    unit's loop `at` over the unit's tiles."""
    z, k, p, o = (a.name for a in m.op.axes)  # type: ignore[union-attr]
    rc = m.op.reduce_axes[0].name  # type: ignore[union-attr]
    ic = m.op.attrs["ic_bn"]  # type: ignore[union-attr]
    name, acc = m.name, f"{m.name}_local"
    blocks = (f"{k}_o", f"{p}_o") if config["outer"] == "k" else (f"{p}_o", f"{k}_o")
    where = [S.ComputeAt(name, *at)] if at else [S.Fuse(name, z, blocks[0]),
                                                 S.Parallel(name, f"{z}_{blocks[0]}")]
    return [
        S.CacheWrite(name),
        S.Split(name, k, config["tile_k_blocks"]),
        S.Split(name, p, config["tile_p"]),
        S.Reorder(name, (z, *blocks, f"{k}_i", f"{p}_i", o)),
        S.ComputeAt(acc, name, blocks[1]),
        *where,
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
