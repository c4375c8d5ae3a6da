"""2-d pooling: `nn.max_pool2d`, `nn.avg_pool2d`, their gradients (`nn.max_pool2d_grad`,
`nn.avg_pool2d_grad`, Relay's names), `nn.global_avg_pool2d`, `nn.global_max_pool2d`.

Pooling runs in canonical NCHW (any `NCHW`, `NHWC`, `NCHW{x}c` layout is converted, see `layout.py`).
With `ceil_mode` the output extent rounds up, `(in + pads - window + stride - 1) // stride + 1`, and
the last window may hang over the bottom/right edge (a window that would start past the input and
its leading padding is dropped, PyTorch's rule); positions past the padded input are never part of
a window. `avg_pool2d` divides by the number of window positions inside the input, or inside the
explicitly padded input with `count_include_pad`. Adaptive pooling lives in `pool_adaptive.py`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import AnyDim, TensorType, Type
from autorelay.op.layout import (
    check_positive,
    from_canonical_array,
    from_canonical_shape,
    int_tuple,
    pad_tuple,
    parse_layout,
    to_canonical_array,
    to_canonical_shape,
    window_out,
)
from autorelay.op.pool_compute import global_pool_compute, lowest, pool_compute, pool_grad_compute
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, tensor_arg


def normalize_pool_attrs(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    a = dict(attrs)
    for name in ("pool_size", "strides", "dilation"):
        a[name] = int_tuple(op, name, a[name], 2)
        check_positive(op, name, a[name])
    a["padding"] = pad_tuple(op, a["padding"], 2)
    a["ceil_mode"] = bool(a["ceil_mode"])
    return a


def pool_attrs(avg: bool) -> dict[str, Any]:
    a: dict[str, Any] = {"pool_size": (1, 1), "strides": (1, 1), "dilation": (1, 1), "padding": (0, 0),
                         "layout": "NCHW", "out_layout": "", "ceil_mode": False}
    if avg:
        a["count_include_pad"] = False
    return a


def pool_rel(op: str, arg_types: list[Type], attrs: Attrs, index: int = 0) -> TensorType:
    data = tensor_arg(op, arg_types, index, "data")
    lay = parse_layout(op, attrs["layout"], "NCHW", "layout")
    out_lay = parse_layout(op, attrs["out_layout"] or attrs["layout"], "NCHW", "out_layout")
    n, c, h, w = to_canonical_shape(op, data.shape, lay, "NCHW", "data")
    pads = attrs["padding"]
    for ax in range(2):
        span = attrs["dilation"][ax] * (attrs["pool_size"][ax] - 1) + 1
        if max(pads[ax], pads[2 + ax]) >= span:
            raise rel_error(op, f"padding {pads} must be smaller than the window {attrs['pool_size']} "
                                f"(dilation {attrs['dilation']}): a window would see only padding")
    out_sp = [
        window_out(op, size, attrs["pool_size"][ax], attrs["strides"][ax], attrs["dilation"][ax],
                   pads[ax], pads[2 + ax], attrs["ceil_mode"], what=f"data {fmt_shape(data.shape)}")
        for ax, size in enumerate((h, w))
    ]
    return TensorType(from_canonical_shape(op, (n, c, *out_sp), out_lay, "NCHW", "output"), data.dtype)


def grad_rel(op: str, forward: str, arg_types: list[Type], attrs: Attrs) -> TensorType:
    """`nn.*_pool2d_grad(out_grad, data)`: the data's type, once out_grad matches the pool's output."""
    g = tensor_arg(op, arg_types, 0, "out_grad")
    data = tensor_arg(op, arg_types, 1, "data")
    out = pool_rel(forward, arg_types, attrs, index=1)
    if len(g.shape) != len(out.shape) or any(map(dim_known_different, g.shape, out.shape)):
        raise rel_error(op, f"out_grad of shape {fmt_shape(g.shape)} does not match the pooled shape "
                            f"{fmt_shape(out.shape)} of data {fmt_shape(data.shape)}")
    return data


# ---------------------------------------------------------------------------------------------
# canonical NCHW kernels


class _Windows:
    """The padded frame of a pooling: which slices of it each window offset reads."""

    def __init__(self, shape: tuple[int, ...], attrs: Attrs) -> None:
        self.h, self.w = shape[2:]
        self.k, self.s = attrs["pool_size"], attrs["strides"]
        self.d, self.pads = attrs["dilation"], attrs["padding"]
        self.out = tuple(
            window_out("pool", size, self.k[i], self.s[i], self.d[i], self.pads[i], self.pads[2 + i],
                       attrs["ceil_mode"])
            for i, size in enumerate((self.h, self.w))
        )
        # the frame covers explicit padding plus any ceil_mode overhang
        need = [(self.out[i] - 1) * self.s[i] + self.d[i] * (self.k[i] - 1) + 1 for i in range(2)]
        size = (self.h, self.w)
        self.after = [max(need[i] - self.pads[i] - size[i], self.pads[2 + i]) for i in range(2)]

    def pad_spec(self) -> list[tuple[int, int]]:
        return [(0, 0), (0, 0), (self.pads[0], self.after[0]), (self.pads[1], self.after[1])]

    def offsets(self):
        for p, q in itertools.product(range(self.k[0]), range(self.k[1])):
            yield (Ellipsis,
                   slice(p * self.d[0], p * self.d[0] + self.s[0] * (self.out[0] - 1) + 1, self.s[0]),
                   slice(q * self.d[1], q * self.d[1] + self.s[1] * (self.out[1] - 1) + 1, self.s[1]))

    def count(self, include_pad: bool) -> np.ndarray:
        """How many positions of each window are counted by an average (shape OH x OW)."""
        mask = np.zeros((self.pads[0] + self.h + self.after[0], self.pads[1] + self.w + self.after[1]))
        if include_pad:
            mask[: self.pads[0] + self.h + self.pads[2], : self.pads[1] + self.w + self.pads[3]] = 1
        else:
            mask[self.pads[0]: self.pads[0] + self.h, self.pads[1]: self.pads[1] + self.w] = 1
        return sum(mask[sl[1:]] for sl in self.offsets())

    def crop(self, full: np.ndarray) -> np.ndarray:
        return full[..., self.pads[0]: self.pads[0] + self.h, self.pads[1]: self.pads[1] + self.w]


def max_pool_canonical(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    win = _Windows(x.shape, attrs)
    xp = np.pad(x, win.pad_spec(), constant_values=lowest(x.dtype))
    return np.max(np.stack([xp[sl] for sl in win.offsets()]), axis=0)


def avg_pool_canonical(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    win = _Windows(x.shape, attrs)
    xp = np.pad(x.astype(np.float64), win.pad_spec())
    total = sum(xp[sl] for sl in win.offsets())
    count = win.count(attrs["count_include_pad"])
    out = np.where(count > 0, total / np.maximum(count, 1), 0.0)
    return out.astype(x.dtype) if np.issubdtype(x.dtype, np.floating) else np.round(out).astype(x.dtype)


def max_pool_grad_canonical(g: np.ndarray, x: np.ndarray, attrs: Attrs) -> np.ndarray:
    """Each window's gradient goes to its first maximal element."""
    win = _Windows(x.shape, attrs)
    xp = np.pad(x, win.pad_spec(), constant_values=lowest(x.dtype))
    slices = list(win.offsets())
    arg = np.argmax(np.stack([xp[sl] for sl in slices]), axis=0)
    full = np.zeros(xp.shape, dtype=g.dtype)
    for i, sl in enumerate(slices):
        full[sl] += np.where(arg == i, g, 0)
    return win.crop(full)


