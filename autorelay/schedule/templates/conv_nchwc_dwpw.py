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
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, depthwise_band, pattern, register
from autorelay.schedule.templates.conv import _width_tiles
from autorelay.schedule.templates.conv_nchwc import block_tiles, default_register_tile, register_tile
from autorelay.schedule.templates.conv_nchwc_pool import tile_rows
from autorelay.schedule.templates.depthwise import MAX_UNROLLED_TAPS, default_width_tile
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef

# the band a unit holds, at most, in bytes, for the default: well inside a core's L2 (512 KB on Zen 3,
# 1-2 MB on later cores) beside the 1x1 weights and the unit's output rows
DEFAULT_BAND_BYTES = 96 * 1024


def band_row_choices(rows: int) -> list[int]:
    """The output rows a unit may span: divisors of the map's, up to 16 (every unit whole)."""
    return [r for r in range(1, min(rows, 16) + 1) if rows % r == 0]


class Conv2dNCHWcDepthwiseBandTemplate(Template):
    """A 1x1 NCHW[x]c convolution computing its depthwise producer per band of rows (see the module
    docstring). Knobs: the rows of a unit, the 1x1 register tile (pixels, channel blocks, rows) and
    the depthwise register tile's pixels."""

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
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The most rows per unit whose band stays under `DEFAULT_BAND_BYTES` and that still leave
        every thread four units; the 1x1's default register tile with rows dividing the unit; the
        depthwise template's default width tile."""
        parts = depthwise_band(cdef)
        assert parts is not None
        band, pw = parts.band, parts.pointwise
        oh, ow = pw.shape[2], pw.shape[3]
        row_bytes = band.shape[1] * band.shape[3] * band.shape[4] * 4
        choices = band_row_choices(oh)
        fits = [r for r in choices if r * row_bytes <= DEFAULT_BAND_BYTES and oh // r >= 4 * target.threads]
        rows = max(fits or choices[:1])
        tb, tow, toh = default_register_tile(pw, target, [t for t in (1, 2, 3, 4) if rows % t == 0])
        dw_tow = default_width_tile(ow, band.shape[4], target)
        return Config(self.name, (("band_rows", rows), ("tile_ow", tow), ("tile_oc_blocks", tb),
                                  ("tile_oh", toh), ("dw_tile_ow", dw_tow), ("reduce_order", "c_hw_ci"),
                                  ("unroll_kw", 1)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        parts = depthwise_band(cdef)
        assert parts is not None
        dw, band, pw = parts.depthwise, parts.band, parts.pointwise
        out = pattern(cdef).output
        keep = {id(dw), id(band), id(pw), id(out)}
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
        steps += _band_loops(band.name, [a.name for a in band.op.axes], f"{dw.name}_local", dw, config,  # type: ignore[union-attr]
                             min(target.vector_lanes(), band.shape[4]))
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


def _band_loops(band: str, axes: list[str], dw_acc: str, dw, config: Config, lanes: int) -> list[S.Step]:
    """The band's loops (rows, channel blocks, pixel tiles of `dw_tile_ow`) and the depthwise register
    tile under each pixel tile: the taps outermost and unrolled, pixels and vectors inside."""
    n, c, y, x, v = axes
    _i, _c, _y, z, dv = (a.name for a in dw.op.axes)
    rh, rw = (a.name for a in dw.op.reduce_axes)
    steps: list[S.Step] = [
        S.Split(band, x, config["dw_tile_ow"]),
        S.Split(band, v, lanes),
        S.Reorder(band, (n, c, y, f"{x}_o", f"{x}_i", f"{v}_o", f"{v}_i")),
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
    return steps


register(Conv2dNCHWcDepthwiseBandTemplate())
