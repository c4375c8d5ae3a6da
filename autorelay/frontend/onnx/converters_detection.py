"""Detection ops: region-of-interest pooling, the heads of two-stage detectors (RoiAlign, Mask
R-CNN's, what torchvision's `roi_align` exports to; MaxRoiPool, Fast R-CNN's), and
NonMaxSuppression, the last stage of most detectors.

The two poolings are written with IR ops the compiler fuses, so no kernel of their own, and the number of
regions may be dynamic (it usually comes from a box-selection stage).

RoiAlign averages (or takes the largest of) `grid x grid` bilinear samples in each output bin. The
samples of a region lie on a grid of rows times a grid of columns, so bilinear interpolation is
separable: for every sampled row, its two neighbouring rows and their weights; for every column,
likewise; each of the four (row, column) neighbour pairs is one `take` from the flattened data,
weighted by the product of the row and column weights. A sample farther than one pixel outside the
map has weight 0, as in ONNX's definition (which follows Caffe2's). In max mode ONNX takes, per
sample, the largest of the four weighted taps, then the largest over the bin's samples.

The sample grid is `sampling_ratio` per bin. A ratio of 0 asks for an adaptive grid,
`ceil(region extent / bins)`, which depends on the region's size: with constant regions it is
computed at import (each region's own grid, a masked maximal one), with run-time ones the grid's
size would be data, so that form is refused.

MaxRoiPool takes the largest element of each bin, the bins' bounds rounded outward to whole
pixels; it is a masked maximum over the columns, then over the rows.

NonMaxSuppression's greedy selection is sequential, so it is one op without a tensor compute
(`vision.non_max_suppression`, run on its NumPy reference and reported as a fallback). Its result
has a static capacity and a count of rows selected, cut by one dynamic slice (`keep_first`), so the
model runs on the VM.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.frontend.onnx.converters_select import keep_first
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _column(g: GraphBuilder, rois: Expr, i: int, scale: float, shift: float) -> Expr:
    """Column i of the (R, k) regions as an (R, 1) tensor, times `scale`, minus `shift`."""
    c = g.call("strided_slice", rois, begin=(i,), end=(i + 1,), axes=(1,))
    c = g.call("multiply", c, g.scalar(scale, c))
    return g.call("subtract", c, g.scalar(shift, c)) if shift else c


def _sample_axis(g: GraphBuilder, start: Expr, extent: Expr, bins: int, grid: np.ndarray,
                 size: int) -> tuple[list[tuple[Expr, Expr]], np.ndarray]:
    """Along one axis (of `size` pixels) of every region, whose samples start at `start` and span
    `extent` ((R, 1) tensors) in `bins` bins of `grid` samples each ((R,) or (1,) ints): the two
    neighbour pixels of each sample and their weights, [(pixel, weight), (pixel, weight)], each
    (R, bins * max(grid)); and a mask of the samples that exist (a region's grid may be smaller
    than the largest)."""
    most = int(max(grid.max(), 1))
    bin_of = np.repeat(np.arange(bins), most)[None, :].astype("float64")
    step = np.tile(np.arange(most), bins)[None, :]
    per_region = np.maximum(grid, 1).astype("float64")[:, None]
    offset = bin_of + (step + 0.5) / per_region  # in bins: bin + (i + 0.5) / grid
    exists = step < grid[:, None]
    pos = g.call("add", start, g.call("multiply", g.call("divide", extent, g.scalar(bins, extent)),
                                      g.const(offset.astype(g.dtype(start)))))
    inside = g.call("logical_and", g.call("greater_equal", pos, g.scalar(-1.0, pos)),
                    g.call("less_equal", pos, g.scalar(float(size), pos)))
    # as ONNX's max(y, 0), and its y = low past the last pixel
    pos = g.call("clip", pos, a_min=0.0, a_max=float(size - 1))
    low = g.call("floor", pos)
    frac = g.call("subtract", pos, low)
    zero = g.call("zeros_like", pos)
    w_high = g.call("where", inside, frac, zero)
    w_low = g.call("where", inside, g.call("subtract", g.scalar(1.0, frac), frac), zero)
    low = g.call("cast", low, dtype="int64")
    high = g.call("minimum", g.call("add", low, g.const(np.array(1, "int64"))),
                  g.const(np.array(size - 1, "int64")))
    return [(low, w_low), (high, w_high)], exists


@_reg("RoiAlign")
def _roi_align(g: GraphBuilder, node: NodeView) -> Expr:
    x, rois, batch = _x(node, 0), _x(node, 1), _x(node, 2)
    shape = g.static_shape(x, "X")
    if len(shape) != 4:
        raise node.fail(f"expects X of shape (N, C, H, W), got {shape}")
    if g.ndim(rois) != 2 or g.shape(rois)[1] != 4:
        raise node.fail(f"expects rois of shape (num_rois, 4), got {g.shape(rois)}")
    n, c, h, w = shape
    mode = node.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise node.fail(f"mode must be 'avg' or 'max', got {mode!r}")
    default_ctm = "half_pixel" if node.opset >= 16 else "output_half_pixel"
    ctm = node.attr("coordinate_transformation_mode", default_ctm)
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise node.fail(f"coordinate_transformation_mode must be half_pixel or output_half_pixel, "
                        f"got {ctm!r}")
    half_pixel = ctm == "half_pixel"
    oh, ow = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio, scale = int(node.attr("sampling_ratio", 0)), float(node.attr("spatial_scale", 1.0))
    shift = 0.5 if half_pixel else 0.0
    x0, y0, x1, y1 = (_column(g, rois, i, scale, shift) for i in range(4))
    extents = []
    for lo, hi in ((y0, y1), (x0, x1)):
        e = g.call("subtract", hi, lo)
        extents.append(e if half_pixel else g.call("maximum", e, g.scalar(1.0, e)))
    grids = _grids(g, node, ratio, rois, scale, shift, half_pixel, (oh, ow))
    rows, row_exists = _sample_axis(g, y0, extents[0], oh, grids[0], h)
    cols, col_exists = _sample_axis(g, x0, extents[1], ow, grids[1], w)

    def as_rows(e: Expr) -> Expr:  # (R, S) -> (R, 1, S, 1)
        return g.call("expand_dims", g.call("expand_dims", e, axis=1), axis=3)

    def as_cols(e: Expr) -> Expr:  # (R, S) -> (R, 1, 1, S)
        return g.call("expand_dims", e, axis=1, num_newaxis=2)

    image = g.call("cast", g.call("reshape", batch, newshape=(-1, 1, 1, 1)), dtype="int64")
    base = g.call("add", g.call("multiply", image, g.const(np.array(c * h * w, "int64"))),
                  g.const(np.arange(c, dtype="int64").reshape(1, c, 1, 1) * (h * w)))
    flat = g.call("reshape", x, newshape=(n * c * h * w,))
    taps = []
    for r, wr in rows:
        for q, wq in cols:
            row_start = as_rows(g.call("multiply", r, g.const(np.array(w, "int64"))))
            index = g.call("add", g.call("add", base, row_start), as_cols(q))
            weight = g.call("multiply", as_rows(wr), as_cols(wq))
            taps.append(g.call("multiply", g.call("take", flat, index, axis=0), weight))
    exists = row_exists[:, None, :, None] & col_exists[:, None, None, :]
    gh, gw = (max(int(gr.max()), 1) for gr in grids)
    if mode == "avg":
        total = g.call("add", g.call("add", taps[0], taps[1]), g.call("add", taps[2], taps[3]))
        if not exists.all():  # regions whose adaptive grid is smaller than the largest
            total = g.call("where", g.const(exists), total, g.scalar(0.0, total))
        summed = g.call("sum", g.call("reshape", total, newshape=(-1, c, oh, gh, ow, gw)), axis=[3, 5])
        count = np.maximum(grids[0] * grids[1], 1).astype(g.dtype(x)).reshape(-1, 1, 1, 1)
        return g.call("divide", summed, g.const(count))
    best = g.call("maximum", g.call("maximum", taps[0], taps[1]), g.call("maximum", taps[2], taps[3]))
    if not exists.all():
        best = g.call("where", g.const(exists), best, g.scalar(-np.inf, best))
    best = g.call("max", g.call("reshape", best, newshape=(-1, c, oh, gh, ow, gw)), axis=[3, 5])
    sampled = (grids[0] * grids[1] > 0).reshape(-1, 1, 1, 1)
    if not sampled.all():  # a region whose adaptive grid is empty: its bins are 0, as ONNX defines
        best = g.call("where", g.const(sampled), best, g.scalar(0.0, best))
    return best


def _grids(g: GraphBuilder, node: NodeView, ratio: int, rois: Expr, scale: float, shift: float,
           half_pixel: bool, bins: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The samples per bin along rows and columns: (1,) arrays for a fixed ratio, else each
    region's adaptive grid, (R,) arrays, from constant regions."""
    if ratio > 0:
        return np.array([ratio]), np.array([ratio])
    known = g.value_or_none(rois)
    if known is None:
        raise node.fail("sampling_ratio 0 (an adaptive grid, ceil(region size / bins)) needs constant "
                        "rois: with run-time rois the number of samples is data; export with a "
                        "sampling_ratio > 0")
    box = np.asarray(known, "float64") * scale - shift
    out = []
    for lo, hi, n in ((1, 3, bins[0]), (0, 2, bins[1])):
        extent = box[:, hi] - box[:, lo]
        if not half_pixel:
            extent = np.maximum(extent, 1.0)
        out.append(np.maximum(np.ceil(extent / n), 0).astype("int64"))  # a reversed region: none
    return out[0], out[1]


