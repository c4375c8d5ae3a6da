"""GridSample: image (4-D) or volume (5-D) data read at the positions a grid names (a spatial
transformer, a flow warp, a deformable layer's sampling), (bi/tri)linear, nearest or, for images,
bicubic, with zeros, border or reflection padding;
AffineGrid, the 2-d or 3-d grid a spatial transformer samples at (a batched matrix product of its
affine matrices with the constant grid of output positions); and DeformConv, whose taps sample the
data at learned offsets the same way.

Written with IR ops the compiler already fuses, so no kernel of its own: the grid's coordinates are
unnormalised (and clamped or reflected, by the padding mode) elementwise, each of the 1, 2^d or 16 taps
becomes a flat index into the data (batch and channel offsets broadcast in) read by one `take`, and
the taps are weighted and summed. A tap outside the data reads 0 (the zeros mode, and the far
neighbour of a coordinate on the last row or column, whose weight is 0 anyway). The arithmetic is
PyTorch's `grid_sample`, which ONNX's definition follows; bicubic brings each of its 16 taps
inside by the padding mode separately, as PyTorch does, rather than the sampled position.
"""

from __future__ import annotations

import itertools

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.frontend.onnx.converters_nn import matmul
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)

# opset 20 renamed them
_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest", "bicubic": "bicubic",
          "cubic": "bicubic"}


def _unnormalize(g: GraphBuilder, v: Expr, size: int, align: bool) -> Expr:
    """Grid values in [-1, 1] along an axis of `size` elements, as positions in that axis."""
    one = g.scalar(1.0, v)
    if align:  # -1 and 1 are the centres of the first and last elements
        return g.call("multiply", g.call("add", v, one), g.scalar((size - 1) / 2, v))
    scaled = g.call("multiply", g.call("add", v, one), g.scalar(size, v))  # -1 and 1: the outer edges
    return g.call("divide", g.call("subtract", scaled, one), g.scalar(2.0, v))


def _bounded(g: GraphBuilder, pos: Expr, size: int, align: bool, padding: str) -> Expr:
    """A position brought inside the axis as the padding mode reads outside it (zeros: as it is)."""
    if padding == "reflection":
        pos = _reflect(g, pos, *((0.0, size - 1.0) if align else (-0.5, size - 0.5)))
    if padding in ("border", "reflection"):
        pos = g.call("clip", pos, a_min=0.0, a_max=float(size - 1))
    return pos


def _cubic_weights(g: GraphBuilder, t: Expr) -> list[Expr]:
    """The weights of the taps at -1, 0, 1, 2 around a position `t` past the second one: the cubic
    convolution kernel with A = -0.75, as PyTorch and ONNX define bicubic sampling."""
    a = -0.75

    def near(d: Expr) -> Expr:  # |d| <= 1: ((A + 2) d - (A + 3)) d^2 + 1
        inner = g.call("subtract", g.call("multiply", d, g.scalar(a + 2, d)), g.scalar(a + 3, d))
        return g.call("add", g.call("multiply", g.call("multiply", inner, d), d), g.scalar(1.0, d))

    def far(d: Expr) -> Expr:  # 1 < |d| < 2: ((A d - 5A) d + 8A) d - 4A
        inner = g.call("subtract", g.call("multiply", d, g.scalar(a, d)), g.scalar(5 * a, d))
        inner = g.call("add", g.call("multiply", inner, d), g.scalar(8 * a, d))
        return g.call("subtract", g.call("multiply", inner, d), g.scalar(4 * a, d))

    one, two = g.scalar(1.0, t), g.scalar(2.0, t)
    return [far(g.call("add", t, one)), near(t), near(g.call("subtract", one, t)),
            far(g.call("subtract", two, t))]


def _reflect(g: GraphBuilder, pos: Expr, low: float, high: float) -> Expr:
    """`pos` folded into [low, high] by reflecting at its ends as often as it takes."""
    span = high - low
    if span <= 0:
        return g.call("zeros_like", pos)
    dist = g.call("abs", g.call("subtract", pos, g.scalar(low, pos)))
    flips = g.call("floor", g.call("divide", dist, g.scalar(span, pos)))
    extra = g.call("subtract", dist, g.call("multiply", flips, g.scalar(span, pos)))
    even = g.call("equal", g.call("floor_mod", flips, g.scalar(2.0, pos)), g.scalar(0.0, pos))
    return g.call("where", even, g.call("add", extra, g.scalar(low, pos)),
                  g.call("subtract", g.scalar(high, pos), extra))


