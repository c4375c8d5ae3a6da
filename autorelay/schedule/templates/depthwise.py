"""Depthwise convolution templates: NCHW (width is the vector) and NCHW[x]c (channels are).

A depthwise convolution does 9 multiply-adds per output value and reuses nothing across channels,
so it is bound by how often each input value is loaded. Both templates keep a register tile of
outputs of one channel (block) and unroll the kernel taps over it, so one loaded input row or
pixel serves every output of the tile that it overlaps.
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.conv import _prologue, _width_tiles
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef


class DepthwiseNCHWTemplate(Template):
    """Depthwise NCHW: each channel is its own tiny convolution, so the register tile is output
    width (the vector) x `tile_oh` rows of one channel, weights broadcast. Several rows per tile
    let one loaded input row serve every output row it overlaps (unrolled, the loads are shared),
    which is what a memory-bound kernel needs; unrolling the kernel rows and columns exposes it."""

    name = "depthwise_conv2d_nchw"
    tags = ("depthwise_conv2d_nchw",)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, _, oh, ow = pattern(cdef).reduce.shape  # type: ignore[union-attr]
        lanes = target.vector_lanes()
        return Space(
            self.name,
            (
                Knob("tile_ow_vectors", [t for t in (1, 2, 3, 4) if (t - 1) * lanes < ow] or [1]),
                Knob("tile_oh", [t for t in (1, 2, 3, 4) if t <= oh]),
                Knob("unroll_kh", (0, 1)),
                Knob("unroll_kw", (0, 1)),
                Knob("pad", ("root", "inline")),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        ow = pattern(cdef).reduce.shape[3]  # type: ignore[union-attr]
        # the data's width: the widest 4-d input (the first input may be a quantized layer's
        # run-time zero point, and the other 4-d one is the kh x kw weight)
        in_w = max(t.shape[3] for t in cdef.inputs if len(t.shape) == 4)
        lanes = target.vector_lanes()
        # a strided or tiny output reads too little of a padded copy to pay for making it
        # (measured: inline padding wins for stride 2 and 7x7 maps)
        inline = in_w > ow + 4 or ow < lanes
        tv = 1 if inline else min(4, max(1, -(-ow // lanes)))
        # large maps: two rows per tile with the kernel unrolled (measured on a noisy host: up to
        # 1.4x on MobileNet's 112 and 56 px layers); 14 and 7 px maps were slower with it
        red = pattern(cdef).reduce
        big = red.shape[2] >= 28  # type: ignore[union-attr]
        kh, kw = (a.extent for a in red.op.reduce_axes)  # type: ignore[union-attr]
        knobs = (("tile_ow_vectors", tv), ("tile_oh", 2 if big else 1),
                 ("unroll_kh", int(big and kh * kw <= MAX_UNROLLED_TAPS)),
                 ("unroll_kw", int(kw <= MAX_UNROLLED_TAPS)), ("pad", "inline" if inline else "root"))
        return Config(self.name, knobs)

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        steps, out, acc, red = _prologue(cdef, config["pad"], target.vector_lanes())
        lanes = target.vector_lanes()
        tv = config["tile_ow_vectors"]
        _n, _c, oh, ow = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
        on, oc, ooh, oow = (a.name for a in pattern(cdef).output.op.axes)  # type: ignore[union-attr]
        steps += [
            S.Split(out, ooh, config["tile_oh"]),
            S.Split(out, oow, tv * lanes),
            S.Reorder(out, (on, oc, f"{ooh}_o", f"{oow}_o", f"{ooh}_i", f"{oow}_i")),
            S.Fuse(out, on, oc),
            S.Fuse(out, f"{on}_{oc}", f"{ooh}_o"),
            S.Parallel(out, f"{on}_{oc}_{ooh}_o"),
            S.ComputeAt(acc, out, f"{oow}_o"),
            S.Split(out, f"{oow}_i", lanes, f"{oow}_v", f"{oow}_w"),
            S.Vectorize(out, f"{oow}_w"),
        ]
        steps += [
            S.Split(acc, ow, lanes),
            S.Reorder(acc, (rh, rw, oh, f"{ow}_o", f"{ow}_i")),
            S.Unroll(acc, oh),
            S.Unroll(acc, f"{ow}_o"),
            S.Vectorize(acc, f"{ow}_i"),
        ]
        if config["unroll_kw"]:
            steps.append(S.Unroll(acc, rw))
        if config["unroll_kh"]:
            steps.append(S.Unroll(acc, rh))
        return tuple(steps)


class DepthwiseNCHWcTemplate(Template):
    """Depthwise NCHW[x]c: the channel block is the vector, so every tap is one contiguous vector
    load of an input pixel times the tap's weight vector, strided convolutions cost nothing extra,
    and a padded border pixel is one scalar test (not a per-lane select as in NCHW). The register
    tile is `tile_oh` rows x `tile_ow` pixels of one channel block; with the taps unrolled the
    `tile_ow + 2` input pixels of a row (stride 1) are loaded once for the whole tile row.

    A grouped convolution whose small groups are packed whole in a block (`group_conv2d_nchwc`)
    is scheduled the same way, its extra reduction over a group's g channels inside each tap:
    every input pixel vector is shuffled g ways (each lane taking lane `rc` of its group). Unrolled
    (`unroll_group`), a pixel is loaded once for its g shuffles, but the kernel grows g-fold (an
    8-channel group's compiles in seconds)."""

    name = "depthwise_nchwc"
    tags = ("depthwise_nchwc", "group_conv2d_nchwc")

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        red = pattern(cdef).reduce
        _, _, oh, ow, _ = red.shape  # type: ignore[union-attr]
        grouped = len(red.op.reduce_axes) > 2  # type: ignore[union-attr]
        return Space(
            self.name,
            (
                Knob("tile_ow", _width_tiles(ow, 8)),
                Knob("tile_oh", [t for t in (1, 2, 3, 4) if t <= oh]),
                Knob("unroll_kh", (0, 1)),
                Knob("pad", ("root", "inline")),
                *((Knob("unroll_group", (0, 1)),) if grouped else ()),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        red = pattern(cdef).reduce
        *_, ow, block = red.shape  # type: ignore[union-attr]
        tow = default_width_tile(ow, block, target)
        kh, kw = (a.extent for a in red.op.reduce_axes[-2:])  # type: ignore[union-attr]
        unroll = int(kh * kw <= MAX_UNROLLED_TAPS)
        knobs = (("tile_ow", tow), ("tile_oh", 1), ("unroll_kh", unroll), ("pad", "inline"))
        if len(red.op.reduce_axes) > 2:  # type: ignore[union-attr]
            # packed groups: g shuffled reads of each pixel, so a padded copy pays for itself, and
            # one load serves them all when unrolled (measured on ResNeXt's 56-pixel 4-channel
            # groups: 294 us against 387 inline; 28-pixel 8-channel ones: 308 against 402 rolled)
            # groups of 16 or more (int8 ResNeXt's, one group per block) stay rolled: unrolled,
            # the kernel grows to thousands of multiply-adds and compiles for seconds
            group = red.op.reduce_axes[0].extent  # type: ignore[union-attr]
            knobs = (*knobs[:3], ("pad", "root"), ("unroll_group", int(group <= 8)))
        return Config(self.name, knobs)

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        steps, out, acc, red = _prologue(cdef, config["pad"], target.vector_lanes())
        lanes = min(target.vector_lanes(), red.shape[4])  # type: ignore[union-attr]
        _n, _c, oh, ow, v = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        *group, rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
        on, oc, ooh, oow, ov = (a.name for a in pattern(cdef).output.op.axes)  # type: ignore[union-attr]
        steps += [
            S.Split(out, ooh, config["tile_oh"]),
            S.Split(out, oow, config["tile_ow"]),
            S.Reorder(out, (on, oc, f"{ooh}_o", f"{oow}_o", f"{ooh}_i", f"{oow}_i", ov)),
            S.Fuse(out, on, oc),
            S.Fuse(out, f"{on}_{oc}", f"{ooh}_o"),
            S.Parallel(out, f"{on}_{oc}_{ooh}_o"),
            S.ComputeAt(acc, out, f"{oow}_o"),
            S.Split(out, ov, lanes),
            S.Vectorize(out, f"{ov}_i"),
            S.Split(acc, v, lanes),
            S.Reorder(acc, (rh, rw, *group, oh, ow, f"{v}_o", f"{v}_i")),
            S.Unroll(acc, oh),
            S.Unroll(acc, ow),
            S.Unroll(acc, f"{v}_o"),
            S.Vectorize(acc, f"{v}_i"),
            *(S.Unroll(acc, rc) for rc in group if config["unroll_group"]),
        ]
        if red.op.reduce_axes[-1].extent <= MAX_UNROLLED_TAPS:  # type: ignore[union-attr]
            steps.append(S.Unroll(acc, rw))
        if config["unroll_kh"]:
            steps.append(S.Unroll(acc, rh))
        return tuple(steps)


def default_width_tile(ow: int, block: int, target: Target) -> int:
    """The default register tile's pixels of an NCHW[block]c depthwise convolution `ow` pixels wide:
    the widest low-waste tile that leaves registers for the weight and input vectors."""
    vectors = max(1, block // target.vector_lanes())
    budget = max(1, (target.vector_registers - 4) // vectors)
    tiles = [t for t in _width_tiles(ow, 8) if t <= budget]
    return min(tiles, key=lambda t: (tile_waste(ow, t) * (1 + 2 / t), -t))


# Taps unrolled by default, at most: a 23x23 kernel fully unrolled over an 8-pixel tile is 4,000
# vector multiply-adds in one block, and LLVM's optimiser then takes minutes to compile it.
MAX_UNROLLED_TAPS = 64


register(DepthwiseNCHWTemplate())
register(DepthwiseNCHWcTemplate())
