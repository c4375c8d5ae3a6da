"""A 1x1 NCHW[x]c convolution that computes its depthwise producer per band of rows
(`FusionPlan.depthwise_bands`): MobileNet's depthwise-separable pairs in one kernel.

A parallel unit is `band_rows` rows of the 1x1 convolution's output, every channel block. It first
computes those rows of the depthwise convolution, activated (bias, ReLU6: the tail the 1x1 reads),
into a band buffer of every channel (`band_rows` x width x channels: tens of KB), with a register
tile of `dw_tile_ow` pixels of one channel block whose taps are unrolled, as `depthwise_nchwc`
does. Then it runs the 1x1 convolution over the band while it is in cache, with `conv2d_nchwc`'s
register tile. The 1x1 reads each band row exactly once, so no depthwise row is computed twice.
Separately, the depthwise kernel writes its whole map (MobileNet-v2's 56-px layers: 1.8 MB) and the
1x1 reads it back; fused, that round trip stays in cache, but each unit holds all channels of its
rows, so small maps have few units to share between the threads: whether it pays is measured per
layer (`search.fusion_choice`).

The depthwise convolution's padding is inlined into its reads (a zero-bordered input, the graph
builder's halo, needs none).

With an expansion (`FusionPlan.expansions`: MobileNet-v2's inverted residual block, whose 1x1
expansion writes the block's widest map), the unit also computes the depthwise input: for each tile
of `ex_blocks` channel blocks of the band, the expanded rows those band rows read (halo rows
included: a region shifted into the map, `stage_layout.bound_region`) into a zero-bordered buffer
of those blocks (tens of KB), row by row through a row buffer that register tiles of `ex_tile_ow`
pixels x `ex_blocks` blocks fill, before the depthwise tiles read it. The map is never stored; the
price is the halo rows, which two neighbouring units both compute (2 more rows per `band_rows` for
a stride-1 3x3 depthwise kernel), so it needs tall units, and it is measured per layer like the
band itself.
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import (
    DepthwiseBand,
    Template,
    depthwise_band,
    pattern,
    register,
    tile_waste,
)
from autorelay.schedule.templates.conv import _width_tiles
from autorelay.schedule.templates.conv_nchwc import block_tiles, default_register_tile, register_tile
from autorelay.schedule.templates.conv_nchwc_pool import tile_rows
from autorelay.schedule.templates.depthwise import MAX_UNROLLED_TAPS, default_width_tile
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

# the band a unit holds, at most, in bytes, for the default: well inside a core's L2 (512 KB on Zen 3,
# 1-2 MB on later cores) beside the 1x1 weights and the unit's output rows
DEFAULT_BAND_BYTES = 96 * 1024
# the same with an expansion, whose halo rows favour tall units: a core's L2 (512 KB on Zen 3)
EXPANSION_BAND_BYTES = 512 * 1024


def band_row_choices(rows: int) -> list[int]:
    """The output rows a unit may span: divisors of the map's, up to 16 (every unit whole)."""
    return [r for r in range(1, min(rows, 16) + 1) if rows % r == 0]