@_reg("GridSample")
def _grid_sample(g: GraphBuilder, node: NodeView) -> Expr:
    x, grid = _x(node, 0), _x(node, 1)
    shape, gshape = g.static_shape(x, "X"), g.static_shape(grid, "grid")
    if len(shape) not in (4, 5):
        raise node.fail(f"only 4-D (N, C, H, W) and 5-D (N, C, D, H, W) data are supported, got {shape}")
    n, spatial = shape[0], shape[2:]
    dims = len(spatial)
    if len(gshape) != dims + 2 or gshape[0] != n or gshape[-1] != dims:
        raise node.fail(f"grid must be (N, *output, {dims}) with N = {n} for data {shape}, got {gshape}")
    mode = node.attr("mode", "linear" if node.opset >= 20 else "bilinear")
    if mode not in _MODES:
        raise node.fail(f"mode {mode!r} is not supported (bilinear/linear, nearest and bicubic/cubic are)")
    if _MODES[mode] == "bicubic" and dims != 2:
        raise node.fail("cubic sampling is defined for 4-D data only")
    padding = node.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise node.fail(f"padding_mode must be zeros, border or reflection, got {padding!r}")
    align = bool(node.attr("align_corners", 0))
    out = gshape[1:-1]

    def axis(k: int) -> Expr:  # the grid's k-th coordinate (x, y, z) as (N, 1, *output), in elements
        v = g.call("strided_slice", grid, begin=(0,) * (dims + 1) + (k,), end=(n, *out, k + 1))
        return _unnormalize(g, g.call("reshape", v, newshape=(n, 1, *out)), spatial[dims - 1 - k], align)

    return sample_at(g, x, shape, [axis(dims - 1 - a) for a in range(dims)], _MODES[mode], padding, align)


def sample_at(g: GraphBuilder, x: Expr, shape: tuple[int, ...], positions: list[Expr], mode: str = "bilinear",
              padding: str = "zeros", align: bool = True) -> Expr:
    """`x` (N, C, *spatial, static `shape`) read at `positions`, one per spatial axis in order (H, W
    or D, H, W), in elements, shaped to broadcast as (N, 1, *output): (N, C, *output). `mode` is
    bilinear (linear along every axis), nearest or bicubic (2-d only); `padding` and `align` say
    how a position outside the data reads (see `_bounded`)."""
    n, c, *spatial = shape
    volume = int(np.prod(spatial))
    flat = g.call("reshape", x, newshape=(n * c * volume,))
    planes = np.arange(n).reshape(n, 1) * (c * volume) + np.arange(c).reshape(1, c) * volume
    base = g.const(planes.reshape(n, c, *([1] * len(spatial))).astype("int64"))

    def tap(coords: list[Expr]) -> Expr:
        """The data at integral positions (float), 0 where they fall outside it."""
        offset, inside = _clamped_offset(g, coords, spatial, "int64")
        value = g.call("take", flat, g.call("add", base, offset), mode="clip")
        return g.call("where", inside, value, g.call("zeros_like", value))

    if mode == "bicubic":  # 4 x 4 taps, each brought inside by the padding mode on its own
        (uy, ux), (h, w) = positions, spatial
        x0, y0 = g.call("floor", ux), g.call("floor", uy)
        wx, wy = _cubic_weights(g, g.call("subtract", ux, x0)), _cubic_weights(g, g.call("subtract", uy, y0))
        total = None
        for i in range(4):
            ys = _bounded(g, g.call("add", y0, g.scalar(i - 1.0, y0)), h, align, padding)
            for j in range(4):
                xs = _bounded(g, g.call("add", x0, g.scalar(j - 1.0, x0)), w, align, padding)
                term = g.call("multiply", tap([ys, xs]), g.call("multiply", wx[j], wy[i]))
                total = term if total is None else g.call("add", total, term)
        return total
    bounded = [_bounded(g, u, size, align, padding) for u, size in zip(positions, spatial)]
    if mode == "nearest":  # half to even, as ONNX Runtime's nearbyint
        return tap([g.call("round", p) for p in bounded])
    out = None
    for coords, weight in _linear_neighbours(g, bounded):
        term = g.call("multiply", tap(coords), weight)
        out = term if out is None else g.call("add", out, term)
    return out


def _linear_neighbours(g: GraphBuilder, positions: list[Expr]) -> list[tuple[list[Expr], Expr]]:
    """The 2^d integral neighbours of `positions` (one per axis) and their (bi/tri)linear weights:
    (coordinates, weight) per neighbour."""
    lows = [g.call("floor", p) for p in positions]
    one = g.scalar(1.0, positions[0])
    fracs = [g.call("subtract", p, lo) for p, lo in zip(positions, lows)]
    out = []
    for corner in itertools.product((0, 1), repeat=len(positions)):
        coords = [g.call("add", lo, one) if up else lo for lo, up in zip(lows, corner)]
        weight = None
        for f, up in zip(fracs, corner):
            w1 = f if up else g.call("subtract", one, f)
            weight = w1 if weight is None else g.call("multiply", weight, w1)
        out.append((coords, weight))
    return out


