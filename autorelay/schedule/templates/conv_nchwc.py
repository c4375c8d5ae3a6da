"""The direct NCHW[x]c convolution template (its int8 variant: `int8`).

The register tile is `tile_oh` rows x `tile_ow` output pixels x `tile_oc_blocks` output channel
blocks (each block one or more vectors). Per input channel, each pixel's input value is broadcast
once and serves every block of the tile, each block's weight vector is loaded once and serves
every pixel: with one block, every multiply-add needs its own broadcast, which is what bounds 1x1
convolutions (MLAS's NCHWc kernels likewise span several output blocks).

Where the reduction runs (`pass_rows`):

* 0: inside each register tile, over every input channel: the tile's accumulators stay in
  registers from the first multiply-add to the store. Each tile reads all of its blocks' weights,
  so a layer reads its weights once per row (tile) of output, from the cache after the first.
* r > 0: a parallel unit is r rows of the output for one tile of channel blocks, its accumulators
  live in a buffer (in L1), and the loop over blocks of input channels runs outside the unit's
  pixel tiles: each block of weights is read once per unit and serves all of its r rows while
  cached. A layer whose weights do not stay cached between inferences (ResNet-18's 7x7 layers:
  9.4 MB, read from memory in a model) then streams them once, alongside the arithmetic, instead
  of stalling the first row of every tile on them: 880 against 1276 us for a 7x7 512-channel
  layer, 476 against 705 us for the stride-2 layer into it (weights evicted before each call, as
  in a model; the register tile the same).
"""

from __future__ import annotations

from collections.abc import Sequence

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, depthwise_band, pattern, register, tile_waste
from autorelay.schedule.templates.conv import _padded, _prologue, _width_tiles, nchwc_output_tile
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

# an output of at most this many pixels per image reads each weight so few times that the layer
# streams its weights from memory (ResNet's 7x7 layers: 49; its 14x14 layers, 196, do not)
STREAMING_PIXELS = 64


def block_tiles(red: Tensor) -> list[int]:
    """The channel-block counts a register tile may span: divisors of the output's blocks."""
    blocks = red.shape[1]
    return [t for t in (1, 2, 3, 4) if blocks % t == 0]


def register_tile_knobs(cdef: ComputeDef, red: Tensor) -> tuple[Knob, ...]:
    """The knobs of convolution `red`'s register tile, reduction order, kernel-width unroll and
    padding (`conv2d_nchwc`'s and its pooled kernel's)."""
    oh, ow = red.shape[2], red.shape[3]
    return (
        Knob("tile_ow", _width_tiles(ow, 16)),
        Knob("tile_oc_blocks", block_tiles(red)),
        Knob("reduce_order", ("c_hw_ci", "hw_c_ci")),
        Knob("unroll_kw", (0, 1)),
        Knob("pad", ("root", "inline") if _padded(cdef) else ("inline",)),
        Knob("tile_oh", [t for t in (1, 2, 3, 4) if t <= oh]),
    )


def register_tile_defaults(cdef: ComputeDef, tb: int, tow: int, toh: int) -> tuple[tuple[str, object], ...]:
    """Those knobs' values for a register tile of `tb` blocks x `tow` pixels x `toh` rows: channel
    blocks outermost in the reduction, the kernel width unrolled, padding as its own pass."""
    return (("tile_ow", tow), ("tile_oc_blocks", tb), ("reduce_order", "c_hw_ci"), ("unroll_kw", 1),
            ("pad", "root" if _padded(cdef) else "inline"), ("tile_oh", toh))


def _pass_rows(oh: int) -> list[int]:
    """0 (the reduction inside each register tile) and the row counts a weight pass may span."""
    return [0, *sorted({r for r in (2, 4, 8) if r < oh} | {oh})]


