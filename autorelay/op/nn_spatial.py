"""Spatial rearrangements: `nn.pad` (constant / reflect / edge), its gradient helper `nn.pad_grad`,
and `nn.upsampling` (which is `image.resize2d` with an integer-ish scale).

`nn.pad` takes the fill value as a tensor argument, as Relay does: `nn.pad(%x, 0f, pad_width=…)`.
Padding is separable per axis, so its adjoint is too: every output position reads exactly one input
position (or the fill value), and the gradient scatters back along that map (`_source_index`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import AnyDim, TensorType, Type
from autorelay.op.image import in_layout, resize_canonical, resize_compute, resized_type
from autorelay.op.layout import parse_layout, to_canonical_shape
from autorelay.op.registry import REQUIRED, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import fmt_shape, tensor_arg

MODES = ("constant", "reflect", "edge")


def _normalize_pad(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    a = dict(attrs)
    try:
        width = tuple((int(b), int(e)) for b, e in a["pad_width"])
    except (TypeError, ValueError):
        raise rel_error(op, f"pad_width must be (before, after) pairs, got {a['pad_width']!r}") from None
    if any(b < 0 or e < 0 for b, e in width):
        raise rel_error(op, f"pad_width must be non-negative, got {width}")
    if a["pad_mode"] not in MODES:
        raise rel_error(op, f"pad_mode={a['pad_mode']!r} is not one of {', '.join(MODES)}")
    a["pad_width"] = width
    return a


def _padded_shape(op: str, data: TensorType, attrs: Attrs) -> tuple:
    width = attrs["pad_width"]
    if len(width) != len(data.shape):
        raise rel_error(op, f"pad_width has {len(width)} pairs but data of shape {fmt_shape(data.shape)} "
                            f"has rank {len(data.shape)}")
    out = []
    for ax, (d, (b, e)) in enumerate(zip(data.shape, width)):
        if isinstance(d, int) and (b or e):
            if attrs["pad_mode"] == "reflect" and max(b, e) >= d:
                raise rel_error(op, f"reflect padding {(b, e)} of axis {ax} must be smaller than its extent "
                                    f"{d} (data of shape {fmt_shape(data.shape)})")
            if attrs["pad_mode"] == "edge" and d == 0:
                raise rel_error(op, f"edge padding of the empty axis {ax} of data {fmt_shape(data.shape)}")
        out.append(d + b + e if isinstance(d, int) else (d if b == e == 0 else AnyDim()))
    return tuple(out)


def _pad_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = tensor_arg("nn.pad", arg_types, 0, "data")
    value = tensor_arg("nn.pad", arg_types, 1, "pad_value")
    if value.shape != () or value.dtype != data.dtype:
        raise rel_error("nn.pad", f"pad_value must be a {data.dtype} scalar, got {value}")
    return TensorType(_padded_shape("nn.pad", data, attrs), data.dtype)


def _pad_ref(attrs: Attrs, x: np.ndarray, value: np.ndarray) -> np.ndarray:
    if attrs["pad_mode"] == "constant":
        return np.pad(x, attrs["pad_width"], mode="constant", constant_values=value.item())
    return np.pad(x, attrs["pad_width"], mode=attrs["pad_mode"])


def _source_index(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each padded position along one axis, the input index it copies (-1: the fill value)."""
    i = np.arange(-before, n + after)
    if mode == "constant":
        return np.where((i >= 0) & (i < n), i, -1)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    period = 2 * (n - 1)
    if period == 0:
        return np.zeros_like(i)
    i = np.abs(i) % period
    return np.where(i > n - 1, period - i, i)


