"""Image resizing: `image.resize2d` (nearest neighbour, bilinear and bicubic) and its gradient
helper `image.resize2d_grad`.

All three methods are linear maps applied separately along H and W: `out = A_h @ x @ A_w.T` per
image and channel, where row `o` of `A` holds the interpolation weights of output position `o`. The
reference builds the two small matrices from the coordinate transformation, so the forward pass
and its adjoint (`A_h.T @ g @ A_w`, the gradient) share one definition of where a pixel comes from.

Coordinate transformations map an output index `o` to an input coordinate `y` (scale = in / out):
`half_pixel` `(o + 0.5) * scale - 0.5`; `pytorch_half_pixel` the same unless out == 1 (then 0);
`align_corners` `o * (in - 1) / (out - 1)`; `asymmetric` `o * scale`; `tf_half_pixel_for_nn`
`(o + 0.5) * scale`. Nearest rounds `y` (default: `round` for align_corners, else `floor`, as TVM);
linear interpolates between `floor(y)` and `floor(y) + 1`, indices clamped to the image. Cubic
weighs the four pixels from `ceil(y) - 2` to `ceil(y) + 1` by Keys' kernel with `cubic_alpha` (ONNX's
`cubic_coeff_a`), indices clamped; `cubic_exclude` drops the taps outside and renormalises (the
reference only).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import TensorType, Type
from autorelay.op.layout import (
    from_canonical_array,
    from_canonical_shape,
    int_tuple,
    parse_layout,
    to_canonical_array,
    to_canonical_shape,
)
from autorelay.op.registry import REQUIRED, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, tensor_arg

METHODS = ("nearest_neighbor", "linear", "cubic")
MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
ROUNDING = ("", "round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def _normalize(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    a = dict(attrs)
    a["size"] = int_tuple(op, "size", a["size"], 2)
    if any(s <= 0 for s in a["size"]):
        raise rel_error(op, f"size must be positive, got {a['size']}")
    if a["method"] == "bilinear":  # older Relay spelling
        a["method"] = "linear"
    for key, allowed in (("method", METHODS), ("coordinate_transformation_mode", MODES),
                         ("rounding_method", ROUNDING)):
        if a[key] not in allowed:
            raise rel_error(op, f"{key}={a[key]!r} is not one of {', '.join(map(repr, allowed))}")
    return a


def source_coordinate(o: np.ndarray, in_size: int, out_size: int, mode: str) -> np.ndarray:
    scale = in_size / out_size
    if mode == "half_pixel":
        return (o + 0.5) * scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) * scale - 0.5 if out_size > 1 else np.zeros_like(o)
    if mode == "align_corners":
        return o * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o * scale
    return (o + 0.5) * scale  # tf_half_pixel_for_nn


def _round(y: np.ndarray, how: str) -> np.ndarray:
    if how == "floor":
        return np.floor(y)
    if how == "ceil":
        return np.ceil(y)
    if how == "round_prefer_floor":
        return np.ceil(y - 0.5)
    if how == "round_prefer_ceil":
        return np.floor(y + 0.5)
    return np.sign(y) * np.floor(np.abs(y) + 0.5)  # round: half away from zero


def cubic_weight(t: Any, alpha: float) -> Any:
    """Keys' cubic convolution kernel at distance `t` (0 <= t < 2) with parameter `alpha`."""
    near = ((alpha + 2) * t - (alpha + 3)) * t * t + 1
    far = ((alpha * t - 5 * alpha) * t + 8 * alpha) * t - 4 * alpha
    return near, far


def interp_matrix(in_size: int, out_size: int, method: str, mode: str, rounding: str,
                  alpha: float = -0.5, exclude: bool = False) -> np.ndarray:
    """`A` with `out = A @ x` along one axis (shape out_size x in_size)."""
    y = source_coordinate(np.arange(out_size, dtype=np.float64), in_size, out_size, mode)
    a = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    if method == "nearest_neighbor":
        how = rounding or ("round" if mode == "align_corners" else "floor")
        idx = np.clip(_round(y, how), 0, in_size - 1).astype(np.int64)
        a[rows, idx] = 1.0
        return a
    if method == "cubic":  # taps at base - 1 .. base + 2, base = ceil(y) - 1, so 0 < y - base <= 1
        base = np.ceil(y) - 1
        frac = y - base
        for off in (-1, 0, 1, 2):
            t = np.abs(off - frac)
            near, far = cubic_weight(t, alpha)
            w = np.where(t <= 1, near, far)
            pos = base + off
            if exclude:
                w = np.where((pos >= 0) & (pos < in_size), w, 0.0)
            np.add.at(a, (rows, np.clip(pos, 0, in_size - 1).astype(np.int64)), w)
        return a / a.sum(axis=1, keepdims=True) if exclude else a
    y0 = np.floor(y)
    frac = y - y0
    lo = np.clip(y0, 0, in_size - 1).astype(np.int64)
    hi = np.clip(y0 + 1, 0, in_size - 1).astype(np.int64)
    np.add.at(a, (rows, lo), 1.0 - frac)
    np.add.at(a, (rows, hi), frac)
    return a


