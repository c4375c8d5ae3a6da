"""Winograd F(m x m, 3x3) in channel blocks with its max pooling as the epilogue
(`FusionPlan.pool_epilogues`; the direct convolution's counterpart is `conv2d_nchwc_pool`).

The pooled map is the kernel's output; the output transform (and the bias and ReLU after it) is
inlined into the pooling's reads, so the full activation map is never stored and no pooling
kernel reads it back. A parallel unit is `rows` tile rows x `blocks` output channel blocks, and
each tile's pooled pixels are computed together, unrolled (m/s x m/s pooled pixels, each of
their s x s windows' pixels at a constant position of the tile, so the transform's selects fold
and LLVM shares the tile's M loads between them). Only windows equal to their stride that divide
the tile (2x2 at stride 2 on F(2x2) or F(4x4)) are fused: a tile then holds whole windows, and
no tile is transformed twice.

The input transform and the GEMMs run as `conv2d_winograd_nchwc` runs them: apart, each its own
parallel loop nest into a workspace, or in the unit itself (V and M in per-unit buffers), the
`unit` knob's third field.
"""

from __future__ import annotations

from autorelay.op.pool import windows_tile
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import POOL_TAG, Template, conv_and_pool, register
from autorelay.schedule.templates.conv import root_pad_copy
from autorelay.schedule.templates.generic import vector_axis
from autorelay.schedule.templates.winograd_nchwc import (
    FUSED_ROWS,
    STAGED,
    _fused_input,
    _gemm,
    _input_transform,
    default_gemm,
    default_unit,
    fused_units,
    gemm_knobs,
)
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor, topo_order

GEMM_TAG = "conv2d_winograd_nchwc"


Stages = tuple[Tensor, Tensor, "Tensor | None", list[Tensor], Tensor]


def winograd_pool_stages(cdef: ComputeDef) -> Stages | None:
    """(V, M, the padding stage or None, stages to inline, the pooling) of a pooled blocked
    Winograd kernel whose windows this template fuses, else None."""
    found = conv_and_pool(cdef, GEMM_TAG)
    if found is None:
        return None
    m, pool = found
    stages = [t for t in topo_order([pool]) if t.op is not None and t is not pool and t is not m]
    by_tag = {t.op.tag: t for t in stages}  # type: ignore[union-attr]
    v, pad = by_tag.get("winograd_input"), by_tag.get("pad")
    size, strides = pool.op.attrs["pool_size"], pool.op.attrs["strides"]  # type: ignore[union-attr]
    tile = m.op.attrs["tile"]  # type: ignore[union-attr]
    if v is None or not windows_tile(size, strides, tile):
        return None
    return v, m, pad, [t for t in stages if t not in (v, pad)], pool


def _units(m: Tensor, target: Target) -> list[tuple[int, int, int]]:
    """(tile rows, output blocks, stages in the unit): every row count and block group with the
    stages apart, and the `fused_units` whose buffers fit with them in the unit. The groups apart
    include a single block, the default's unit when the stages run apart (`default`)."""
    kb, th = m.shape[1], m.op.attrs["tiles_h"]  # type: ignore[union-attr]
    rows = sorted({r for r in FUSED_ROWS if r < th} | {th})
    blocks = sorted({kb // d for d in (1, 2, 4, 8) if kb % d == 0} | {1}, reverse=True)
    apart = [(r, g, 0) for r in rows for g in blocks]
    return apart + [(r, g, 1) for r, g in fused_units(m, target)]


class Conv2dWinogradNCHWcPoolTemplate(Template):
    """Blocked Winograd convolution with its pooling per unit of tile rows (see the module
    docstring). Knobs: `conv2d_winograd_nchwc`'s GEMM tile, block order and padding, and the unit."""

    name = "conv2d_winograd_nchwc_pool"
    tags = (POOL_TAG,)
    batch_knobs = ("unit",)

    def claims(self, cdef: ComputeDef) -> bool:
        return winograd_pool_stages(cdef) is not None

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _v, m, pad, _rest, _pool = winograd_pool_stages(cdef)  # type: ignore[misc]
        return Space(self.name, (*gemm_knobs(m, pad), Knob("unit", _units(m, target))))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The Winograd kernel's default GEMM tile and form: its fused unit where it would fuse the
        stages (`default_unit`), else the stages apart in units of one tile row and one block."""
        _v, m, pad, _rest, _pool = winograd_pool_stages(cdef)  # type: ignore[misc]
        unit = default_unit(m, target)
        return Config(self.name, (*default_gemm(m, pad, target),
                                  ("unit", (1, 1, 0) if unit == STAGED else (*unit, 1))))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        v, m, pad, inlined, pool = winograd_pool_stages(cdef)  # type: ignore[misc]
        lanes = target.vector_lanes()
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in inlined]
        if pad is not None:
            steps += root_pad_copy(pad, lanes) if config["pad"] == "root" else [S.ComputeInline(pad.name)]
        rows, blocks, in_unit = config["unit"]
        tile, (sh, sw) = m.op.attrs["tile"], pool.op.attrs["strides"]  # type: ignore[union-attr]
        n, k, ph, pw, o = (a.name for a in pool.op.axes)  # type: ignore[union-attr]
        rh, rw = (a.name for a in pool.op.reduce_axes)  # type: ignore[union-attr]
        unit = f"{n}_{k}_o_{ph}_o"
        steps += [
            S.Split(pool.name, k, blocks),
            S.Split(pool.name, ph, rows * tile // sh),
            S.Split(pool.name, f"{ph}_i", tile // sh),  # a tile's pooled rows
            S.Split(pool.name, pw, tile // sw),  # and columns
            S.Reorder(pool.name, (n, f"{k}_o", f"{ph}_o", f"{k}_i", f"{ph}_i_o", f"{pw}_o", f"{ph}_i_i",
                                  f"{pw}_i", rh, rw, o)),
            S.Fuse(pool.name, n, f"{k}_o"),
            S.Fuse(pool.name, f"{n}_{k}_o", f"{ph}_o"),
            S.Parallel(pool.name, unit),
            *(S.Unroll(pool.name, axis) for axis in (f"{ph}_i_i", f"{pw}_i", rh, rw)),
            *vector_axis(pool.name, o, pool.shape[-1], lanes),
        ]
        if in_unit:
            steps += _gemm(m, config, lanes, at=(pool.name, unit))
            steps += _fused_input(v, lanes, at=(pool.name, unit))
        else:
            steps += _input_transform(v, m.op.attrs["tiles_w"], lanes)  # type: ignore[union-attr]
            steps += _gemm(m, config, lanes)
        return tuple(steps)


register(Conv2dWinogradNCHWcPoolTemplate())