def avg_pool_grad_canonical(g: np.ndarray, x: np.ndarray, attrs: Attrs) -> np.ndarray:
    win = _Windows(x.shape, attrs)
    count = win.count(attrs["count_include_pad"])
    share = np.where(count > 0, g / np.maximum(count, 1), 0).astype(g.dtype)
    full = np.zeros([a + b + c for a, (b, c) in zip(x.shape, win.pad_spec())], dtype=g.dtype)
    for sl in win.offsets():
        full[sl] += share
    return win.crop(full)


def _in_layout(fn, attrs: Attrs, *arrays: np.ndarray, out_key: str = "out_layout") -> np.ndarray:
    """Run a canonical NCHW kernel on arrays given in `attrs['layout']`; lay the result out again."""
    lay = parse_layout("pool", attrs["layout"], "NCHW")
    out_lay = parse_layout("pool", attrs.get(out_key) or attrs["layout"], "NCHW")
    res = fn(*(to_canonical_array(a, lay, "NCHW") for a in arrays), attrs)
    return np.ascontiguousarray(from_canonical_array(res, out_lay, "NCHW"))


def _pool_gradient(grad_op: str):
    def gradient(c: Call, g: Expr) -> list[Expr]:
        a = dict(c.attrs)
        if a["out_layout"] and a["out_layout"] != a["layout"]:
            raise rel_error(c.op.name, "gradient needs out_layout equal to layout")
        return [call(grad_op, g, c.args[0], **a)]

    return gradient