__all__ = ["TABLE"]


def _round_half_away(g: GraphBuilder, v: Expr) -> Expr:
    """C's `round`: halves away from zero (the IR's `round` takes them to even, as ONNX's Round)."""
    up = g.call("floor", g.call("add", g.call("abs", v), g.scalar(0.5, v)))
    return g.call("multiply", g.call("sign", v), up)


def _bin_bounds(g: GraphBuilder, start: Expr, end: Expr, bins: int, size: int) -> tuple[Expr, Expr]:
    """MaxRoiPool's [first, past-the-last) pixel of each of the `bins` bins of the regions that span
    the whole pixels `start`..`end` ((R, 1) tensors): each (R, bins), int64, inside [0, size]."""
    extent = g.call("maximum", g.call("add", g.call("subtract", end, start), g.scalar(1.0, end)),
                    g.scalar(1.0, end))
    width = g.call("divide", extent, g.scalar(float(bins), extent))
    index = np.arange(bins, dtype=g.dtype(start))[None, :]
    first = g.call("floor", g.call("multiply", width, g.const(index)))
    last = g.call("ceil", g.call("multiply", width, g.const(index + 1)))

    def placed(v: Expr) -> Expr:
        inside = g.call("clip", g.call("add", v, start), a_min=0.0, a_max=float(size))
        return g.call("cast", inside, dtype="int64")

    return placed(first), placed(last)