def _matrices(attrs: Attrs, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    m, mode, r = attrs["method"], attrs["coordinate_transformation_mode"], attrs["rounding_method"]
    oh, ow = attrs["size"]
    cubic = float(attrs.get("cubic_alpha", -0.5)), bool(attrs.get("cubic_exclude", 0))  # not upsampling's
    return interp_matrix(h, oh, m, mode, r, *cubic), interp_matrix(w, ow, m, mode, r, *cubic)


def _cast(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return v.astype(dtype) if np.issubdtype(dtype, np.floating) else np.round(v).astype(dtype)


def resize_canonical(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    ah, aw = _matrices(attrs, *x.shape[2:])
    out = np.einsum("oh,nchw,pw->ncop", ah, x.astype(np.float64), aw)
    return _cast(out, np.dtype(attrs.get("out_dtype") or x.dtype))


def resize_grad_canonical(g: np.ndarray, x: np.ndarray, attrs: Attrs) -> np.ndarray:
    ah, aw = _matrices(attrs, *x.shape[2:])
    return _cast(np.einsum("oh,ncop,pw->nchw", ah, g.astype(np.float64), aw), g.dtype)


def in_layout(fn, attrs: Attrs, *arrays: np.ndarray) -> np.ndarray:
    lay = parse_layout("image", attrs["layout"], "NCHW")
    res = fn(*(to_canonical_array(a, lay, "NCHW") for a in arrays), attrs)
    return np.ascontiguousarray(from_canonical_array(res, lay, "NCHW"))


def resized_type(op: str, data: TensorType, layout: str, size: tuple, dtype: str) -> TensorType:
    lay = parse_layout(op, layout, "NCHW", "layout")
    n, c, _, _ = to_canonical_shape(op, data.shape, lay, "NCHW", "data")
    return TensorType(from_canonical_shape(op, (n, c, *size), lay, "NCHW", "output"), dtype)


def _resize_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = tensor_arg("image.resize2d", arg_types, 0, "data")
    dtype = attrs["out_dtype"] or data.dtype
    return resized_type("image.resize2d", data, attrs["layout"], attrs["size"], dtype)


def _grad_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    g = tensor_arg("image.resize2d_grad", arg_types, 0, "out_grad")
    data = tensor_arg("image.resize2d_grad", arg_types, 1, "data")
    want = resized_type("image.resize2d_grad", data, attrs["layout"], attrs["size"], data.dtype)
    if len(g.shape) != len(want.shape) or any(map(dim_known_different, g.shape, want.shape)):
        raise rel_error("image.resize2d_grad", f"out_grad of shape {fmt_shape(g.shape)} does not match the "
                                               f"resized shape {fmt_shape(want.shape)}")
    return data


def _resize_gradient(c: Call, g: Expr) -> list[Expr]:
    attrs = {k: v for k, v in c.attrs.items() if k != "out_dtype"}
    return [call("image.resize2d_grad", g, c.args[0], **attrs)]


_ATTRS = {
    "size": REQUIRED, "roi": None, "layout": "NCHW", "method": "linear",
    "coordinate_transformation_mode": "half_pixel", "rounding_method": "", "cubic_alpha": -0.5,
    "cubic_exclude": 0, "extrapolation_value": 0.0,
}

register(OpDef(
    name="image.resize2d",
    arg_names=("data",),
    type_rel=_resize_rel,
    pattern=OpPattern.INJECTIVE,
    attrs={**_ATTRS, "out_dtype": ""},
    reference=lambda a, x: in_layout(resize_canonical, a, x),
    gradient=_resize_gradient,
    compute=lambda ins, a, t: resize_compute(ins[0], a, t),
    normalize_attrs=lambda a: _normalize("image.resize2d", a),
    doc="Resize H and W to `size` by nearest-neighbour, bilinear or bicubic interpolation.",
))

register(OpDef(
    name="image.resize2d_grad",
    arg_names=("out_grad", "data"),
    type_rel=_grad_rel,
    pattern=OpPattern.OPAQUE,
    attrs=dict(_ATTRS),
    reference=lambda a, g, x: in_layout(resize_grad_canonical, a, g, x),
    compute=lambda ins, a, t: resize_grad_compute(ins[0], ins[1], a, t),
    normalize_attrs=lambda a: _normalize("image.resize2d_grad", a),
    doc="Adjoint of image.resize2d (the gradient with respect to its data).",
))



# ---- tensor compute -------------------------------------------------------------------------


def _coordinate(o: Any, in_size: int, out_size: int, mode: str) -> tuple[Any, int]:
    """`source_coordinate` as an exact fraction `(numerator, denominator)` of int64 expressions.

    The coordinates are rationals with small denominators, so rounding the exact fraction with
    integer arithmetic picks the same pixel as the reference's float64 formula, whereas evaluating
    that formula in generated code could differ at exact integers (multiply-adds fuse into FMAs).
    """
    from autorelay.te import expr as E

    o = E.cast(o, "int64")
    if mode in ("align_corners", "pytorch_half_pixel") and out_size == 1:
        return E.const(0), 1
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (2 * o + 1) * in_size - out_size, 2 * out_size
    if mode == "align_corners":
        return o * (in_size - 1), out_size - 1
    if mode == "asymmetric":
        return o * in_size, out_size
    return (2 * o + 1) * in_size, 2 * out_size  # tf_half_pixel_for_nn


def _round_fraction(num: Any, den: int, how: str) -> Any:
    """`num / den` (den > 0) rounded by `how`, in integer arithmetic."""
    from autorelay.te import expr as E

    if how == "floor":
        return num // den
    if how == "ceil":
        return -((-num) // den)
    if how == "round_prefer_floor":  # ceil(y - 1/2)
        return -((den - 2 * num) // (2 * den))
    if how == "round_prefer_ceil":  # floor(y + 1/2)
        return (2 * num + den) // (2 * den)
    away = (E.select(num < 0, -num, num) * 2 + den) // (2 * den)  # round: half away from zero
    return E.select(num < 0, -away, away)


def resize_compute(x: Any, attrs: Any, out_type: Type) -> Any:
    """Nearest: a gather at the rounded source coordinate. Linear: the four clamped neighbours
    weighted by the fractional parts (separable, as the reference's `A_h @ x @ A_w.T`)."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E

    layout = attrs["layout"]
    if layout not in ("NCHW", "NHWC"):
        raise tc.Unsupported(f"resize in layout {layout} has no compute")
    hd, wd = layout.index("H"), layout.index("W")
    shape, dtype = tc.out_shape(out_type), tc.out_dtype(out_type)
    method, mode = attrs["method"], attrs["coordinate_transformation_mode"]
    if method != "nearest_neighbor" and not E.is_float(x.dtype):
        raise tc.Unsupported(f"{method} resize of {x.dtype} data has no compute")
    sizes = [(x.shape[d], shape[d]) for d in (hd, wd)]

    def clamp(i: Any, n: int) -> Any:
        return E.maximum(E.minimum(i, n - 1), 0)

    def to_out(v: Any) -> Any:
        if v.dtype == dtype:
            return v
        return E.cast(E.call("round", v) if E.is_float(v.dtype) and not E.is_float(dtype) else v, dtype)

    def at(idx: tuple, yh: Any, yw: Any) -> Any:
        return x[tuple(yh if d == hd else yw if d == wd else i for d, i in enumerate(idx))]

    def cubic(idx: tuple, ys: list) -> Any:
        """The 4 x 4 clamped neighbours at base - 1 .. base + 2 (base = ceil(y) - 1 per axis),
        weighted by Keys' kernel of their distance: far, near, near, far."""
        if attrs["cubic_exclude"]:
            raise tc.Unsupported("cubic resize that excludes the taps outside the image has no compute")
        one, two = E.const(1.0, x.dtype), E.const(2.0, x.dtype)
        alpha = E.const(float(attrs["cubic_alpha"]), x.dtype)
        taps = []
        for (num, den), (n_in, _) in zip(ys, sizes):
            base = -((-num) // den) - 1
            frac = E.cast(E.cast(num - base * den, "float64") / E.const(float(den), "float64"), x.dtype)
            dists = (one + frac, frac, one - frac, two - frac)
            weights = [cubic_weight(t, alpha)[0 if k in (1, 2) else 1] for k, t in enumerate(dists)]
            taps.append([(clamp(base + off, n_in), w) for off, w in zip((-1, 0, 1, 2), weights)])
        terms = [at(idx, yh, yw) * (wh * ww) for yh, wh in taps[0] for yw, ww in taps[1]]
        return sum(terms[1:], terms[0])

    def body(*idx: Any) -> Any:
        ys = [_coordinate(idx[d], n_in, n_out, mode) for d, (n_in, n_out) in zip((hd, wd), sizes)]
        if method == "nearest_neighbor":
            how = attrs["rounding_method"] or ("round" if mode == "align_corners" else "floor")
            src = [clamp(_round_fraction(num, den, how), n_in) for (num, den), (n_in, _) in zip(ys, sizes)]
            return to_out(at(idx, *src))
        if method == "cubic":
            return to_out(cubic(idx, ys))
        lo, hi, frac = [], [], []
        for (num, den), (n_in, _) in zip(ys, sizes):
            y0 = num // den
            rem = E.cast(num - y0 * den, "float64") / E.const(float(den), "float64")
            frac.append(E.cast(rem, x.dtype))
            lo.append(clamp(y0, n_in))
            hi.append(clamp(y0 + 1, n_in))
        one = E.const(1.0, x.dtype)
        top = at(idx, lo[0], lo[1]) * (one - frac[1]) + at(idx, lo[0], hi[1]) * frac[1]
        bottom = at(idx, hi[0], lo[1]) * (one - frac[1]) + at(idx, hi[0], hi[1]) * frac[1]
        return to_out(top * (one - frac[0]) + bottom * frac[0])

    return tc.compute0(shape, body, "resize2d", tag="injective")


def resize_grad_compute(g: Any, x: Any, attrs: Any, out_type: Type) -> Any:
    """The adjoint `A_h.T @ g @ A_w` as two gathers, along W and then along H: input pixel `i` sums
    the output positions `o` whose interpolation reads it, weighted by `A[o, i]`. Those positions
    lie in a band around `i * out / in` (a source coordinate moves by in/out per output step, and
    `A[o, i]` is nonzero only where it is within one pixel of `i`), so each stage reduces over a
    few candidates, not the whole axis; a candidate outside the output reads nothing."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    layout = attrs["layout"]
    if layout not in ("NCHW", "NHWC"):
        raise tc.Unsupported(f"resize's gradient in layout {layout} has no compute")
    tc.check_dtypes([g], ("float32", "float64"))
    method, mode = attrs["method"], attrs["coordinate_transformation_mode"]
    if method == "cubic":
        raise tc.Unsupported("cubic resize's gradient has no compute")
    how = attrs["rounding_method"] or ("round" if mode == "align_corners" else "floor")
    zero = E.const(0.0, g.dtype)

    def weight(o: Any, i: Any, n_in: int, n_out: int) -> Any:
        """A[o, i]: how much output position `o` takes from input `i` along one axis."""
        num, den = _coordinate(o, n_in, n_out, mode)
        if method == "nearest_neighbor":
            src = E.maximum(E.minimum(_round_fraction(num, den, how), n_in - 1), 0)
            return E.select(E.compare("eq", src, i), E.const(1.0, g.dtype), zero)
        y0 = num // den
        frac = E.cast(E.cast(num - y0 * den, "float64") / E.const(float(den), "float64"), g.dtype)
        lo, hi = E.maximum(E.minimum(y0, n_in - 1), 0), E.maximum(E.minimum(y0 + 1, n_in - 1), 0)
        return (E.select(E.compare("eq", lo, i), E.const(1.0, g.dtype) - frac, zero)
                + E.select(E.compare("eq", hi, i), frac, zero))

    def gather(src: Any, axis: int, n_in: int, name: str) -> Any:
        n_out = src.shape[axis]
        ratio = -(-n_out // n_in)
        r = te.reduce_axis(3 * ratio + 6, f"{name}_r")
        shape = tuple(n_in if d == axis else n for d, n in enumerate(src.shape))

        def body(*idx: Any) -> Any:
            i = E.cast(idx[axis], "int64")
            o = i * n_out // n_in - (ratio + 2) + r.var
            inside = (o >= 0) & (o < n_out)
            read = tuple(E.maximum(E.minimum(o, n_out - 1), 0) if d == axis else v for d, v in enumerate(idx))
            return te.sum(E.select(inside, weight(o, i, n_in, n_out) * src[read], zero), [r])

        return te.compute(shape, body, name=name, tag="reduce")

    along_w = gather(g, layout.index("W"), x.shape[layout.index("W")], "resize_grad_w")
    return gather(along_w, layout.index("H"), x.shape[layout.index("H")], "resize_grad")