def windows_inside(attrs: Attrs, in_hw: tuple[int, int], out_hw: tuple[int, int]) -> bool:
    """Whether every window of a pooling with `attrs` (input rows x columns `in_hw`, output
    `out_hw`) lies inside its input: no padding, no dilation, no ceil-mode window hanging over
    the edge. Such a pooling reads no border value, so a tile of its output needs only a band
    of input rows (what a convolution computing that band for it relies on)."""
    if any(attrs["padding"]) or tuple(attrs["dilation"]) != (1, 1):
        return False
    windows = zip(in_hw, out_hw, attrs["pool_size"], attrs["strides"])
    return all((o - 1) * s + k <= i for i, o, k, s in windows)


def windows_tile(pool_size: Sequence[int], strides: Sequence[int], tile: int) -> bool:
    """Whether pooling windows partition a Winograd output tile of `tile` x `tile` pixels: each
    window as large as its stride (no overlap, no gap) and dividing the tile, so a unit of whole
    tile rows pools whole windows and no window spans two tiles. The rule a blocked Winograd
    convolution's pooling epilogue needs, read by the fusion (on op attributes) and by its
    template (on the compute)."""
    return tuple(pool_size) == tuple(strides) and all(tile % s == 0 for s in strides)


for _avg in (False, True):
    _kind = "avg" if _avg else "max"
    _name, _grad_name = f"nn.{_kind}_pool2d", f"nn.{_kind}_pool2d_grad"
    _fwd = avg_pool_canonical if _avg else max_pool_canonical
    _bwd = avg_pool_grad_canonical if _avg else max_pool_grad_canonical
    register(OpDef(
        name=_name,
        arg_names=("data",),
        type_rel=lambda ts, a, _op=_name: pool_rel(_op, ts, a),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        attrs=pool_attrs(_avg),
        reference=lambda a, x, _f=_fwd: _in_layout(_f, a, x),
        gradient=_pool_gradient(_grad_name),
        compute=pool_compute(_avg),
        normalize_attrs=lambda a, _op=_name: normalize_pool_attrs(_op, a),
        doc=f"2-d {_kind} pooling with strides, padding, dilation and ceil_mode.",
    ))
    register(OpDef(
        name=_grad_name,
        arg_names=("out_grad", "data"),
        type_rel=lambda ts, a, _op=_grad_name, _f=_name: grad_rel(_op, _f, ts, a),
        pattern=OpPattern.OPAQUE,
        attrs=pool_attrs(_avg),
        reference=lambda a, g, x, _f=_bwd: _in_layout(_f, a, g, x, out_key="layout"),
        compute=pool_grad_compute(_avg),
        normalize_attrs=lambda a, _op=_grad_name: normalize_pool_attrs(_op, a),
        doc=f"Gradient of nn.{_kind}_pool2d with respect to its data.",
    ))


# ---------------------------------------------------------------------------------------------
# global pooling: a window over the whole image


def global_rel(op: str, arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = tensor_arg(op, arg_types, 0, "data")
    lay = parse_layout(op, attrs["layout"], "NCHW", "layout")
    out_lay = parse_layout(op, attrs["out_layout"] or attrs["layout"], "NCHW", "out_layout")
    n, c, _, _ = to_canonical_shape(op, data.shape, lay, "NCHW", "data")
    return TensorType(from_canonical_shape(op, (n, c, 1, 1), out_lay, "NCHW", "output"), data.dtype)


def _global_gradient(op: str, grad_op: str):
    def gradient(c: Call, g: Expr) -> list[Expr]:
        t = c.args[0].checked_type
        layout = c.attrs["layout"]
        if c.attrs["out_layout"] and c.attrs["out_layout"] != layout:
            raise rel_error(op, "gradient needs out_layout equal to layout")
        _, _, h, w = to_canonical_shape(op, t.shape, parse_layout(op, layout, "NCHW"), "NCHW", "data")
        if isinstance(h, AnyDim) or not isinstance(h, int) or not isinstance(w, int):
            raise rel_error(op, f"gradient needs static spatial extents, got {fmt_shape(t.shape)}")
        return [call(grad_op, g, c.args[0], pool_size=(h, w), layout=layout)]

    return gradient


for _kind, _fn in (("avg", np.mean), ("max", np.max)):
    _name = f"nn.global_{_kind}_pool2d"
    register(OpDef(
        name=_name,
        arg_names=("data",),
        type_rel=lambda ts, a, _op=_name: global_rel(_op, ts, a),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        attrs={"layout": "NCHW", "out_layout": ""},
        reference=lambda a, x, _f=_fn: _in_layout(
            lambda y, _a: _f(y, axis=(2, 3), keepdims=True).astype(y.dtype), a, x),
        gradient=_global_gradient(_name, f"nn.{_kind}_pool2d_grad"),
        compute=global_pool_compute(_kind),
        doc=f"{_kind} over the whole spatial extent: (N, C, H, W) -> (N, C, 1, 1).",
    ))