def _masked_max(g: GraphBuilder, x: Expr, first: Expr, last: Expr, axis: int, size: int) -> Expr:
    """The largest of `x` along `axis` (of `size` pixels) within each bin [first, last) (shapes
    broadcast so that the bins' axis sits right before `axis`), at least the dtype's lowest finite
    value, as ONNX Runtime starts its maximum there."""
    pixel = np.arange(size, dtype="int64").reshape((size,) + (1,) * (g.ndim(x) - axis - 1))
    inside = g.call("logical_and", g.call("greater_equal", g.const(pixel), first),
                    g.call("less", g.const(pixel), last))
    lowest = g.scalar(float(np.finfo(g.dtype(x)).min), x)
    return g.call("max", g.call("where", inside, x, lowest), axis=[axis])


@_reg("MaxRoiPool")
def _max_roi_pool(g: GraphBuilder, node: NodeView) -> Expr:
    """Separable: the largest of each row within each column bin, then of those within each row
    bin (a (R, C, H, bins, W) masked maximum, then a (R, C, bins, H, bins) one)."""
    x, rois = _x(node, 0), _x(node, 1)
    shape = g.static_shape(x, "X")
    if len(shape) != 4:
        raise node.fail(f"expects X of shape (N, C, H, W), got {shape}")
    if g.ndim(rois) != 2 or g.shape(rois)[1] != 5:
        raise node.fail(f"expects rois of shape (num_rois, 5), got {g.shape(rois)}")
    pooled = node.attr("pooled_shape")
    if pooled is None or len(pooled) != 2 or min(pooled) < 1:
        raise node.fail(f"pooled_shape must be two positive extents, got {pooled}")
    (oh, ow), (_, _, h, w) = pooled, shape
    scale = float(node.attr("spatial_scale", 1.0))
    image, x0, y0, x1, y1 = (_column(g, rois, i, 1.0 if i == 0 else scale, 0.0) for i in range(5))
    x0, y0, x1, y1 = (_round_half_away(g, v) for v in (x0, y0, x1, y1))
    image = g.call("cast", g.call("reshape", image, newshape=(-1,)), dtype="int64")
    regions = g.call("take", x, image, axis=0)  # (R, C, H, W)
    col_first, col_last = _bin_bounds(g, x0, x1, ow, w)
    row_first, row_last = _bin_bounds(g, y0, y1, oh, h)
    col_bins = (g.call("reshape", v, newshape=(-1, 1, 1, ow, 1)) for v in (col_first, col_last))
    by_cols = _masked_max(g, g.call("expand_dims", regions, axis=3), *col_bins, 4, w)  # (R, C, H, ow)
    row_bins = (g.call("reshape", v, newshape=(-1, 1, oh, 1, 1)) for v in (row_first, row_last))
    pooled_max = _masked_max(g, g.call("expand_dims", by_cols, axis=2), *row_bins, 3, h)  # (R, C, oh, ow)
    empty = g.call("logical_or",  # (R, 1, oh, ow): a bin outside the map is 0
                   g.call("reshape", g.call("less_equal", row_last, row_first), newshape=(-1, 1, oh, 1)),
                   g.call("reshape", g.call("less_equal", col_last, col_first), newshape=(-1, 1, 1, ow)))
    return g.call("where", empty, g.scalar(0.0, pooled_max), pooled_max)


