"""Ops that only move data: DepthToSpace and SpaceToDepth, where blocks of channels become blocks
of pixels and back (a sub-pixel convolution's pixel shuffle, a space-to-depth stem),
ReverseSequence, CenterCropPad (a strided slice and a zero pad), and Col2Im (block columns gathered
back to their image positions and their overlaps summed).

DepthToSpace and SpaceToDepth are each a reshape to six axes, one transpose and a reshape back, so
the compiler fuses the move into the kernels around it like any other layout change instead of
running an op of its own. ReverseSequence is one `take` of rows.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _blocked(g: GraphBuilder, node: NodeView) -> tuple[Expr, tuple[int, int, int, int], int]:
    x = _x(node)
    shape = g.static_shape(x)
    if len(shape) != 4:
        raise node.fail(f"expects a 4-D (N, C, H, W) input, got shape {shape}")
    b = int(node.attr("blocksize", 0))
    if b < 1:
        raise node.fail(f"blocksize must be >= 1, got {b}")
    return x, shape, b  # type: ignore[return-value]


@_reg("DepthToSpace")
def _depth_to_space(g: GraphBuilder, node: NodeView) -> Expr:
    x, (n, c, h, w), b = _blocked(g, node)
    if c % (b * b):
        raise node.fail(f"{c} channels do not divide into blocks of {b}x{b}")
    mode = node.attr("mode", "DCR")
    if mode == "DCR":  # channel index = (row in block, column in block, output channel)
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":  # channel index = (output channel, row in block, column in block)
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise node.fail(f"mode must be DCR or CRD, got {mode!r}")
    y = g.call("transpose", g.call("reshape", x, newshape=split), axes=perm)
    return g.call("reshape", y, newshape=(n, c // (b * b), h * b, w * b))


@_reg("SpaceToDepth")
def _space_to_depth(g: GraphBuilder, node: NodeView) -> Expr:
    x, (n, c, h, w), b = _blocked(g, node)
    if h % b or w % b:
        raise node.fail(f"a {h}x{w} map does not divide into blocks of {b}x{b}")
    y = g.call("reshape", x, newshape=(n, c, h // b, b, w // b, b))
    y = g.call("transpose", y, axes=(0, 3, 5, 1, 2, 4))
    return g.call("reshape", y, newshape=(n, c * b * b, h // b, w // b))


@_reg("ReverseSequence")
def _reverse_sequence(g: GraphBuilder, node: NodeView) -> Expr:
    """Each batch entry's first `sequence_lens[b]` steps reversed, the rest kept (a bidirectional
    RNN's backward pass over padded batches). With the time and batch axes first (in either order)
    and the rest flattened, row (t, b) reads row (len[b] - 1 - t, b) where t < len[b]: one `take`
    of rows by a flat index computed from the lengths."""
    x, lens = _x(node, 0), _x(node, 1)
    shape = g.static_shape(x)
    time_axis, batch_axis = int(node.attr("time_axis", 0)), int(node.attr("batch_axis", 1))
    if len(shape) < 2 or {time_axis, batch_axis} != {0, 1}:
        raise node.fail(f"time_axis and batch_axis must be 0 and 1 (in either order) of a rank >= 2 input, "
                        f"got {time_axis}, {batch_axis} for shape {shape}")
    steps, batch = shape[time_axis], shape[batch_axis]
    if g.shape(lens) != (batch,):
        raise node.fail(f"sequence_lens must be ({batch},) for input shape {shape}, got {g.shape(lens)}")
    lens = g.call("cast", lens, dtype="int64")
    t = g.const(np.arange(steps, dtype="int64").reshape(steps, 1))
    b = g.const(np.arange(batch, dtype="int64").reshape(1, batch))
    lens = g.call("reshape", lens, newshape=(1, batch))
    src = g.call("where", g.call("less", t, lens),
                 g.call("subtract", g.call("subtract", lens, g.const(np.int64(1))), t), t)  # (steps, batch)
    rows = g.call("add", g.call("multiply", src, g.const(np.int64(batch))), b) if time_axis == 0 else \
        g.call("add", g.call("multiply", b, g.const(np.int64(steps))), src)  # row of (t, b) in x's order
    if time_axis == 1:
        rows = g.call("transpose", rows, axes=(1, 0))  # (batch, steps), as x lays them out
    flat = g.call("reshape", x, newshape=(steps * batch, -1))
    taken = g.call("take", flat, rows, axis=0, mode="clip")
    return g.call("reshape", taken, newshape=shape)


@_reg("CenterCropPad")
def _center_crop_pad(g: GraphBuilder, node: NodeView) -> Expr:
    """Each named axis cropped or zero-padded to its target size about the centre; of an odd
    difference, the extra element is cropped or padded at the end, as ONNX's reference does."""
    x = _x(node, 0)
    shape = g.static_shape(x)
    sizes = g.ints(_x(node, 1), "the target shape")
    axes = [a % len(shape) for a in node.attr("axes", range(len(shape)))]
    if len(sizes) != len(axes):
        raise node.fail(f"{len(sizes)} target sizes for {len(axes)} axes")
    begin, end, pad = [0] * len(shape), list(shape), [(0, 0)] * len(shape)
    for a, size in zip(axes, sizes):
        if size < shape[a]:
            begin[a] = (shape[a] - size) // 2
            end[a] = begin[a] + size
        elif size > shape[a]:
            before = (size - shape[a]) // 2
            pad[a] = (before, size - shape[a] - before)
    if begin != [0] * len(shape) or end != list(shape):
        x = g.call("strided_slice", x, begin=tuple(begin), end=tuple(end))
    if any(p != (0, 0) for p in pad):
        x = g.call("nn.pad", x, g.scalar(0, x), pad_width=tuple(pad))
    return x


