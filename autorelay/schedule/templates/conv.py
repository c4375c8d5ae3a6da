"""Direct (im2col-free) convolution templates: NCHW here, NCHW[x]c in `conv_nchwc` (depthwise ones:
`depthwise`), and the tilings they share with their bf16 and int8 variants.

Both keep a register tile of output accumulators in a local buffer computed at the output's
tile loop: NCHWc tiles output width x one or more channel blocks (a channel block is the vector,
the input pixel is broadcast, the weight block is a contiguous vector load); NCHW tiles output
channels x output width (width is the vector, weights are broadcast). Padding is either a
separate parallel pass into a workspace ("root") or inlined into the inner loop as a select.
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.generic import _outer_fuse, vector_axis
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor


def _prologue(cdef: ComputeDef, pad_mode: str, lanes: int = 8) -> tuple[list[S.Step], str, str, Tensor]:
    """Inline/root the non-reduction stages; return steps, output name, accumulator name, reduce."""
    pat = pattern(cdef)
    steps: list[S.Step] = []
    for t in pat.others:
        if t.op is not None and t.op.tag == "pad" and pad_mode == "root":
            steps += root_pad_copy(t, lanes)
        else:
            steps.append(S.ComputeInline(t.name))
    red = pat.reduce
    assert red is not None
    out = pat.output.name
    if red is pat.output:
        steps.append(S.CacheWrite(out))
        return steps, out, f"{out}_local", red
    return steps, out, red.name, red


def root_pad_copy(pad: Tensor, lanes: int) -> list[S.Step]:
    """A padding stage as its own pass into a workspace: batch, channels (or channel blocks) and
    rows fused into the parallel loop (a 3-channel stem has one (batch, block) pair, which alone
    would copy its padded image on one thread), the innermost axis as vectors: a channel block
    whole (`vector_axis`), an NCHW row in vectors of `lanes` when it is that wide (border lanes
    are clamped loads)."""
    axes = [a.name for a in pad.op.axes]  # type: ignore[union-attr]
    steps, fused = _outer_fuse(pad.name, axes[:3])
    if fused is not None:
        steps.append(S.Parallel(pad.name, fused))
    if pad.ndim == 5:  # NCHW[x]c
        return steps + vector_axis(pad.name, axes[-1], pad.shape[-1], lanes)
    if pad.shape[-1] >= lanes:
        steps += [S.Split(pad.name, axes[-1], lanes), S.Vectorize(pad.name, f"{axes[-1]}_i")]
    return steps


def _padded(cdef: ComputeDef) -> bool:
    """Whether the convolution has a padding stage (the `pad` knob then chooses root or inline)."""
    return any(t.op is not None and t.op.tag == "pad" for t in pattern(cdef).others)


def _width_tiles(ow: int, limit: int) -> list[int]:
    return sorted(
        {t for t in (1, 2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 28) if t <= limit and t <= ow} | {min(ow, limit)}
    )


def nchw_output_tile(cdef: ComputeDef, out: str, outer: str, oc_tile: int, tile_oh: int, tile_ow: int,
                     lanes: int) -> tuple[list[S.Step], str, str]:
    """The output loop nest of an NCHW convolution: tiles of `oc_tile` channels x `tile_oh` rows x
    `tile_ow` pixels, (batch, the two outer block loops in the `outer` order) fused and parallel,
    the channels vectorized (the float and the bf16 templates share it). Returns the steps, the
    parallel loop and the pixel-tile loop (where a per-tile accumulator is computed)."""
    on, ooc, ooh, oow = (a.name for a in pattern(cdef).output.op.axes)  # type: ignore[union-attr]
    blocks = (f"{ooc}_o", f"{ooh}_o") if outer == "oc" else (f"{ooh}_o", f"{ooc}_o")
    return [
        S.Split(out, ooc, oc_tile),
        S.Split(out, ooh, tile_oh),
        S.Split(out, oow, tile_ow),
        S.Reorder(out, (on, *blocks, f"{oow}_o", f"{ooh}_i", f"{oow}_i", f"{ooc}_i")),
        S.Fuse(out, on, blocks[0]),
        S.Fuse(out, f"{on}_{blocks[0]}", blocks[1]),
        S.Parallel(out, f"{on}_{blocks[0]}_{blocks[1]}"),
        S.Split(out, f"{ooc}_i", lanes, f"{ooc}_v", f"{ooc}_w"),
        S.Vectorize(out, f"{ooc}_w"),
    ], f"{on}_{blocks[0]}_{blocks[1]}", f"{oow}_o"


def nchwc_output_tile(cdef: ComputeDef, out: str, acc: str, oc_blocks: int, tile_ow: int,
                      tile_oh: int = 1) -> list[S.Step]:
    """The output loop nest of an NCHW[x]c convolution: tiles of `oc_blocks` channel blocks x
    `tile_oh` rows x `tile_ow` pixels, (batch, block tile, row tile) fused and parallel, the
    accumulator computed per tile (the float and the int8 templates share it)."""
    on, ooc, ooh, oow, ooci = (a.name for a in pattern(cdef).output.op.axes)  # type: ignore[union-attr]
    rows = (f"{ooh}_o", f"{ooh}_i") if tile_oh > 1 else (ooh,)
    return [
        S.Split(out, ooc, oc_blocks),
        *([S.Split(out, ooh, tile_oh)] if tile_oh > 1 else []),
        S.Split(out, oow, tile_ow),
        S.Reorder(out, (on, f"{ooc}_o", rows[0], f"{oow}_o", f"{ooc}_i", *rows[1:], f"{oow}_i", ooci)),
        S.Fuse(out, on, f"{ooc}_o"),
        S.Fuse(out, f"{on}_{ooc}_o", rows[0]),
        S.Parallel(out, f"{on}_{ooc}_o_{rows[0]}"),
        S.ComputeAt(acc, out, f"{oow}_o"),
    ]


class Conv2dNCHWTemplate(Template):
    """Direct NCHW convolution on NCHW data: the register tile is `tile_oc_vectors` vectors of
    output channels x `tile_oh` rows x `tile_ow` output pixels. The weight is packed so a vector
    of output channels is contiguous; each input pixel is broadcast; the tile is scattered to NCHW
    once per tile.

    `tile_ic` blocks the input channels for the cache: the accumulators then live in a buffer for
    the whole output row block and the block of channels loops outside the width tiles, so the
    block's weights stay in L1 while every tile of the row reuses them (a ragged width tile then
    costs a guard in the inner loop, which the search learns to avoid). `tile_ic` 0 means all
    channels, no blocking: a value that means the same for every workload, so a config
    transferred to a conv with other channel counts keeps its meaning.

    The space is the product of the register tile's three extents, the channel block, the order
    of the reduction loops (and an unrolled inner block of input channels), unrolling the kernel
    width, which block loop is outer in the parallel loop (weight reuse vs input reuse) and the
    padding mode: 10^4-10^5 points per ResNet layer, most of them poor (tiles that spill, orders
    that thrash), which is the kind of space where a learned cost model pays for itself."""

    name = "conv2d_nchw"
    tags = ("conv2d_nchw",)
    REDUCE_ORDERS = ("c_h_w", "h_w_c", "co_h_w_ci")

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        red = pattern(cdef).reduce
        oc, oh, ow = red.shape[1], red.shape[2], red.shape[3]  # type: ignore[union-attr]
        channels = red.op.reduce_axes[0].extent  # type: ignore[union-attr]
        lanes = target.vector_lanes()
        return Space(
            self.name,
            (
                Knob("tile_oc_vectors", [t for t in (1, 2, 3, 4) if (t - 1) * lanes < oc] or [1]),
                Knob("tile_ow", _width_tiles(ow, 16)),
                Knob("tile_oh", [t for t in (1, 2, 3, 4) if t <= oh]),
                Knob("tile_ic", [b for b in (8, 16, 32, 64) if b < channels and channels % b == 0] + [0]),
                Knob("reduce_order", self.REDUCE_ORDERS),
                Knob("unroll_c", [u for u in (1, 2, 3, 4) if channels % u == 0]),
                Knob("unroll_kw", (0, 1)),
                Knob("outer", ("oc", "oh")),
                Knob("pad", ("root", "inline")),
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        red = pattern(cdef).reduce
        oc, ow = red.shape[1], red.shape[3]  # type: ignore[union-attr]
        lanes, regs = target.vector_lanes(), target.vector_registers
        best = (0.0, 1, 1)
        for tv in (1, 2, 3, 4):
            for tow in _width_tiles(ow, 14):
                if tow * tv + tv + 1 > regs - 1 or (tv - 1) * lanes >= oc:
                    continue
                score = tow * tv / (tow + tv) / (tile_waste(ow, tow) * tile_waste(oc, tv * lanes))
                if score > best[0]:
                    best = (score, tv, tow)
        return Config(
            self.name,
            (
                ("tile_oc_vectors", best[1]),
                ("tile_ow", best[2]),
                ("tile_oh", 1),
                ("tile_ic", 0),
                ("reduce_order", "c_h_w"),
                ("unroll_c", 1),
                ("unroll_kw", 0),
                ("outer", "oc"),
                ("pad", "root"),
            ),
        )

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        steps, out, acc, red = _prologue(cdef, config["pad"], target.vector_lanes())
        lanes = target.vector_lanes()
        tv, tow, toh, uc = config["tile_oc_vectors"], config["tile_ow"], config["tile_oh"], config["unroll_c"]
        weight = red.op.attrs["weight"]  # type: ignore[union-attr]
        _n, oc, oh, ow = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        rc, rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
        oc_axis = red.op.attrs.get("weight_oc_axis", 0)  # type: ignore[union-attr]  # IOHW weights: 1
        if weight in {t.name for t in cdef.inputs}:  # a 1-element constant weight is an inline scalar
            steps.insert(0, S.Pack(weight, oc_axis, tv * lanes))
        tiles, parallel, pixel_tile = nchw_output_tile(cdef, out, config["outer"], tv * lanes, toh, tow,
                                                       lanes)
        steps += tiles
        channels = red.op.reduce_axes[0].extent  # type: ignore[union-attr]
        block = config["tile_ic"] or channels
        blocked = block < channels
        # the channels the register tile reduces over without leaving it: all, or one cache block
        c_all = rc
        if blocked:
            steps += [
                S.ComputeAt(acc, out, parallel),
                S.Split(acc, rc, block),
                S.Split(acc, ow, tow),
            ]
            c_all = f"{rc}_i"
        else:
            steps.append(S.ComputeAt(acc, out, pixel_tile))
        c_outer, c_inner = (f"{c_all}_o", f"{c_all}_i") if uc > 1 else (c_all, None)
        cs = (c_outer, c_inner) if c_inner else (c_outer,)
        red_order = {
            "c_h_w": (*cs, rh, rw),
            "h_w_c": (rh, rw, *cs),
            "co_h_w_ci": (c_outer, rh, rw, *cs[1:]),
        }[config["reduce_order"]]
        if uc > 1:
            steps.append(S.Split(acc, c_all, uc))
        ow_tile = f"{ow}_i" if blocked else ow
        block_loops = (f"{rc}_o", f"{ow}_o") if blocked else ()
        steps += [
            S.Split(acc, oc, lanes),
            S.Reorder(acc, (*block_loops, *red_order, oh, ow_tile, f"{oc}_o", f"{oc}_i")),
            S.Unroll(acc, oh),
            S.Unroll(acc, ow_tile),
            S.Unroll(acc, f"{oc}_o"),
            S.Vectorize(acc, f"{oc}_i"),
        ]
        if c_inner:
            steps.append(S.Unroll(acc, c_inner))
        if config["unroll_kw"]:
            steps.append(S.Unroll(acc, rw))
        return tuple(steps)


register(Conv2dNCHWTemplate())