@_reg("NonMaxSuppression")
def _non_max_suppression(g: GraphBuilder, node: NodeView) -> Expr:
    boxes, scores = _x(node, 0), _x(node, 1)
    if g.ndim(boxes) != 3 or g.ndim(scores) != 3:
        raise node.fail(f"expects boxes (batch, boxes, 4) and scores (batch, classes, boxes), got "
                        f"{g.shape(boxes)} and {g.shape(scores)}")

    def scalar(i: int, dtype: str, default: float) -> Expr:
        given = node.input(i)
        if given is None:
            return g.const(np.array(default, dtype))
        if any(d != 1 for d in g.static_shape(given, f"input {i}")):
            raise node.fail(f"input {i} must hold one value, got shape {g.shape(given)}")
        return g.call("reshape", g.call("cast", given, dtype=dtype), newshape=())

    dtype = g.dtype(boxes)
    out = g.call("vision.non_max_suppression", boxes, g.call("cast", scores, dtype=dtype),
                 scalar(2, "int64", 0), scalar(3, dtype, 0.0), scalar(4, dtype, 0.0),
                 center_point_box=bool(node.attr("center_point_box", 0)),
                 has_score_threshold=node.input(4) is not None)
    return keep_first(g, g.item(out, 0), g.item(out, 1), axis=0)
