"""Resize (and the old Upsample): `image.resize2d` where it is exact, interpolation matrices elsewhere.

`image.resize2d` covers NCHW nearest/linear resizing whose scale is output/input extent. Other
variants (scales that do not map an extent to whole pixels, cubic, `exclude_outside`,
`half_pixel_symmetric`, resizing N/C or non-4-d data) become one `nn.matmul` per resized axis
with a weight matrix built at import time (`resize_matrix`). Sizes computed at run time give
`dyn.resize2d` (nearest and linear only).
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, normalize_axis
from autorelay.frontend.onnx.resize_matrix import AxisResize, weight_matrix
from autorelay.ir.expr import Expr

TABLE: dict = {}
_FAST_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")


def _targets(g: GraphBuilder, node: NodeView, shape: tuple) -> tuple[list, list[float]]:
    """Output extents and the scale each axis uses in its coordinate transformation. A dynamic
    extent (an export's dynamic batch) must be left as it is: a scale of 1, or not among `axes`
    (an entry of `sizes` fixes its extent, whatever the input's)."""
    out, scales, sized = _resized(g, node, tuple(d if isinstance(d, int) else 1 for d in shape))
    for a, d in enumerate(shape):
        if not isinstance(d, int):
            if a in sized or scales[a] != 1.0 or out[a] != 1:
                how = "an entry of sizes" if a in sized else f"scale {scales[a]:g}"
                raise node.fail(f"axis {a} has dynamic extent {d} and is resized ({how}); only static axes "
                                "can be resized")
            out[a] = d
    return out, scales


def _resized(g: GraphBuilder, node: NodeView, shape: tuple[int, ...]
             ) -> tuple[list[int], list[float], list[int]]:
    """Output extents, scales, and the axes whose extent `sizes` gives (none when scales do)."""
    rank = len(shape)
    if node.op_type == "Upsample" or node.opset < 11:
        given = node.input(1)
        scales = g.value(given, "scales") if given is not None else np.array(node.attr("scales"))
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        return [int(np.floor(d * s)) for d, s in zip(shape, scales)], scales, []
    scales_e, sizes_e = node.input(2), node.input(3)
    scales = None if scales_e is None or g.shape(scales_e) == (0,) else g.value(scales_e, "scales")
    sizes = None if sizes_e is None or g.shape(sizes_e) == (0,) else g.ints(sizes_e, "sizes")
    axes = node.attr("axes")
    axes = list(range(rank)) if axes is None else [normalize_axis(g, a, rank, "axes") for a in axes]
    out, sc = list(shape), [1.0] * rank
    if sizes is not None:
        if len(sizes) != len(axes):
            raise node.fail(f"sizes {sizes} must have one entry per resized axis {axes}")
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        ratios = [sizes[k] / shape[a] for k, a in enumerate(axes)]
        if policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a], sc[a] = int(np.floor(r * shape[a] + 0.5)), r
        elif policy == "stretch":
            for k, a in enumerate(axes):
                out[a], sc[a] = int(sizes[k]), ratios[k]
        else:
            raise node.fail(f"keep_aspect_ratio_policy={policy!r} is not supported")
    elif scales is not None:
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        if len(scales) != len(axes):
            raise node.fail(f"scales {scales} must have one entry per resized axis {axes}")
        for k, a in enumerate(axes):
            out[a], sc[a] = int(np.floor(shape[a] * scales[k])), scales[k]
    else:
        raise node.fail("one of scales and sizes is required")
    return out, sc, axes if sizes is not None else []


def _resize(g: GraphBuilder, node: NodeView) -> Expr:
    x = node.input(0)
    shape = g.shape(x)
    rank = len(shape)
    legacy = node.op_type == "Upsample" or node.opset < 11
    mode = node.attr("mode", "nearest")
    ctm = "asymmetric" if legacy else node.attr("coordinate_transformation_mode", "half_pixel")
    nearest = "floor" if legacy else node.attr("nearest_mode", "round_prefer_floor")
    exclude = bool(node.attr("exclude_outside", 0))
    antialias = bool(node.attr("antialias", 0))
    method = {"bilinear": "linear"}.get(mode, mode)
    if method not in ("nearest", "linear", "cubic"):
        raise node.fail(f"mode={mode!r} is not supported (nearest, linear, cubic)")
    sizes = node.input(3) if not legacy else None
    if sizes is not None and g.shape(sizes) != (0,) and g.value_or_none(sizes) is None:
        resized = _run_time_sizes(g, node, x, sizes, method, ctm, nearest)
        if resized is not None:
            return resized  # else the sizes must be known: the error below names them
    out, scales = _targets(g, node, shape)
    rois = _rois(g, node, rank) if ctm == "tf_crop_and_resize" else [(0.0, 1.0)] * rank
    exact = all(o is d or abs(o / d - s) < 1e-9 if d else True for o, d, s in zip(out, shape, scales))
    simple = method != "cubic" and not exclude and not (antialias and method != "nearest")
    if rank == 4 and out[:2] == list(shape[:2]) and simple and ctm in _FAST_MODES and exact:
        return g.call(
            "image.resize2d",
            x,
            size=tuple(out[2:]),
            method={"nearest": "nearest_neighbor"}.get(method, method),
            coordinate_transformation_mode=ctm,
            rounding_method=nearest if method == "nearest" else "",
        )
    if not g.dtype(x).startswith("float"):
        raise node.fail(f"resizing {g.dtype(x)} data this way needs a float dtype")
    valid = []
    for axis in range(rank):
        if out[axis] == shape[axis] and scales[axis] == 1.0 and rois[axis] == (0.0, 1.0):
            valid.append(np.ones(out[axis] if isinstance(out[axis], int) else 1, bool))
            continue
        spec = AxisResize(
            shape[axis],
            out[axis],
            scales[axis],
            ctm,
            method,
            nearest,
            float(node.attr("cubic_coeff_a", -0.75)),
            exclude,
            antialias,
            rois[axis],
        )
        try:
            m, ok = weight_matrix(spec)
        except ValueError as err:
            raise node.fail(str(err)) from None
        valid.append(ok)
        x = _along(g, x, axis, g.const(m.T, g.dtype(x)))
    if ctm == "tf_crop_and_resize":  # samples outside the image take extrapolation_value
        inside = np.ones((), bool)
        for v in valid:
            inside = np.logical_and.outer(inside, v)
        outside = (~inside).astype(g.dtype(x)) * float(node.attr("extrapolation_value", 0.0))
        if outside.any():
            x = g.call("add", x, g.const(outside, g.dtype(x)))
    return x


def _run_time_sizes(g: GraphBuilder, node: NodeView, x: Expr, sizes: Expr, method: str, ctm: str,
                    nearest: str) -> Expr | None:
    """Resize of NCHW data to a height and width computed at run time (Mask R-CNN pastes each
    mask at its box's size, Keypoint R-CNN each heatmap bicubically): `dyn.resize2d`, which the VM
    compiles per size. Only where `image.resize2d` computes it: nearest, linear or cubic without
    excluded taps, the batch and channels kept (checked at run time: inside a Loop's body every
    extent may be `?`); else None."""
    rank, axes = g.ndim(x), node.attr("axes")
    axes = list(range(rank)) if axes is None else [normalize_axis(g, a, rank, "axes") for a in axes]
    plain = not node.attr("exclude_outside", 0) and not node.attr("antialias", 0) \
        and node.attr("keep_aspect_ratio_policy", "stretch") == "stretch"
    supported = rank == 4 and ctm in _FAST_MODES and plain
    if not supported or axes not in ([0, 1, 2, 3], [2, 3]):
        return None
    full = g.call("cast", sizes, dtype="int64")
    if axes == [2, 3]:  # the batch and channels as they are
        kept = g.call("strided_slice", g.call("shape_of", x), begin=(0,), end=(2,))
        full = g.call("concatenate", g.tuple([kept, full]), axis=0)
    return g.call("dyn.resize2d", x, full, method={"nearest": "nearest_neighbor"}.get(method, method),
                  coordinate_transformation_mode=ctm, rounding_method=nearest if method == "nearest" else "",
                  cubic_alpha=float(node.attr("cubic_coeff_a", -0.75)))


def _rois(g: GraphBuilder, node: NodeView, rank: int) -> list[tuple[float, float]]:
    """Per-axis (start, end) of the crop, from the `roi` input (over `axes` when given)."""
    roi = [float(v) for v in np.asarray(g.value(node.input(1), "roi")).reshape(-1)]
    axes = node.attr("axes")
    axes = list(range(rank)) if axes is None else [normalize_axis(g, a, rank, "axes") for a in axes]
    if len(roi) != 2 * len(axes):
        raise node.fail(f"roi {roi} must hold a start and an end per resized axis {axes}")
    out = [(0.0, 1.0)] * rank
    for k, a in enumerate(axes):
        out[a] = (roi[k], roi[k + len(axes)])
    return out


def _along(g: GraphBuilder, x: Expr, axis: int, mt: Expr) -> Expr:
    """Contract `axis` of x with the `(in, out)` matrix `mt`."""
    rank = g.ndim(x)
    if axis == rank - 1:
        return g.call("nn.matmul", x, mt)
    perm = [i for i in range(rank) if i != axis] + [axis]
    back = tuple(int(b) for b in np.argsort(perm))
    return g.call("transpose", g.call("nn.matmul", g.call("transpose", x, axes=tuple(perm)), mt), axes=back)


TABLE["Resize"] = TABLE["Upsample"] = _resize
