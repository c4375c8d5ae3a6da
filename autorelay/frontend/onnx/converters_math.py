"""Elementwise, activation, softmax, reduction and cast converters.

ONNX binary ops broadcast NumPy-style, as the IR's do; the IR does not promote dtypes, so the few
ONNX ops that mix them (`Pow`, `PRelu` on ints) cast explicitly.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import (
    ONNX_DTYPES,
    Converter,
    GraphBuilder,
    NodeView,
    normalize_axis,
    registrar,
    required_input,
)
from autorelay.frontend.onnx.converters_dynamic import dyn_reduce, is_runtime
from autorelay.ir.expr import Expr

TABLE: dict[str, Converter] = {}
_x = required_input
_reg = registrar(TABLE)

_UNARY = {
    "Relu": "nn.relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Log": "log",
    "Neg": "negative",
    "Abs": "abs",
    "Floor": "floor",
    "Ceil": "ceil",
    "Erf": "erf",
    "BitwiseNot": "bitwise_not",
}
_BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}


def _unary(g: GraphBuilder, node: NodeView) -> Expr:
    return g.call(_UNARY[node.op_type], _x(node))


def _identity(g: GraphBuilder, node: NodeView) -> Expr:
    return _x(node)  # the output name simply refers to the same value


def _binary(g: GraphBuilder, node: NodeView) -> Expr:
    a, b = _x(node, 0), _x(node, 1)
    if node.opset < 7 and node.attr("broadcast", 0) and node.attr("axis") is not None:
        raise node.fail("legacy axis-broadcasting (opset < 7) is not supported")
    return g.call(_BINARY[node.op_type], a, b)


for _n in _UNARY:
    TABLE[_n] = _unary
TABLE["Identity"] = _identity
for _n in _BINARY:
    TABLE[_n] = _binary


@_reg("BitShift")
def _bit_shift(g: GraphBuilder, node: NodeView) -> Expr:
    """BitShift (unsigned types): `direction` LEFT or RIGHT, the count per element of Y."""
    direction = node.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise node.fail(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return g.call("left_shift" if direction == "LEFT" else "right_shift", _x(node, 0), _x(node, 1))


@_reg("Pow")
def _pow(g: GraphBuilder, node: NodeView) -> Expr:
    x, y = _x(node, 0), _x(node, 1)
    dx, dy = g.dtype(x), g.dtype(y)
    if dx == dy and dx.startswith("float"):
        return g.call("power", x, y)
    # ONNX allows mixed types; the result has the base's type. Compute in float64, cast back.
    work = dx if dx.startswith("float") else "float64"
    xf = x if dx == work else g.call("cast", x, dtype=work)
    yf = y if dy == work else g.call("cast", y, dtype=work)
    out = g.call("power", xf, yf)
    return out if work == dx else g.call("cast", out, dtype=dx)


@_reg("Where")
def _where(g: GraphBuilder, node: NodeView) -> Expr:
    return g.call("where", _x(node, 0), _x(node, 1), _x(node, 2))


@_reg("Cast", "BitCast")
def _cast(g: GraphBuilder, node: NodeView) -> Expr:
    """Cast converts each value; BitCast reads each element's bits as the other type
    (`reinterpret`)."""
    to = node.attr("to")
    if to not in ONNX_DTYPES:
        raise node.fail(
            f"{node.op_type} to ONNX element type {to} is not supported (AutoRelay holds "
            f"{', '.join(sorted(set(ONNX_DTYPES.values())))})"
        )
    x = _x(node)
    if ONNX_DTYPES[to] == g.dtype(x):
        return x
    return g.call("cast" if node.op_type == "Cast" else "reinterpret", x, dtype=ONNX_DTYPES[to])


# ---- activations ---------------------------------------------------------------------------


@_reg("LeakyRelu")
def _leaky_relu(g: GraphBuilder, node: NodeView) -> Expr:
    return g.call("nn.leaky_relu", _x(node), alpha=float(node.attr("alpha", 0.01)))


@_reg("PRelu")
def _prelu(g: GraphBuilder, node: NodeView) -> Expr:
    # slope broadcasts unidirectionally against x (any shape), so write x<0 ? slope*x : x directly
    x, slope = _x(node, 0), _x(node, 1)
    neg = g.call("less", x, g.scalar(0, x))
    return g.call("where", neg, g.call("multiply", x, slope), x)


@_reg("HardSigmoid")
def _hard_sigmoid(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    y = g.call("add", g.call("multiply", x, g.scalar(alpha, x)), g.scalar(beta, x))
    return g.call("clip", y, a_min=0.0, a_max=1.0)


@_reg("Clip")
def _clip(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
        lo_e = None if lo is None else g.scalar(lo, x)
        hi_e = None if hi is None else g.scalar(hi, x)
    else:
        lo_e, hi_e = node.input(1), node.input(2)
    lo_v, hi_v = g.value_or_none(lo_e), g.value_or_none(hi_e)
    dt = g.dtype(x)
    if dt.startswith("float") and (lo_e is None or lo_v is not None) and (hi_e is None or hi_v is not None):
        a_min = float(lo_v) if lo_v is not None else float(np.finfo(dt).min)
        a_max = float(hi_v) if hi_v is not None else float(np.finfo(dt).max)
        if a_min <= a_max:
            return g.call("clip", x, a_min=a_min, a_max=a_max)
    # ONNX: min(max(x, lo), hi), which is hi everywhere when lo > hi
    if lo_e is not None:
        x = g.call("maximum", x, lo_e)
    if hi_e is not None:
        x = g.call("minimum", x, hi_e)
    return x


@_reg("Softmax", "LogSoftmax")
def _softmax(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    op = "nn.softmax" if node.op_type == "Softmax" else "nn.log_softmax"
    ndim = g.ndim(x)
    if node.opset >= 13:
        return g.call(op, x, axis=normalize_axis(g, node.attr("axis", -1), ndim))
    # before opset 13 the input is coerced to 2-d at `axis` and normalised over the flattened tail
    axis = normalize_axis(g, node.attr("axis", 1), ndim)
    if axis == ndim - 1:
        return g.call(op, x, axis=-1)
    shape = g.static_shape(x)
    flat = g.call("reshape", x, newshape=(int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
    return g.call("reshape", g.call(op, flat, axis=-1), newshape=shape)


# ---- reductions ----------------------------------------------------------------------------

_REDUCE = {
    "ReduceSum": "sum",
    "ReduceMean": "mean",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
}


@_reg(*_REDUCE)
def _reduce(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    axes_as_input = node.opset >= (13 if node.op_type == "ReduceSum" else 18)
    keep = bool(node.attr("keepdims", 1))
    if axes_as_input and is_runtime(g, node.input(1)):
        op = _REDUCE[node.op_type]
        if g.dtype(x) == "bool" and node.op_type in ("ReduceMax", "ReduceMin"):
            op = "any" if node.op_type == "ReduceMax" else "all"
        return dyn_reduce(g, node, x, _x(node, 1), op, keep)
    if axes_as_input:
        axes = g.ints(node.input(1), "axes") if node.input(1) is not None else []
    else:
        axes = list(node.attr("axes", []))
    if not axes:
        if axes_as_input and node.attr("noop_with_empty_axes", 0):
            return x
        axis = None
    else:
        ndim = g.ndim(x)
        axis = sorted({normalize_axis(g, a, ndim, "axes") for a in axes})
    shape = g.shape(x)
    reduced = range(len(shape)) if axis is None else axis
    if node.op_type in ("ReduceMax", "ReduceMin") and any(shape[a] == 0 for a in reduced):
        # ONNX: the max (min) of an empty set is the lowest (highest) value of the type
        dt = np.dtype(g.dtype(x))
        info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
        fill = (
            (-np.inf if node.op_type == "ReduceMax" else np.inf)
            if dt.kind == "f"
            else (info.min if node.op_type == "ReduceMax" else info.max)
        )
        out = [1 if i in reduced else d for i, d in enumerate(g.static_shape(x)) if keep or i not in reduced]
        return g.const(np.full(out, fill, dtype=dt))
    if g.dtype(x) == "bool" and node.op_type in ("ReduceMax", "ReduceMin"):
        # logical any / all over the axes
        return g.call("any" if node.op_type == "ReduceMax" else "all", x, axis=axis, keepdims=keep)
    return g.call(_REDUCE[node.op_type], x, axis=axis, keepdims=keep)
