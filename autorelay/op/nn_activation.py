"""Activations and losses: `nn.softmax`, `nn.log_softmax`, `nn.relu`, `nn.leaky_relu`, `nn.prelu`,
`nn.cross_entropy`.

References are numerically stable (softmax subtracts the row maximum). Gradients reuse the forward
call's value where the derivative is a function of the output (softmax: `y * (g - sum(g * y))`),
which is the form Relay's AD uses and which needs no recomputation after common-subexpression
elimination.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.nn import along_axis, attrs_axis, channel_vectors, mul, scalar, static_shape, sum_except
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, normalize_axis, tensor_arg
from autorelay.te import expr as E
from autorelay.te import nn as tnn
from autorelay.te import tensor as te

FLOATS = ("float16", "float32", "float64")


def float_arg(op: str, arg_types: list[Type], index: int, name: str) -> TensorType:
    t = tensor_arg(op, arg_types, index, name)
    if t.dtype not in FLOATS:
        raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must have a float dtype, got {t.dtype}")
    return t


def _axis_rel(op: str):
    def rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
        t = float_arg(op, arg_types, 0, "data")
        normalize_axis(op, attrs["axis"], len(t.shape))
        return t

    return rel


def _softmax_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    z = x - np.max(x, axis=attrs["axis"], keepdims=True)
    e = np.exp(z)
    return (e / np.sum(e, axis=attrs["axis"], keepdims=True)).astype(x.dtype)


def _log_softmax_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    z = x - np.max(x, axis=attrs["axis"], keepdims=True)
    return (z - np.log(np.sum(np.exp(z), axis=attrs["axis"], keepdims=True))).astype(x.dtype)


def _softmax_grad(c: Call, g: Expr) -> list[Expr]:
    axis = attrs_axis(c, len(c.args[0].checked_type.shape))
    dot = call("sum", mul(g, c), axis=[axis], keepdims=True)
    return [mul(c, call("subtract", g, dot))]


def _log_softmax_grad(c: Call, g: Expr) -> list[Expr]:
    axis = attrs_axis(c, len(c.args[0].checked_type.shape))
    total = call("sum", g, axis=[axis], keepdims=True)
    return [call("subtract", g, mul(call("exp", c), total))]


def _row_stats(x: te.Tensor, axis: int) -> tuple[te.Tensor, te.Tensor]:
    """Max and sum of exp(x - max) over `axis` (kept as extent 1): the stable softmax statistics."""
    shape = list(x.shape)
    shape[axis] = 1
    stat_t = TensorType(tuple(shape), x.dtype)
    mx = tc.reduction(x, "max", [axis], True, stat_t, name="row_max")
    ex = tc.reduction(x, "sum", [axis], True, stat_t, body=lambda v, i: E.call("exp", v - mx[i]),
                      name="row_sum")
    return mx, ex


def _softmax_compute(log: bool):
    def compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
        x = inputs[0]
        tc.check_dtypes([x], ("float32", "float64"))
        axis = attrs["axis"] % x.ndim
        if axis == x.ndim - 1 and not log:
            return tnn.softmax(x)  # the row-statistics form the reduction template schedules well
        mx, ex = _row_stats(x, axis)

        def at(i: tuple) -> tuple:
            return tuple(0 if d == axis else v for d, v in enumerate(i))

        if log:
            return te.compute(x.shape, lambda *i: x[i] - mx[at(i)] - E.call("log", ex[at(i)]),
                              name="log_softmax")
        return te.compute(x.shape, lambda *i: E.call("exp", x[i] - mx[at(i)]) / ex[at(i)], name="softmax")

    return compute


for _name, _ref, _grad in (("nn.softmax", _softmax_ref, _softmax_grad),
                           ("nn.log_softmax", _log_softmax_ref, _log_softmax_grad)):
    register(OpDef(
        name=_name,
        arg_names=("data",),
        type_rel=_axis_rel(_name),
        pattern=OpPattern.OPAQUE,
        attrs={"axis": -1},
        reference=_ref,
        gradient=_grad,
        compute=_softmax_compute(_name == "nn.log_softmax"),
        doc=f"{_name.split('.')[1]} along `axis`.",
    ))


def _positive(x: Expr) -> Expr:
    return call("greater", x, scalar(x, 0.0))


register(OpDef(
    name="nn.relu",
    arg_names=("data",),
    type_rel=lambda ts, a: tensor_arg("nn.relu", ts, 0, "data"),
    pattern=OpPattern.ELEMWISE,
    reference=lambda a, x: np.maximum(x, np.zeros((), x.dtype)),
    gradient=lambda c, g: [call("where", _positive(c.args[0]), g, call("zeros_like", g))],
    compute=tc.unary(lambda x: E.maximum(x, E.const(0, x.dtype))),
    doc="max(x, 0).",
))

register(OpDef(
    name="nn.leaky_relu",
    arg_names=("data",),
    type_rel=lambda ts, a: float_arg("nn.leaky_relu", ts, 0, "data"),
    pattern=OpPattern.ELEMWISE,
    attrs={"alpha": 0.01},
    reference=lambda a, x: np.where(x > 0, x, x * np.asarray(a["alpha"], x.dtype)).astype(x.dtype),
    gradient=lambda c, g: [call("where", _positive(c.args[0]), g, mul(g, scalar(g, c.attrs["alpha"])))],
    compute=lambda ins, a, t: tc.bcast_map(
        lambda x: E.select(x > E.const(0, x.dtype), x, x * E.const(a["alpha"], x.dtype)), ins, t,
        "leaky_relu"),
    doc="x if x > 0 else alpha * x.",
))


def _prelu_rel(arg_types: list[Type], attrs: Attrs) -> Any:
    op = "nn.prelu"
    data = float_arg(op, arg_types, 0, "data")
    axis = normalize_axis(op, attrs["axis"], len(data.shape))
    refined = channel_vectors(op, arg_types, {1: "alpha"}, data, axis)
    return (refined, data) if refined else data


def _prelu_ref(attrs: Attrs, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    axis = attrs["axis"] % x.ndim
    a = alpha.reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return np.where(x > 0, x, x * a).astype(x.dtype)


def _prelu_grad(c: Call, g: Expr) -> list[Expr]:
    x, alpha = c.args
    ndim = len(static_shape("nn.prelu", x))
    axis = attrs_axis(c, ndim)
    pos = _positive(x)
    zeros = call("zeros_like", g)
    dx = call("where", pos, g, mul(g, along_axis(alpha, axis, ndim)))
    dalpha = sum_except(call("where", pos, zeros, mul(g, x)), axis)
    return [dx, dalpha]


register(OpDef(
    name="nn.prelu",
    arg_names=("data", "alpha"),
    type_rel=_prelu_rel,
    pattern=OpPattern.BROADCAST,
    attrs={"axis": 1},
    reference=_prelu_ref,
    gradient=_prelu_grad,
    compute=lambda ins, a, t: tc.compute0(tc.out_shape(t), lambda *i: E.select(
        ins[0][i] > E.const(0, ins[0].dtype), ins[0][i], ins[0][i] * ins[1][i[a["axis"] % len(i)]]), "prelu"),
    doc="Leaky relu with a learned slope per channel of `axis`.",
))


def _cross_entropy_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "nn.cross_entropy"
    p = float_arg(op, arg_types, 0, "predictions")
    t = tensor_arg(op, arg_types, 1, "targets")
    if len(p.shape) != 2:
        raise rel_error(op, f"predictions of shape {fmt_shape(p.shape)} must be 2-d (batch, classes)")
    if len(t.shape) != 2 or any(map(dim_known_different, p.shape, t.shape)):
        raise rel_error(op, f"targets of shape {fmt_shape(t.shape)} must match predictions of shape "
                            f"{fmt_shape(p.shape)}")
    if t.dtype != p.dtype:
        raise rel_error(op, f"targets have dtype {t.dtype} but predictions have dtype {p.dtype}")
    return TensorType((), p.dtype)


def _cross_entropy_ref(attrs: Attrs, p: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.asarray(-np.sum(t * np.log(p)) / p.shape[0], dtype=p.dtype)


def _cross_entropy_grad(c: Call, g: Expr) -> list[Expr]:
    p, t = c.args
    batch = static_shape("nn.cross_entropy", p)[0]
    scale = mul(g, scalar(p, -1.0 / batch))  # d/dp of -sum(t log p)/batch, times the scalar g
    return [mul(scale, call("divide", t, p)), mul(scale, call("log", p))]


def _cross_entropy_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """A scalar: the sum of t * log(p) over both axes, scaled by -1 / batch."""
    p, t = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    rb, rk = te.reduce_axis(p.shape[0], "rb"), te.reduce_axis(p.shape[1], "rk")
    total = te.compute((1,), lambda i0: te.sum(E.call("log", p[rb, rk]) * t[rb, rk], [rb, rk]),
                       name="xent_sum", tag="reduce")
    return te.compute((), lambda: total[0] * E.const(-1.0 / p.shape[0], p.dtype), name="cross_entropy")


register(OpDef(
    name="nn.cross_entropy",
    compute=_cross_entropy_compute,
    arg_names=("predictions", "targets"),
    type_rel=_cross_entropy_rel,
    pattern=OpPattern.OPAQUE,
    reference=_cross_entropy_ref,
    gradient=_cross_entropy_grad,
    doc="-sum(targets * log(predictions)) / batch, a scalar (Relay's definition).",
))