def default_register_tile(red: Tensor, target: Target, rows: Sequence[int] = (1, 2, 3, 4)
                          ) -> tuple[int, int, int]:
    """The default register tile of the NCHW[x]c convolution `red`: (channel blocks, pixels, rows),
    its rows one of `rows`; see `Conv2dNCHWcTemplate.default`."""
    oh, ow, ocb = red.shape[2], red.shape[3], red.op.attrs["oc_bn"]  # type: ignore[union-attr]
    nv = max(1, ocb // min(target.vector_lanes(), ocb))
    streaming = oh * ow <= STREAMING_PIXELS
    per_pixel = target.vector_registers // 8 if streaming else 2  # weight vectors in a tile
    tb = max(t for t in block_tiles(red) if t * nv <= max(per_pixel, nv))  # type: ignore[arg-type]
    broadcast = 0 if target.has("avx512f") else 1
    room = target.vector_registers - tb * nv - broadcast  # what the accumulators may take
    # (useful pixels, width, -rows): the most useful tile, the widest on a tie, then the shortest
    best = (0.0, 0, -1)
    for toh in (t for t in rows if t <= oh):
        for tow in _width_tiles(ow, 16):
            if toh * tow * tb * nv <= room:
                best = max(best, (toh * tow / (tile_waste(ow, tow) * tile_waste(oh, toh)), tow, -toh))
    _, tow, neg_rows = best
    toh = -neg_rows
    return tb, tow, toh


class Conv2dNCHWcTemplate(Template):
    """Direct NCHW[x]c convolution (see the module docstring). Knobs: the register tile, the
    reduction order, unrolling the kernel width, padding, and the rows a weight pass spans."""

    name = "conv2d_nchwc"
    tags = ("conv2d_nchwc",)
    batch_knobs = ("pass_rows",)

    def claims(self, cdef: ComputeDef) -> bool:
        """Not a kernel that also computes a depthwise band (`conv2d_nchwc_dwpw` schedules those)."""
        return depthwise_band(cdef) is None

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        red = pattern(cdef).reduce
        knobs = register_tile_knobs(cdef, red)  # type: ignore[arg-type]
        return Space(self.name, (*knobs, Knob("pass_rows", _pass_rows(red.shape[2]))))  # type: ignore[union-attr]

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """Two vectors of output channels per pixel and as many pixels as the registers hold
        (rows x width, the widest on a tie), less ragged waste. Measured on ResNet-18's 3x3 and
        1x1 layers (AVX-512, blocks of 16): this beats a tile chosen for the fewest loads per
        multiply-add (4 blocks x 4-6 pixels) by 1.1-1.5x on every layer, because the loads are
        not the bottleneck (two FMAs a cycle, two loads a cycle) while a taller pixel tile reuses
        each weight vector over more pixels.

        Where each weight serves few pixels (a 7x7 output: the layer streams its weights from
        memory) a quarter of the registers go to weight vectors instead, since more channel
        blocks read at once keep more of memory's bandwidth busy (timed with the weights evicted,
        as in a model: 1 row x 7 pixels x 4 blocks 726 us, 2 rows x 7 x 2 blocks 802 us), and
        one weight pass spans the whole output (where the channel-block tiles are enough to keep
        every thread busy). AVX-512 multiply-adds can take the broadcast
        input from memory, so there the accumulators may use every register the weights leave
        (LLVM then spills a value at most)."""
        red = pattern(cdef).reduce
        oh, ow = red.shape[2], red.shape[3]  # type: ignore[union-attr]
        tb, tow, toh = default_register_tile(red, target)  # type: ignore[arg-type]
        streaming = oh * ow <= STREAMING_PIXELS
        units = red.shape[0] * red.shape[1] // tb  # type: ignore[union-attr]  # one per channel-block tile
        one_pass = streaming and units >= target.threads  # else a thread would idle
        knobs = register_tile_defaults(cdef, tb, tow, toh)
        return Config(self.name, (*knobs, ("pass_rows", oh if one_pass else 0)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        steps, out, acc, red = _prologue(cdef, config["pad"], target.vector_lanes())
        lanes = min(target.vector_lanes(), red.op.attrs["oc_bn"])  # type: ignore[union-attr]
        _n, _oc, oh, ow, _oci = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        tb, tow, toh = config["tile_oc_blocks"], config["tile_ow"], config["tile_oh"]
        if config["pass_rows"]:  # the unit's pixel tiles inside the loop over input-channel blocks
            steps += weight_pass_tile(cdef, out, acc, tb, config["pass_rows"])
            steps += [S.Split(acc, oh, toh), S.Split(acc, ow, tow)]
            steps += register_tile(acc, red, config, lanes, (f"{oh}_i", f"{ow}_i"), (f"{oh}_o", f"{ow}_o"))
        else:
            steps += nchwc_output_tile(cdef, out, acc, tb, tow, toh)
            steps += register_tile(acc, red, config, lanes, (oh, ow))
        ooci = pattern(cdef).output.op.axes[-1].name  # type: ignore[union-attr]  # the output's lanes
        steps += [S.Split(out, ooci, lanes), S.Vectorize(out, f"{ooci}_i")]
        return tuple(steps)


def register_tile(acc: str, red: Tensor, config: Config, lanes: int, pixels: tuple[str, str],
                  pixel_tiles: tuple[str, ...] = (), outer: tuple[str, ...] = ()) -> list[S.Step]:
    """The accumulator's loops: `outer` loops, the input channels in blocks, the `reduce_order` of
    channel blocks and kernel taps, then (outside the taps, with a weight pass) the `pixel_tiles`
    loops, and innermost the register tile (`pixels` rows x width, channel blocks, vectors of
    `lanes`) unrolled and vectorized."""
    _n, oc, _oh, _ow, oci = (a.name for a in red.op.axes)  # type: ignore[union-attr]
    rc, rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
    by_channel = config["reduce_order"] == "c_hw_ci"
    channels = (f"{rc}_o",) if by_channel else (rh, rw, f"{rc}_o")
    inner = (rh, rw, f"{rc}_i") if by_channel else (f"{rc}_i",)
    tile = (*pixels, oc, f"{oci}_o", f"{oci}_i")
    steps: list[S.Step] = [S.Split(acc, rc, red.op.attrs["ic_bn"]), S.Split(acc, oci, lanes),  # type: ignore[union-attr]
                           S.Reorder(acc, (*outer, *channels, *pixel_tiles, *inner, *tile))]
    steps += [S.Unroll(acc, axis) for axis in tile[:4]]
    steps.append(S.Vectorize(acc, tile[4]))
    if config["unroll_kw"]:
        steps.append(S.Unroll(acc, rw))
    return steps


def weight_pass_tile(cdef: ComputeDef, out: str, acc: str, oc_blocks: int, rows: int) -> list[S.Step]:
    """The output loop nest of a weight pass: units of `oc_blocks` channel blocks x `rows` rows,
    (batch, block tile, row block) fused and parallel, the accumulator buffer computed per unit."""
    on, ooc, ooh, oow, ooci = (a.name for a in pattern(cdef).output.op.axes)  # type: ignore[union-attr]
    return [
        S.Split(out, ooc, oc_blocks),
        S.Split(out, ooh, rows),
        S.Reorder(out, (on, f"{ooc}_o", f"{ooh}_o", f"{ooh}_i", oow, f"{ooc}_i", ooci)),
        S.Fuse(out, on, f"{ooc}_o"),
        S.Fuse(out, f"{on}_{ooc}_o", f"{ooh}_o"),
        S.Parallel(out, f"{on}_{ooc}_o_{ooh}_o"),
        S.ComputeAt(acc, out, f"{on}_{ooc}_o_{ooh}_o"),
    ]


register(Conv2dNCHWcTemplate())