def _col2im_gather(image: list[int], block: list[int], dil: list[int], pads: list[int],
                   strides: list[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """For each kernel offset and image position: the flat (offset, column) index of the block
    column that covers it there, and whether one does; plus the number of columns.

    A position q (after the leading pad) is covered at kernel offset k by the block starting at
    q - k * dilation, when that start is a multiple of the stride and a whole block fits."""
    nd = len(image)
    counts = [(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    offsets = np.stack(np.unravel_index(np.arange(int(np.prod(block))), block), axis=1)  # [K, nd]
    where = np.stack(np.unravel_index(np.arange(int(np.prod(image))), image), axis=1)  # [P, nd]
    start = where[None, :, :] + np.asarray(pads[:nd]) - offsets[:, None, :] * np.asarray(dil)  # [K, P, nd]
    index, rest = np.divmod(start, np.asarray(strides))
    covered = np.all((rest == 0) & (index >= 0) & (index < np.asarray(counts)), axis=-1)
    column = np.ravel_multi_index(tuple(np.clip(index, 0, np.asarray(counts) - 1).transpose(2, 0, 1)), counts)
    columns = int(np.prod(counts))
    flat = np.arange(len(offsets))[:, None] * columns + column
    return np.where(covered, flat, 0).astype("int64"), covered, columns


@_reg("Col2Im")
def _col2im(g: GraphBuilder, node: NodeView) -> Expr:
    """[N, C * prod(block), L] columns summed back into [N, C, *image]: PyTorch's `fold`, the inverse
    layout of im2col. One `take` gathers, for each kernel offset, the column covering each image
    position (a constant index), a mask zeroes the positions no block covers there, and a sum over
    the offsets adds the overlaps."""
    x = _x(node)
    image = g.ints(_x(node, 1), "image_shape")
    block = g.ints(_x(node, 2), "block_shape")
    nd = len(image)
    n, cols_c, length = g.static_shape(x)
    dil = list(node.attr("dilations", [1] * nd))
    pads = list(node.attr("pads", [0] * (2 * nd)))
    strides = list(node.attr("strides", [1] * nd))
    if len(block) != nd or len(dil) != nd or len(pads) != 2 * nd or len(strides) != nd:
        raise node.fail(f"image_shape {image}, block_shape {block}, dilations {dil}, pads {pads} and "
                        f"strides {strides} disagree on the number of spatial axes")
    kernel = int(np.prod(block))
    if cols_c % kernel:
        raise node.fail(f"{cols_c} rows do not divide into blocks of {kernel} ({block})")
    flat, covered, columns = _col2im_gather(image, block, dil, pads, strides)
    if columns != length:
        raise node.fail(f"the input holds {length} block columns; image {image} with these blocks, pads "
                        f"and strides has {columns}")
    c = cols_c // kernel
    rows = g.call("reshape", x, newshape=(n, c, kernel * length))
    gathered = g.call("take", rows, g.const(flat), axis=2)  # [N, C, K, P]
    kept = g.call("where", g.const(covered), gathered, g.scalar(0, x))
    return g.call("reshape", g.call("sum", kept, axis=(2,), keepdims=False), newshape=(n, c, *image))