class Conv2dNCHWcDepthwiseBandTemplate(Template):
    """A 1x1 NCHW[x]c convolution computing its depthwise producer per band of rows (see the module
    docstring). Knobs: the rows of a unit, the 1x1 register tile (pixels, channel blocks, rows), the
    depthwise register tile's pixels and, with an expansion, its register tile (blocks, pixels)."""

    name = "conv2d_nchwc_dwpw"
    tags = ("conv2d_nchwc",)

    def claims(self, cdef: ComputeDef) -> bool:
        return depthwise_band(cdef) is not None

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        parts = depthwise_band(cdef)
        assert parts is not None
        pw = parts.pointwise
        oh, ow = pw.shape[2], pw.shape[3]
        return Space(self.name, (
            Knob("band_rows", band_row_choices(oh)),
            Knob("tile_ow", _width_tiles(ow, 16)),
            Knob("tile_oc_blocks", block_tiles(pw)),
            Knob("tile_oh", [t for t in (1, 2, 3, 4) if t <= oh]),
            Knob("dw_tile_ow", _width_tiles(ow, 8)),
            # a 1x1 reduction has no taps: `register_tile` reads these two, fixed here
            Knob("reduce_order", ("c_hw_ci",)),
            Knob("unroll_kw", (1,)),
            *_expansion_knobs(parts),
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The most rows per unit whose band stays under `DEFAULT_BAND_BYTES` and that still leave
        every thread four units; the 1x1's default register tile with rows dividing the unit; the
        depthwise template's default width tile.

        With an expansion, each unit also computes its depthwise halo rows of the expansion again,
        so fewer, taller units pay: the most rows that leave every thread two units, under
        `EXPANSION_BAND_BYTES` (on MobileNet-v2's 56- and 28-pixel stride-1 blocks, Zen 3, 2
        threads, units of 14 and 7 rows ran fastest of every row count)."""
        parts = depthwise_band(cdef)
        assert parts is not None
        band, pw = parts.band, parts.pointwise
        oh, ow = pw.shape[2], pw.shape[3]
        row_bytes = band.shape[1] * band.shape[3] * band.shape[4] * 4
        choices = band_row_choices(oh)
        per_thread, limit = (4, DEFAULT_BAND_BYTES) if parts.expansion is None else (2, EXPANSION_BAND_BYTES)
        fits = [r for r in choices if r * row_bytes <= limit and oh // r >= per_thread * target.threads]
        rows = max(fits or choices[:1])
        tb, tow, toh = default_register_tile(pw, target, [t for t in (1, 2, 3, 4) if rows % t == 0])
        dw_tow = default_width_tile(ow, band.shape[4], target)
        ex = parts.expansion
        expansion = () if ex is None else tuple(zip(("ex_blocks", "ex_tile_ow"), expansion_tile(ex, target)))
        return Config(self.name, (("band_rows", rows), ("tile_ow", tow), ("tile_oc_blocks", tb),
                                  ("tile_oh", toh), ("dw_tile_ow", dw_tow), ("reduce_order", "c_hw_ci"),
                                  ("unroll_kw", 1), *expansion))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        parts = depthwise_band(cdef)
        assert parts is not None
        dw, band, pw = parts.depthwise, parts.band, parts.pointwise
        out = pattern(cdef).output
        stages = (dw, band, pw, out, parts.expansion, parts.expanded, parts.staged)
        keep = {id(t) for t in stages if t is not None}
        # padding and the 1x1's epilogue inline; the band's earlier tail stages inline into it
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in pattern(cdef).others if id(t) not in keep]
        if out is pw:
            steps.append(S.CacheWrite(pw.name))
        acc = f"{pw.name}_local" if out is pw else pw.name
        steps.append(S.CacheWrite(dw.name))  # the depthwise register tile, copied out into the band
        if band is not dw:
            steps.append(S.ComputeInline(dw.name))  # the tail reads the register tile directly
        steps += _output_loops(out.name, [a.name for a in out.op.axes], acc, band.name, config)  # type: ignore[union-attr]
        lanes = min(target.vector_lanes(), pw.op.attrs["oc_bn"])  # type: ignore[union-attr]
        _n, _oc, oh, ow, _oci = (a.name for a in pw.op.axes)  # type: ignore[union-attr]
        steps += register_tile(acc, pw, config, lanes, (oh, ow))
        ooci = out.op.axes[-1].name  # type: ignore[union-attr]
        steps += [S.Split(out.name, ooci, lanes), S.Vectorize(out.name, f"{ooci}_i")]
        band_lanes = min(target.vector_lanes(), band.shape[4])
        blocks = config["ex_blocks"] if parts.expansion is not None else 1
        band_steps, block_loop = _band_loops(band.name, [a.name for a in band.op.axes], f"{dw.name}_local",  # type: ignore[union-attr]
                                             dw, config, band_lanes, blocks)
        steps += band_steps
        if parts.expansion is not None:
            steps += _expansion_steps(parts, band.name, block_loop, config, band_lanes)
        return tuple(steps)


def _output_loops(out: str, axes: list[str], acc: str, band: str, config: Config) -> list[S.Step]:
    """Units of `band_rows` rows x every channel block, parallel; in each, the band, then tiles of
    `tile_oh` rows x `tile_ow` pixels x `tile_oc_blocks` blocks, each with its register tile."""
    n, oc, oh, ow, oci = axes
    rows = config["band_rows"]
    toh = tile_rows(rows, config["tile_oh"])
    unit = f"{n}_{oh}_o"
    steps: list[S.Step] = [S.Split(out, oh, rows), S.Split(out, ow, config["tile_ow"]),
                           S.Split(out, oc, config["tile_oc_blocks"])]
    if toh > 1:
        steps.append(S.Split(out, f"{oh}_i", toh))
        row_loops = (f"{oh}_i_o",), (f"{oh}_i_i",)
    else:
        row_loops = (f"{oh}_i",), ()
    steps += [
        S.Reorder(out, (n, f"{oh}_o", f"{oc}_o", *row_loops[0], f"{ow}_o", f"{oc}_i", *row_loops[1],
                        f"{ow}_i", oci)),
        S.Fuse(out, n, f"{oh}_o"),
        S.Parallel(out, unit),
        S.ComputeAt(acc, out, f"{ow}_o"),
        S.ComputeAt(band, out, unit),
    ]
    return steps


def _band_loops(band: str, axes: list[str], dw_acc: str, dw, config: Config, lanes: int, blocks: int = 1
                ) -> tuple[list[S.Step], str]:
    """The band's loops (tiles of `blocks` channel blocks, the blocks of a tile, rows, pixel tiles of
    `dw_tile_ow`) and the depthwise register tile under each pixel tile: the taps outermost and
    unrolled, pixels and vectors inside. Returns the steps and the loop over tiles of blocks (an
    expansion's rows are computed there)."""
    n, c, y, x, v = axes
    _i, _c, _y, z, dv = (a.name for a in dw.op.axes)
    rh, rw = (a.name for a in dw.op.reduce_axes)
    channels = (c,)
    steps: list[S.Step] = []
    if blocks > 1:
        steps.append(S.Split(band, c, blocks))
        channels = (f"{c}_o", f"{c}_i")
    steps += [
        S.Split(band, x, config["dw_tile_ow"]),
        S.Split(band, v, lanes),
        S.Reorder(band, (n, *channels, y, f"{x}_o", f"{x}_i", f"{v}_o", f"{v}_i")),
        S.ComputeAt(dw_acc, band, f"{x}_o"),
        S.Vectorize(band, f"{v}_i"),
        S.Split(dw_acc, dv, lanes),
        S.Reorder(dw_acc, (rh, rw, _y, z, f"{dv}_o", f"{dv}_i")),
        S.Unroll(dw_acc, z),
        S.Unroll(dw_acc, f"{dv}_o"),
        S.Vectorize(dw_acc, f"{dv}_i"),
    ]
    kh, kw = (a.extent for a in dw.op.reduce_axes)
    if kw <= MAX_UNROLLED_TAPS:
        steps.append(S.Unroll(dw_acc, rw))
    if kh * kw <= MAX_UNROLLED_TAPS:
        steps.append(S.Unroll(dw_acc, rh))
    return steps, channels[0]


def _expansion_knobs(parts: DepthwiseBand) -> tuple[Knob, ...]:
    """The expansion's register tile: channel blocks (`ex_blocks`, also the blocks of each stored
    tile of the depthwise input) and pixels (`ex_tile_ow`); none without an expansion."""
    ex = parts.expansion
    if ex is None:
        return ()
    return Knob("ex_blocks", block_tiles(ex)), Knob("ex_tile_ow", _width_tiles(ex.shape[3], 16))


def expansion_tile(expansion: Tensor, target: Target) -> tuple[int, int]:
    """The default register tile of the expansion: (channel blocks, pixels). As `conv2d_nchwc`'s
    default, two vectors of channels per pixel where the blocks allow (each broadcast input then
    serves two multiply-adds), and the most useful pixels the registers hold beside them."""
    nv = max(1, expansion.shape[4] // target.vector_lanes())
    tb = max(t for t in block_tiles(expansion) if t * nv <= max(2, nv))
    room = max(1, target.vector_registers - tb * nv - 1)
    ow = expansion.shape[3]
    fits = [t for t in _width_tiles(ow, 16) if t * tb * nv <= room] or [1]
    return tb, max(fits, key=lambda t: (t / tile_waste(ow, t), t))


def _expansion_steps(parts: DepthwiseBand, band: str, block_loop: str, config: Config, lanes: int
                     ) -> list[S.Step]:
    """The depthwise input of `ex_blocks` channel blocks, computed at the band's loop over tiles of
    blocks (`block_loop`: the region the depthwise tiles read), in register tiles of `ex_tile_ow`
    pixels x those blocks, the reduction over the expansion's input channels innermost but for the
    tile. When the depthwise convolution pads, its padding stage is the one stored there, so the
    depthwise tile reads no border test, and it copies each row from an unpadded row buffer the
    register tiles fill: written straight into the padded buffer, a tile would be addressed through
    clamped indices that keep LLVM from holding its accumulators in registers."""
    ex, expanded, staged = parts.expansion, parts.expanded, parts.staged
    assert ex is not None and expanded is not None and staged is not None
    acc = f"{ex.name}_local"
    steps: list[S.Step] = [S.CacheWrite(ex.name)]
    if expanded is not ex:
        steps.append(S.ComputeInline(ex.name))  # the tail reads the register tile directly
    n, c, y, x, v = (a.name for a in staged.op.axes)  # type: ignore[union-attr]
    steps.append(S.ComputeAt(staged.name, band, block_loop))
    if staged is not expanded:
        steps += [S.Split(staged.name, v, lanes), S.Reorder(staged.name, (n, y, c, x, f"{v}_o", f"{v}_i")),
                  S.Vectorize(staged.name, f"{v}_i"), S.ComputeAt(expanded.name, staged.name, y)]
    n, c, y, x, v = (a.name for a in expanded.op.axes)  # type: ignore[union-attr]
    steps += [
        # a ragged last tile shifts back (recomputing a few pixels) instead of a test in the tile
        S.Split(expanded.name, x, config["ex_tile_ow"], shift_tail=True),
        S.Split(expanded.name, v, lanes),
        S.Reorder(expanded.name, (n, y, f"{x}_o", c, f"{x}_i", f"{v}_o", f"{v}_i")),
        S.ComputeAt(acc, expanded.name, f"{x}_o"),
        S.Vectorize(expanded.name, f"{v}_i"),
    ]
    _n, _oc, oh, ow, _oci = (a.name for a in ex.op.axes)  # type: ignore[union-attr]
    one_by_one = Config("expansion", (("reduce_order", "c_hw_ci"), ("unroll_kw", 1)))
    return steps + register_tile(acc, ex, one_by_one, lanes, (oh, ow))


register(Conv2dNCHWcDepthwiseBandTemplate())