def _clamped_offset(g: GraphBuilder, coords: list[Expr], sizes: list[int], index: str) -> tuple[Expr, Expr]:
    """(the row-major offset, as `index` integers, of integral positions `coords` (floats, one per
    axis of `sizes`) each clipped into its axis; whether every one lies inside its axis)."""
    inside = offset = None
    for a, (v, size) in enumerate(zip(coords, sizes)):
        within = g.call("logical_and", g.call("greater_equal", v, g.scalar(0.0, v)),
                        g.call("less_equal", v, g.scalar(size - 1.0, v)))
        inside = within if inside is None else g.call("logical_and", inside, within)
        i = g.call("cast", g.call("clip", v, a_min=0.0, a_max=float(size - 1)), dtype=index)
        stride = int(np.prod(sizes[a + 1:]))
        term = g.call("multiply", i, g.const(np.array(stride, index))) if stride != 1 else i
        offset = term if offset is None else g.call("add", offset, term)
    return offset, inside


@_reg("AffineGrid")
def _affine_grid(g: GraphBuilder, node: NodeView) -> Expr:
    """theta (N, 2, 3) and size (N, C, H, W) -> (N, H, W, 2), or theta (N, 3, 4) and size
    (N, C, D, H, W) -> (N, D, H, W, 3): each output position's normalised (x, y[, z], 1) times theta
    transposed. Positions are the element centres, -1 and 1 being the first and last centres with
    align_corners, else the outer edges."""
    theta = _x(node, 0)
    size = g.ints(_x(node, 1), "the output size")
    if len(size) not in (4, 5):
        raise node.fail(f"size must be (N, C, H, W) or (N, C, D, H, W), got {size}")
    n, spatial = size[0], size[2:]
    dims = len(spatial)
    if g.static_shape(theta, "theta") != (n, dims, dims + 1):
        raise node.fail(f"theta must be ({n}, {dims}, {dims + 1}) for size {size}, got {g.shape(theta)}")
    align = bool(node.attr("align_corners", 0))

    def centres(m: int) -> np.ndarray:
        if align:
            return np.linspace(-1.0, 1.0, m) if m > 1 else np.zeros(1)
        return (2.0 * np.arange(m) + 1.0) / m - 1.0

    axes = np.meshgrid(*(centres(m) for m in spatial), indexing="ij")  # spatial order: (D,) H, W
    points = int(np.prod(spatial))
    base = np.stack([a.reshape(-1) for a in reversed(axes)] + [np.ones(points)], axis=1)  # x, y[, z], 1
    base = g.const(np.ascontiguousarray(np.broadcast_to(base, (n, points, dims + 1))).astype(g.dtype(theta)))
    grid = g.call("nn.batch_matmul", base, theta, transpose_a=False, transpose_b=True)  # (N, points, dims)
    return g.call("reshape", grid, newshape=(n, *spatial, dims))