def _pad_grad_ref(attrs: Attrs, g: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = g
    for ax, (b, e) in enumerate(attrs["pad_width"]):
        n = x.shape[ax]
        src = _source_index(n, b, e, attrs["pad_mode"])
        moved = np.moveaxis(out, ax, 0)
        acc = np.zeros((n,) + moved.shape[1:], dtype=g.dtype)
        keep = src >= 0
        np.add.at(acc, src[keep], moved[keep])
        out = np.moveaxis(acc, 0, ax)
    return out


def _pad_gradient(c: Call, g: Expr) -> list[Expr]:
    x, value = c.args
    dx = call("nn.pad_grad", g, x, pad_width=c.attrs["pad_width"], pad_mode=c.attrs["pad_mode"])
    if c.attrs["pad_mode"] != "constant":
        return [dx, call("zeros_like", value)]
    # every output position not copied from x holds the fill value
    return [dx, call("subtract", call("sum", g), call("sum", dx))]


def _pad_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Constant padding: the input at clamped indices where inside, else the pad value (both arms
    of the select are evaluated, so the read must stay in bounds). Edge and reflect padding only
    move the read index (`_mirror_index`), as `_source_index` does for the gradient."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E

    x, value = inputs
    widths = [tuple(w) for w in attrs["pad_width"]]
    mode = attrs["pad_mode"]
    if mode != "constant":
        return tc.compute0(tc.out_shape(out_type), lambda *i: x[tuple(
            _mirror_index(E, v - b, n, mode) for v, n, (b, _) in zip(i, x.shape, widths))], "pad",
            tag="injective")

    def body(*i: E.Expr) -> E.Expr:
        conds, src = [], []
        for v, n, (b, _) in zip(i, x.shape, widths):
            j = v - b
            if b or widths:
                conds.append((j >= 0) & (j < n))
            src.append(E.maximum(E.minimum(j, n - 1), 0))
        fill = E.cast(value[()] if value.ndim == 0 else value[(0,) * value.ndim], x.dtype)
        return E.select(E.all_of(*conds), x[tuple(src)], fill)

    return tc.compute0(tc.out_shape(out_type), body, "pad", tag="injective")


def _mirror_index(E: Any, j: Any, n: int, mode: str) -> Any:
    """The input index read at offset `j` (may be outside [0, n)) by edge / reflect padding; reflect
    widths are below n (the type relation checks), so one reflection at each end suffices."""
    if mode == "edge" or n == 1:
        return E.maximum(E.minimum(j, n - 1), 0)
    j = E.select(j < 0, 0 - j, j)
    j = E.select(j > n - 1, 2 * (n - 1) - j, j)
    return E.maximum(E.minimum(j, n - 1), 0)  # a no-op that lets the bounds check prove the read


register(OpDef(
    name="nn.pad",
    arg_names=("data", "pad_value"),
    type_rel=_pad_rel,
    pattern=OpPattern.INJECTIVE,
    attrs={"pad_width": REQUIRED, "pad_mode": "constant"},
    reference=_pad_ref,
    gradient=_pad_gradient,
    compute=_pad_compute,
    normalize_attrs=lambda a: _normalize_pad("nn.pad", a),
    doc="Pad each axis by (before, after) with a constant, a reflection (no edge repeat) or the edge.",
))


def _pad_grad_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    g = tensor_arg("nn.pad_grad", arg_types, 0, "out_grad")
    data = tensor_arg("nn.pad_grad", arg_types, 1, "data")
    want = _padded_shape("nn.pad_grad", data, attrs)
    if len(g.shape) != len(want) or any(isinstance(a, int) and isinstance(b, int) and a != b
                                        for a, b in zip(g.shape, want)):
        raise rel_error("nn.pad_grad", f"out_grad of shape {fmt_shape(g.shape)} does not match the padded "
                                       f"shape {fmt_shape(want)}")
    return data


def _pad_grad_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Constant padding's gradient is the gradient inside the border. Edge and reflect padding copy
    an input element to several positions, whose gradients add up: gathered per input element
    over the few positions that copy it (`_copies`), so no scatter is needed."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    g, data = inputs
    widths = [tuple(w) for w in attrs["pad_width"]]
    mode = attrs["pad_mode"]
    if mode == "constant":
        return tc.compute0(tc.out_shape(out_type), lambda *i: g[tuple(v + b for v, (b, _) in zip(i, widths))],
                           "pad_grad", tag="injective")
    tc.check_dtypes([g], ("float32", "float64"))
    copies = {ax: te.reduce_axis(_copy_count(mode, b, e), f"copy{ax}")
              for ax, (b, e) in enumerate(widths) if b or e}
    if not copies:
        return tc.compute0(tc.out_shape(out_type), lambda *i: g[i], "pad_grad", tag="injective")

    def body(*i: E.Expr) -> E.Expr:
        read, conds = list(i), []
        for ax, r in copies.items():
            (b, e), n = widths[ax], data.shape[ax]
            offset, copied = _copies(mode, i[ax], r.var, n, b, e)
            read[ax] = E.maximum(E.minimum(offset + b, n + b + e - 1), 0)
            conds.append(copied)
        return te.sum(E.select(E.all_of(*conds), g[tuple(read)], E.const(0, g.dtype)), list(copies.values()))

    return tc.compute0(tc.out_shape(out_type), body, "pad_grad", tag="reduce")


def _copy_count(mode: str, before: int, after: int) -> int:
    """How many padded positions may copy one input element along an axis: itself and its one
    reflection at each end (reflect widths are below the extent), or, at an edge, every position
    of that side's padding."""
    return 3 if mode == "reflect" else 1 + before + after


def _copies(mode: str, i: Any, t: Any, n: int, before: int, after: int) -> tuple[Any, Any]:
    """The `t`-th padded offset (from the input's start; negative in the leading padding) that may
    copy input `i` along one axis, and whether it does. Reflect: t = 0 is `i` itself, 1 its mirror
    `-i` in the leading padding, 2 its mirror `2 (n - 1) - i` in the trailing one. Edge: t = 0 is
    `i`; t in [1, before] the leading padding, copies of element 0; the rest the trailing
    padding, copies of element n - 1."""
    from autorelay.te import expr as E

    if mode == "reflect":
        mirror_after = 2 * (n - 1) - i
        offset = E.select(E.compare("eq", t, 0), i, E.select(E.compare("eq", t, 1), 0 - i, mirror_after))
        copied = E.select(E.compare("eq", t, 0), E.const(True),
                          E.select(E.compare("eq", t, 1), (i >= 1) & (i <= before),
                                   (mirror_after >= n) & (mirror_after <= n - 1 + after)))
        return offset, copied
    lead = t - before - 1  # t in [1, before]: offsets -before .. -1
    trail = n - 1 + t - before  # t in [before + 1, before + after]: offsets n .. n - 1 + after
    offset = E.select(E.compare("eq", t, 0), i, E.select(t <= before, lead, trail))
    copied = E.select(E.compare("eq", t, 0), E.const(True),
                      E.select(t <= before, E.compare("eq", i, 0), E.compare("eq", i, n - 1)))
    return offset, copied


register(OpDef(
    name="nn.pad_grad",
    arg_names=("out_grad", "data"),
    type_rel=_pad_grad_rel,
    pattern=OpPattern.INJECTIVE,
    attrs={"pad_width": REQUIRED, "pad_mode": "constant"},
    reference=_pad_grad_ref,
    compute=_pad_grad_compute,
    normalize_attrs=lambda a: _normalize_pad("nn.pad_grad", a),
    doc="Gradient of nn.pad with respect to its data (reflected/edge copies add up).",
))


# ---------------------------------------------------------------------------------------------
# nn.upsampling


def _upsampled(size: Any, scale: float) -> Any:
    """Relay's `round(size * scale)`; `?` when the extent is symbolic."""
    if not isinstance(size, int):
        return size if scale == 1 else AnyDim()
    return int(np.floor(size * scale + 0.5))


def _resize_attrs(attrs: Attrs, h: int, w: int) -> dict[str, Any]:
    """The image.resize2d call that this upsampling is (TVM's definition)."""
    bilinear = attrs["method"] in ("bilinear", "linear")
    return {
        "size": (_upsampled(h, attrs["scale_h"]), _upsampled(w, attrs["scale_w"])),
        "layout": attrs["layout"],
        "method": "linear" if bilinear else "nearest_neighbor",
        "coordinate_transformation_mode": "align_corners" if attrs["align_corners"] else "asymmetric",
        "rounding_method": "" if bilinear else "floor",
    }


def _spatial(op: str, shape: tuple, layout: str) -> tuple:
    return to_canonical_shape(op, shape, parse_layout(op, layout, "NCHW", "layout"), "NCHW", "data")[2:]


def _upsampling_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "nn.upsampling"
    data = tensor_arg(op, arg_types, 0, "data")
    if attrs["method"] not in ("nearest_neighbor", "bilinear", "linear"):
        raise rel_error(op, f"method={attrs['method']!r} is not nearest_neighbor or bilinear")
    if attrs["scale_h"] <= 0 or attrs["scale_w"] <= 0:
        raise rel_error(op, f"scales must be positive, got {attrs['scale_h']}, {attrs['scale_w']}")
    h, w = _spatial(op, data.shape, attrs["layout"])
    size = (_upsampled(h, attrs["scale_h"]), _upsampled(w, attrs["scale_w"]))
    for d in size:
        if isinstance(d, int) and d <= 0:
            raise rel_error(op, f"scales ({attrs['scale_h']}, {attrs['scale_w']}) leave data of shape "
                                f"{fmt_shape(data.shape)} empty")
    return resized_type(op, data, attrs["layout"], size, data.dtype)


def _upsampling_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    h, w = _spatial("nn.upsampling", x.shape, attrs["layout"])
    r = _resize_attrs(attrs, h, w)
    return in_layout(resize_canonical, Attrs(r), x)


def _upsampling_gradient(c: Call, g: Expr) -> list[Expr]:
    shape = c.args[0].checked_type.shape
    h, w = _spatial("nn.upsampling", shape, c.attrs["layout"])
    if not (isinstance(h, int) and isinstance(w, int)):
        raise rel_error("nn.upsampling", f"gradient needs static spatial extents, got {fmt_shape(shape)}")
    return [call("image.resize2d_grad", g, c.args[0], **_resize_attrs(c.attrs, h, w))]


def _upsampling_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """The compute of the image.resize2d call this upsampling is."""
    h, w = _spatial("nn.upsampling", inputs[0].shape, attrs["layout"])
    return resize_compute(inputs[0], _resize_attrs(attrs, h, w), out_type)


register(OpDef(
    name="nn.upsampling",
    arg_names=("data",),
    type_rel=_upsampling_rel,
    pattern=OpPattern.INJECTIVE,
    attrs={"scale_h": 1.0, "scale_w": 1.0, "layout": "NCHW", "method": "nearest_neighbor",
           "align_corners": False},
    reference=_upsampling_ref,
    gradient=_upsampling_gradient,
    compute=_upsampling_compute,
    doc="Scale H and W by scale_h / scale_w (nearest: floor(o / scale); bilinear: asymmetric or "
        "align_corners coordinates).",
))
