"""Further elementwise ops common in exported CNNs and transformers: activations without an IR op
of their own (Gelu, Elu, Selu, Softplus, HardSwish, Mish, Swish, Shrink …) written as compositions,
trigonometry (the inverse and hyperbolic functions composed from exp, log, sqrt and atan), logic,
variadic Sum/Mean/Max/Min, Mod, CastLike, ArgMax/ArgMin, CumSum, CumProd, Tile, Size.
"""

from __future__ import annotations

import math

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, normalize_axis, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)

_SIMPLE = {
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Atan": "atan",
    "Sign": "sign",
    "Round": "round",
    "Not": "logical_not",
    "IsNaN": "isnan",
}
_LOGIC = {"And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}
_VARIADIC = {"Sum": "add", "Max": "maximum", "Min": "minimum", "Mean": "add"}


def _simple(g: GraphBuilder, node: NodeView) -> Expr:
    return g.call(_SIMPLE[node.op_type], _x(node))


def _logic(g: GraphBuilder, node: NodeView) -> Expr:
    return g.call(_LOGIC[node.op_type], _x(node, 0), _x(node, 1))


def _variadic(g: GraphBuilder, node: NodeView) -> Expr:
    parts = [e for e in node.inputs if e is not None]
    acc = parts[0]
    for p in parts[1:]:
        acc = g.call(_VARIADIC[node.op_type], acc, p)
    if node.op_type == "Mean":
        acc = g.call("divide", acc, g.scalar(len(parts), acc))
    return acc


TABLE.update({k: _simple for k in _SIMPLE} | {k: _logic for k in _LOGIC} | {k: _variadic for k in _VARIADIC})


@_reg("Reciprocal")
def _reciprocal(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    return g.call("divide", g.scalar(1.0, x), x)


@_reg("IsInf")
def _isinf(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    inf = g.call("isinf", x)
    if pos and neg:
        return inf
    if not (pos or neg):
        return g.call("zeros_like", g.call("cast", x, dtype="bool"))
    side = g.call("greater" if pos else "less", x, g.scalar(0, x))
    return g.call("logical_and", inf, side)


@_reg("Mod")
def _mod(g: GraphBuilder, node: NodeView) -> Expr:
    # fmod=1: the sign of the dividend (C fmod); fmod=0: the sign of the divisor (Python %)
    return g.call("mod" if node.attr("fmod", 0) else "floor_mod", _x(node, 0), _x(node, 1))


@_reg("CastLike")
def _cast_like(g: GraphBuilder, node: NodeView) -> Expr:
    x, like = _x(node, 0), _x(node, 1)
    return x if g.dtype(x) == g.dtype(like) else g.call("cast", x, dtype=g.dtype(like))


# ---- activations as compositions -------------------------------------------------------------


def _mul(g: GraphBuilder, x: Expr, v: float) -> Expr:
    return g.call("multiply", x, g.scalar(v, x))


def _add(g: GraphBuilder, x: Expr, v: float) -> Expr:
    return g.call("add", x, g.scalar(v, x))


def _elu(g: GraphBuilder, x: Expr, alpha: float) -> Expr:
    neg = _mul(g, _add(g, g.call("exp", x), -1.0), alpha)
    return g.call("where", g.call("greater", x, g.scalar(0, x)), x, neg)


@_reg("Elu")
def _elu_node(g: GraphBuilder, node: NodeView) -> Expr:
    return _elu(g, _x(node), float(node.attr("alpha", 1.0)))


@_reg("Celu")
def _celu(g: GraphBuilder, node: NodeView) -> Expr:
    x, alpha = _x(node), float(node.attr("alpha", 1.0))
    neg = _mul(g, _add(g, g.call("exp", _mul(g, x, 1.0 / alpha)), -1.0), alpha)
    return g.call("add", g.call("nn.relu", x), g.call("minimum", g.scalar(0, x), neg))


@_reg("Selu")
def _selu(g: GraphBuilder, node: NodeView) -> Expr:
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return _mul(g, _elu(g, _x(node), alpha), gamma)


@_reg("ThresholdedRelu")
def _thresholded_relu(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    keep = g.call("greater", x, g.scalar(float(node.attr("alpha", 1.0)), x))
    return g.call("where", keep, x, g.call("zeros_like", x))


@_reg("Softplus")
def _softplus(g: GraphBuilder, node: NodeView) -> Expr:
    # log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)): no overflow for large x
    x = _x(node)
    tail = g.call("log", _add(g, g.call("exp", g.call("negative", g.call("abs", x))), 1.0))
    return g.call("add", g.call("nn.relu", x), tail)


@_reg("Softsign")
def _softsign(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    return g.call("divide", x, _add(g, g.call("abs", x), 1.0))


@_reg("HardSwish")
def _hard_swish(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    return g.call("multiply", x, g.call("clip", _add(g, _mul(g, x, 1 / 6), 0.5), a_min=0.0, a_max=1.0))


@_reg("Mish")
def _mish(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    sp = g.call(
        "add",
        g.call("nn.relu", x),
        g.call("log", _add(g, g.call("exp", g.call("negative", g.call("abs", x))), 1.0)),
    )
    return g.call("multiply", x, g.call("tanh", sp))


@_reg("Gelu")
def _gelu(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    if node.attr("approximate", "none") == "tanh":
        inner = _mul(
            g,
            g.call("add", x, _mul(g, g.call("power", x, g.scalar(3.0, x)), 0.044715)),
            math.sqrt(2 / math.pi),
        )
        return g.call("multiply", _mul(g, x, 0.5), _add(g, g.call("tanh", inner), 1.0))
    return g.call("multiply", _mul(g, x, 0.5), _add(g, g.call("erf", _mul(g, x, 1 / math.sqrt(2))), 1.0))


@_reg("Swish")
def _swish(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    return g.call("multiply", x, g.call("sigmoid", _mul(g, x, float(node.attr("alpha", 1.0)))))


@_reg("Shrink")
def _shrink(g: GraphBuilder, node: NodeView) -> Expr:
    x, lambd, bias = _x(node), float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))
    low = g.call("where", g.call("less", x, g.scalar(-lambd, x)), _add(g, x, bias), g.call("zeros_like", x))
    return g.call("where", g.call("greater", x, g.scalar(lambd, x)), _add(g, x, -bias), low)


# ---- inverse and hyperbolic trigonometry as compositions ---------------------------------------


def _sqrt_of(g: GraphBuilder, x: Expr, sign: float, c: float) -> Expr:
    """sqrt(sign * x^2 + c)."""
    return g.call("sqrt", _add(g, _mul(g, g.call("multiply", x, x), sign), c))


@_reg("Sinh", "Cosh")
def _sinh_cosh(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    both = g.call("add" if node.op_type == "Cosh" else "subtract", g.call("exp", x),
                  g.call("exp", g.call("negative", x)))
    return _mul(g, both, 0.5)


@_reg("Asinh")
def _asinh(g: GraphBuilder, node: NodeView) -> Expr:
    # sign(x) * log(|x| + sqrt(x^2 + 1)): no cancellation for large negative x
    x = _x(node)
    a = g.call("abs", x)
    return g.call("multiply", g.call("sign", x), g.call("log", g.call("add", a, _sqrt_of(g, a, 1.0, 1.0))))


@_reg("Acosh")
def _acosh(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    return g.call("log", g.call("add", x, _sqrt_of(g, x, 1.0, -1.0)))


@_reg("Atanh")
def _atanh(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    ratio = g.call("divide", _add(g, x, 1.0), _add(g, g.call("negative", x), 1.0))
    return _mul(g, g.call("log", ratio), 0.5)


@_reg("Asin")
def _asin(g: GraphBuilder, node: NodeView) -> Expr:
    # atan(x / sqrt(1 - x^2)); at |x| = 1 the quotient is infinite and atan gives +-pi/2
    x = _x(node)
    return g.call("atan", g.call("divide", x, _sqrt_of(g, x, -1.0, 1.0)))


@_reg("Acos")
def _acos(g: GraphBuilder, node: NodeView) -> Expr:
    # 2 atan(sqrt((1 - x) / (1 + x))): accurate near x = 1, where pi/2 - asin(x) cancels
    x = _x(node)
    ratio = g.call("divide", _add(g, g.call("negative", x), 1.0), _add(g, x, 1.0))
    return _mul(g, g.call("atan", g.call("sqrt", ratio)), 2.0)


# ---- indexing-style ops ----------------------------------------------------------------------


@_reg("ArgMax")
def _argmax(g: GraphBuilder, node: NodeView) -> Expr:
    return _arg(g, node, "argmax")


@_reg("ArgMin")
def _argmin(g: GraphBuilder, node: NodeView) -> Expr:
    return _arg(g, node, "argmin")


def _arg(g: GraphBuilder, node: NodeView, op: str) -> Expr:
    x = _x(node)
    axis = normalize_axis(g, node.attr("axis", 0), g.ndim(x))
    y = g.call(
        op,
        x,
        axis=[axis],
        keepdims=bool(node.attr("keepdims", 1)),
        select_last_index=bool(node.attr("select_last_index", 0)),
    )
    return g.call("cast", y, dtype="int64")  # ONNX returns int64 indices


@_reg("CumSum")
def _cumsum(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    axis = normalize_axis(g, int(np.asarray(g.value(_x(node, 1), "axis")).reshape(())), g.ndim(x))
    rev = bool(node.attr("reverse", 0))
    if rev:
        x = g.call("reverse", x, axis=axis)
    y = g.call("cumsum", x, axis=axis, exclusive=bool(node.attr("exclusive", 0)))
    return g.call("reverse", y, axis=axis) if rev else y


@_reg("CumProd")
def _cumprod(g: GraphBuilder, node: NodeView) -> Expr:
    """A product over a triangular mask: y[.., i, ..] = prod over k of (k <= i ? x[.., k, ..] : 1), a
    `prod` reduction of the masked broadcast. Quadratic in the axis length, as `cumsum`'s compute,
    and differentiable through `prod` (zeros included)."""
    x = _x(node)
    ndim = g.ndim(x)
    axis = normalize_axis(g, int(np.asarray(g.value(_x(node, 1), "axis")).reshape(())), ndim)
    n = g.static_shape(x)[axis]
    rev = bool(node.attr("reverse", 0))
    if rev:
        x = g.call("reverse", x, axis=axis)
    below = np.tri(n, n, -1 if node.attr("exclusive", 0) else 0, dtype=bool)  # [i, k]: k <= i (k < i)
    mask = g.const(below.reshape((n, n) + (1,) * (ndim - 1 - axis)), "bool")
    spread = g.call("expand_dims", x, axis=axis)  # [.., 1 (i), n (k), ..]
    y = g.call("prod", g.call("where", mask, spread, g.scalar(1, x)), axis=[axis + 1], keepdims=False)
    return g.call("reverse", y, axis=axis) if rev else y


@_reg("Tile")
def _tile(g: GraphBuilder, node: NodeView) -> Expr:
    return g.call("tile", _x(node), reps=tuple(g.ints(_x(node, 1), "repeats")))


@_reg("Size")
def _size(g: GraphBuilder, node: NodeView) -> Expr:
    return g.const(np.array(int(np.prod(g.static_shape(_x(node)))), dtype="int64"))
