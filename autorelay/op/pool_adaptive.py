"""Adaptive average pooling, `nn.adaptive_avg_pool2d(data, output_size, layout, out_layout)`.

Output cell `i` of an axis of extent `H` pooled to `OH` averages input rows
`floor(i * H / OH)` up to `ceil((i + 1) * H / OH)` (exclusive) — bins that may overlap when `H` is not
a multiple of `OH`. `output_size=None` keeps the input extent; a `None` entry keeps that axis.
The gradient is the helper op `nn.adaptive_avg_pool2d_grad(out_grad, data)` (not a Relay op).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import AnyDim, TensorType, Type
from autorelay.op.layout import (
    from_canonical_array,
    from_canonical_shape,
    parse_layout,
    to_canonical_array,
    to_canonical_shape,
)
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, tensor_arg

OP = "nn.adaptive_avg_pool2d"
GRAD_OP = "nn.adaptive_avg_pool2d_grad"


def _normalize(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    a = dict(attrs)
    size = a["output_size"]
    if size is None:
        size = (None, None)
    elif isinstance(size, int):
        size = (size, size)
    size = tuple(size)
    if len(size) == 1:
        size = size * 2
    if len(size) != 2 or any(s is not None and (not isinstance(s, int) or s <= 0) for s in size):
        raise rel_error(op, f"output_size must be None, a positive int or two, got {attrs['output_size']!r}")
    a["output_size"] = size
    return a


def _out_extents(attrs: Attrs, h: Any, w: Any) -> tuple:
    return tuple(d if s is None else s for s, d in zip(attrs["output_size"], (h, w)))


def adaptive_rel(op: str, arg_types: list[Type], attrs: Attrs, index: int = 0) -> TensorType:
    data = tensor_arg(op, arg_types, index, "data")
    lay = parse_layout(op, attrs["layout"], "NCHW", "layout")
    out_lay = parse_layout(op, attrs.get("out_layout") or attrs["layout"], "NCHW", "out_layout")
    n, c, h, w = to_canonical_shape(op, data.shape, lay, "NCHW", "data")
    for name, d in (("height", h), ("width", w)):
        if d == 0:
            raise rel_error(op, f"data of shape {fmt_shape(data.shape)} has zero {name}")
    return TensorType(from_canonical_shape(op, (n, c, *_out_extents(attrs, h, w)), out_lay, "NCHW", "output"),
                      data.dtype)


def _bins(size: int, out: int) -> list[tuple[int, int]]:
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_canonical(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    oh, ow = _out_extents(attrs, *x.shape[2:])
    out = np.empty(x.shape[:2] + (oh, ow), dtype=np.float64)
    for i, (h0, h1) in enumerate(_bins(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_bins(x.shape[3], ow)):
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out.astype(x.dtype)


def adaptive_grad_canonical(g: np.ndarray, x: np.ndarray, attrs: Attrs) -> np.ndarray:
    oh, ow = _out_extents(attrs, *x.shape[2:])
    dx = np.zeros(x.shape, dtype=g.dtype)
    for i, (h0, h1) in enumerate(_bins(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_bins(x.shape[3], ow)):
            dx[:, :, h0:h1, w0:w1] += g[:, :, i: i + 1, j: j + 1] / ((h1 - h0) * (w1 - w0))
    return dx


def _run(fn, attrs: Attrs, *arrays: np.ndarray, out_key: str) -> np.ndarray:
    lay = parse_layout(OP, attrs["layout"], "NCHW")
    out_lay = parse_layout(OP, attrs.get(out_key) or attrs["layout"], "NCHW")
    res = fn(*(to_canonical_array(a, lay, "NCHW") for a in arrays), attrs)
    return np.ascontiguousarray(from_canonical_array(res, out_lay, "NCHW"))


def grad_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    g = tensor_arg(GRAD_OP, arg_types, 0, "out_grad")
    data = tensor_arg(GRAD_OP, arg_types, 1, "data")
    out = adaptive_rel(GRAD_OP, arg_types, attrs, index=1)
    if len(g.shape) != len(out.shape) or any(map(dim_known_different, g.shape, out.shape)):
        raise rel_error(GRAD_OP, f"out_grad of shape {fmt_shape(g.shape)} does not match the pooled shape "
                                 f"{fmt_shape(out.shape)} of data {fmt_shape(data.shape)}")
    return data


def _gradient(c: Call, g: Expr) -> list[Expr]:
    if c.attrs["out_layout"] and c.attrs["out_layout"] != c.attrs["layout"]:
        raise rel_error(OP, "gradient needs out_layout equal to layout")
    t = c.args[0].checked_type
    if any(isinstance(d, AnyDim) for d in getattr(t, "shape", ())):
        raise rel_error(OP, f"gradient needs a static data shape, got {t}")
    return [call(GRAD_OP, g, c.args[0], output_size=c.attrs["output_size"], layout=c.attrs["layout"])]


def _adaptive_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Sum over the largest bin with out-of-bin taps masked, divided by each bin's own size."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    x = inputs[0]
    tc.check_dtypes([x], ("float32", "float64"))
    if attrs["layout"] != "NCHW" or attrs["out_layout"] not in ("", "NCHW"):
        raise tc.Unsupported(f"layout {attrs['layout']} has no adaptive pooling compute")
    n, c, oh, ow = tc.out_shape(out_type)
    h, w = x.shape[2:]
    kh = max(b - a for a, b in _bins(h, oh))
    kw = max(b - a for a, b in _bins(w, ow))
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def lo(i: E.Expr, size: int, out: int) -> E.Expr:
        return (i * size) // out

    def hi(i: E.Expr, size: int, out: int) -> E.Expr:
        return E.const(0) - ((E.const(0) - (i + 1) * size) // out)

    def tap(b: E.Expr, f: E.Expr, y: E.Expr, z: E.Expr) -> E.Expr:
        yy, zz = lo(y, h, oh) + rh.var, lo(z, w, ow) + rw.var
        inside = (yy < hi(y, h, oh)) & (zz < hi(z, w, ow))
        return E.select(inside, x[b, f, E.minimum(yy, h - 1), E.minimum(zz, w - 1)], E.const(0.0, x.dtype))

    acc = te.compute((n, c, oh, ow), lambda b, f, y, z: te.sum(tap(b, f, y, z), [rh, rw]),
                     name="adaptive_sum", tag="pool")

    def count(y: E.Expr, size: int, out: int) -> E.Expr:
        return hi(y, size, out) - lo(y, size, out)

    return te.compute((n, c, oh, ow), lambda b, f, y, z: acc[b, f, y, z] / E.cast(
        count(y, h, oh) * count(z, w, ow), x.dtype), name="adaptive_avg_pool")


def _adaptive_grad_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Each pixel gathers the bins that hold it, each bin's gradient divided by its size. The bins
    holding row `y` start at `floor(y * OH / H) - 1` or later and number at most `ceil(OH / H) + 2`,
    so a few masked candidates per axis replace a scatter over every bin."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    g, x = inputs
    tc.check_dtypes([g], ("float32", "float64"))
    if attrs["layout"] != "NCHW":
        raise tc.Unsupported(f"layout {attrs['layout']} has no adaptive pooling gradient compute")
    h, w = x.shape[2:]
    oh, ow = g.shape[2:]
    ch, cw = (te.reduce_axis(-(-out // size) + 3, f"bin_{axis}")
              for axis, size, out in (("h", h, oh), ("w", w, ow)))

    def bin_of(y: E.Expr, cand: E.Expr, size: int, out: int) -> tuple[E.Expr, E.Expr, E.Expr]:
        """A candidate bin holding row `y`: (the bin clamped into range, whether it holds `y`, its size)."""
        o = (y * out) // size - 1 + cand
        lo, hi = (o * size) // out, E.const(0) - ((E.const(0) - (o + 1) * size) // out)
        holds = E.all_of(o >= 0, o < out, lo <= y, y < hi)
        return E.maximum(E.minimum(o, out - 1), 0), holds, hi - lo

    def body(b: E.Expr, f: E.Expr, y: E.Expr, z: E.Expr) -> E.Expr:
        (oy, in_y, ny), (oz, in_z, nz) = bin_of(y, ch.var, h, oh), bin_of(z, cw.var, w, ow)
        share = g[b, f, oy, oz] / E.cast(E.maximum(ny * nz, 1), g.dtype)
        return te.sum(E.select(E.binary("and", in_y, in_z), share, E.const(0.0, g.dtype)), [ch, cw])

    return tc.compute0(tc.out_shape(out_type), body, "adaptive_avg_pool_grad", tag="reduce")


register(OpDef(
    name=OP,
    arg_names=("data",),
    type_rel=lambda ts, a: adaptive_rel(OP, ts, a),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"output_size": None, "layout": "NCHW", "out_layout": ""},
    reference=lambda a, x: _run(adaptive_canonical, a, x, out_key="out_layout"),
    gradient=_gradient,
    compute=_adaptive_compute,
    normalize_attrs=lambda a: _normalize(OP, a),
    doc="Average pooling to a fixed output size with possibly overlapping bins.",
))

register(OpDef(
    name=GRAD_OP,
    arg_names=("out_grad", "data"),
    type_rel=grad_rel,
    pattern=OpPattern.OPAQUE,
    attrs={"output_size": None, "layout": "NCHW"},
    reference=lambda a, g, x: _run(adaptive_grad_canonical, a, g, x, out_key="layout"),
    compute=_adaptive_grad_compute,
    normalize_attrs=lambda a: _normalize(GRAD_OP, a),
    doc="Gradient of nn.adaptive_avg_pool2d with respect to its data.",
))