@_reg("DeformConv")
def _deform_conv(g: GraphBuilder, node: NodeView) -> Expr:
    """A 2-d convolution whose every tap reads the data at its own learned offset (and, with a
    mask, scaled): per offset group, the taps' positions (the regular grid plus the offsets) are
    sampled bilinearly, zero outside the data (`sample_at`, as GridSample with align_corners), into
    the columns (one row per output pixel: taps x channels, channels last so that a tap reads
    vectors of channels, `_sample_rows`), and each group's columns multiply its weights
    (`matmul`): im2col with sampled columns, as torchvision computes it."""
    x, w, offset, bias, mask = _x(node, 0), _x(node, 1), _x(node, 2), node.input(3), node.input(4)
    shape, (oc, cg, kh, kw) = g.static_shape(x, "X"), g.static_shape(w, "W")
    if len(shape) != 4:
        raise node.fail(f"only 2-d deformable convolution is supported (X (N, C, H, W)), got X {shape}")
    n, c, h, wd = shape
    group, og = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    if list(node.attr("kernel_shape", [kh, kw])) != [kh, kw]:
        raise node.fail(f"kernel_shape={node.attr('kernel_shape')} does not match W's {(kh, kw)}")
    if c != cg * group or oc % group or c % og:
        raise node.fail(f"X has {c} channels and W {(oc, cg, kh, kw)}: with group={group} and "
                        f"offset_group={og}, X needs group x {cg} channels, divisible by offset_group, and "
                        "W's first axis must divide by group")
    sh, sw = node.attr("strides", [1, 1])
    dh, dw = node.attr("dilations", [1, 1])
    pt, pl, pb, pr = node.attr("pads", [0, 0, 0, 0])
    oh, ow = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    taps = kh * kw
    if g.static_shape(offset, "offset") != (n, og * taps * 2, oh, ow):
        raise node.fail(f"offset must be {(n, og * taps * 2, oh, ow)} for X {shape} and W "
                        f"{(oc, cg, kh, kw)}, got {g.shape(offset)}")
    if mask is not None and g.static_shape(mask, "mask") != (n, og * taps, oh, ow):
        raise node.fail(f"mask must be {(n, og * taps, oh, ow)}, got {g.shape(mask)}")
    ky, kx, oy, ox = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(oh), np.arange(ow), indexing="ij")
    dtype = g.dtype(x)
    grid_y = g.const((oy * sh - pt + ky * dh).reshape(1, 1, taps, 1, oh, ow).astype(dtype))
    grid_x = g.const((ox * sw - pl + kx * dw).reshape(1, 1, taps, 1, oh, ow).astype(dtype))
    moved = g.call("reshape", offset, newshape=(n, og, taps, 2, oh, ow))  # (dy, dx) per tap

    def component(k: int) -> Expr:
        return g.call("strided_slice", moved, begin=(0, 0, 0, k, 0, 0), end=(n, og, taps, k + 1, oh, ow))

    pixels = oh * ow

    def tap_major(v: Expr) -> Expr:  # (N, og, taps, ...) -> (N, og, oH x oW, taps)
        return g.call("transpose", g.call("reshape", v, newshape=(n, og, taps, pixels)), axes=(0, 1, 3, 2))

    ys = tap_major(g.call("add", grid_y, component(0)))
    xs = tap_major(g.call("add", grid_x, component(1)))
    scales = tap_major(mask) if mask is not None else None
    # the pixels' channels, one row per pixel
    rows = g.call("reshape", g.call("transpose", x, axes=(0, 2, 3, 1)), newshape=(n * h * wd, c))
    per = c // og
    columns = []
    for o in range(og):
        def pick(v: Expr, o: int = o) -> Expr:  # offset group o's (N, oH x oW, taps)
            part = g.call("strided_slice", v, begin=(0, o, 0, 0), end=(n, o + 1, pixels, taps))
            return g.call("reshape", part, newshape=(n, pixels, taps))

        data = g.call("strided_slice", rows, begin=(0, o * per), end=(n * h * wd, (o + 1) * per))
        scale = pick(scales) if scales is not None else None
        columns.append(_sample_rows(g, data, (n, h, wd), pick(ys), pick(xs), scale))  # (N, pixels, taps, per)
    cols = columns[0] if og == 1 else g.call("concatenate", g.tuple(columns), axis=3)
    # each group's columns, (pixels, taps x its channels), times its weights, (taps x channels, outputs)
    cols = g.call("reshape", cols, newshape=(n, pixels, taps, group, cg))
    cols = g.call("transpose", cols, axes=(0, 3, 1, 2, 4))
    cols = g.call("reshape", cols, newshape=(n, group, pixels, taps * cg))
    weights = g.call("reshape", w, newshape=(group, oc // group, cg, taps))
    weights = g.call("transpose", weights, axes=(0, 3, 2, 1))
    weights = g.call("reshape", weights, newshape=(1, group, taps * cg, oc // group))
    out = g.call("transpose", matmul(g, cols, weights), axes=(0, 1, 3, 2))  # (N, group, outputs, pixels)
    out = g.call("reshape", out, newshape=(n, oc, oh, ow))
    return out if bias is None else g.call("nn.bias_add", out, bias, axis=1)


def _sample_rows(g: GraphBuilder, rows: Expr, size: tuple[int, int, int], ys: Expr, xs: Expr,
                 scale: Expr | None) -> Expr:
    """Bilinear samples of the pixels `rows` ((N x H x W, channels), each pixel's channels
    contiguous) at positions `ys`, `xs` ((N, P, taps), in pixels), zero outside the image, times
    `scale` where given: (N, P, taps, channels). Channels last, so each tap reads whole vectors of
    channels, and its position arithmetic serves all of them."""
    n, h, w = size
    index = "int32" if n * h * w < 2**31 else "int64"
    image = g.const((np.arange(n) * (h * w)).reshape(n, 1, 1).astype(index))
    total = None
    for coords, weight in _linear_neighbours(g, [ys, xs]):
        offset, inside = _clamped_offset(g, coords, [h, w], index)
        weight = g.call("where", inside, weight, g.call("zeros_like", weight))
        if scale is not None:
            weight = g.call("multiply", weight, scale)
        tap = g.call("take", rows, g.call("add", image, offset), axis=0, mode="clip")
        term = g.call("multiply", tap, g.call("expand_dims", weight, axis=3))
        total = term if total is None else g.call("add", total, term)
    return total
