"""Normalisations beyond BatchNormalization: LayerNormalization, InstanceNormalization,
GroupNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization, LRN, and the
composite reductions ReduceL1/L2/LogSum/LogSumExp/SumSquare.

LayerNormalization over the last axis maps to `nn.layer_norm`; over several trailing axes (and
InstanceNormalization over the spatial axes) it is written with `mean` and `variance`.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, normalize_axis, registrar, required_input
from autorelay.frontend.onnx.converters_dynamic import dyn_reduce, is_runtime
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _normalise(g: GraphBuilder, x: Expr, axes: list[int], eps: float) -> Expr:
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("variance", x, mean, axis=axes, keepdims=True)
    inv = g.call("rsqrt", g.call("add", var, g.scalar(eps, var)))
    return g.call("multiply", g.call("subtract", x, mean), inv)


def _per_channel(g: GraphBuilder, y: Expr, scale: Expr, bias: Expr) -> Expr:
    """`y * scale + bias` with one scale and bias per channel (axis 1 of an N, C, ... tensor)."""
    scale, bias = (g.call("expand_dims", v, axis=1, num_newaxis=g.ndim(y) - 2) for v in (scale, bias))
    return g.call("add", g.call("multiply", y, scale), bias)


@_reg("LayerNormalization")
def _layer_norm(g: GraphBuilder, node: NodeView) -> Expr | list[Expr | None]:
    x, scale, bias = _x(node, 0), _x(node, 1), node.input(2)
    if node.attr("stash_type", 1) != 1:
        raise node.fail("stash_type other than float32 is not supported")
    ndim = g.ndim(x)
    axis = normalize_axis(g, node.attr("axis", -1), ndim)
    eps = float(node.attr("epsilon", 1e-5))
    stats = node.num_outputs > 1 and any(node.output_names[1:])
    if not stats and axis == ndim - 1 and g.ndim(scale) == 1 and (bias is None or g.ndim(bias) == 1):
        beta = g.call("zeros_like", scale) if bias is None else bias
        return g.call("nn.layer_norm", x, scale, beta, axis=-1, epsilon=eps, center=bias is not None)
    axes = list(range(axis, ndim))
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("variance", x, mean, axis=axes, keepdims=True)
    inv = g.call("rsqrt", g.call("add", var, g.scalar(eps, var)))
    y = g.call("multiply", g.call("multiply", g.call("subtract", x, mean), inv), scale)
    y = y if bias is None else g.call("add", y, bias)
    return [y, mean, inv]


@_reg("InstanceNormalization")
def _instance_norm(g: GraphBuilder, node: NodeView) -> Expr:
    x, scale, bias = _x(node, 0), _x(node, 1), _x(node, 2)
    ndim = g.ndim(x)
    y = _normalise(g, x, list(range(2, ndim)), float(node.attr("epsilon", 1e-5)))
    return _per_channel(g, y, scale, bias)


@_reg("GroupNormalization")
def _group_norm(g: GraphBuilder, node: NodeView) -> Expr:
    """Each group of channels normalised over its channels and pixels, then scaled per channel
    (opset 21) or per group (opset 18, whose scale and bias hold one value per group)."""
    x, scale, bias = _x(node, 0), _x(node, 1), _x(node, 2)
    shape, groups = g.static_shape(x), int(node.attr("num_groups"))
    if len(shape) < 2 or groups < 1 or shape[1] % groups:
        raise node.fail(f"{groups} groups do not divide the channels of an input of shape {shape}")
    grouped = g.call("reshape", x, newshape=(shape[0], groups, -1))
    y = g.call("reshape", _normalise(g, grouped, [2], float(node.attr("epsilon", 1e-5))), newshape=shape)
    if g.shape(scale)[0] != shape[1]:  # one value per group: repeat it for the group's channels
        scale, bias = (g.call("repeat", v, repeats=shape[1] // groups, axis=0) for v in (scale, bias))
    return _per_channel(g, y, scale, bias)


@_reg("RMSNormalization")
def _rms_norm(g: GraphBuilder, node: NodeView) -> Expr:
    x, scale = _x(node, 0), _x(node, 1)
    if node.attr("stash_type", 1) != 1:
        raise node.fail("stash_type other than float32 is not supported")
    axes = list(range(normalize_axis(g, node.attr("axis", -1), g.ndim(x)), g.ndim(x)))
    ms = g.call("mean", g.call("multiply", x, x), axis=axes, keepdims=True)
    inv = g.call("rsqrt", g.call("add", ms, g.scalar(float(node.attr("epsilon", 1e-5)), ms)))
    return g.call("multiply", g.call("multiply", x, inv), scale)


@_reg("MeanVarianceNormalization")
def _mean_variance_norm(g: GraphBuilder, node: NodeView) -> Expr:
    # ONNX's definition: (x - mean) / (sqrt(E[x^2] - E[x]^2) + 1e-9)
    x = _x(node)
    axes = sorted({normalize_axis(g, a, g.ndim(x), "axes") for a in node.attr("axes", [0, 2, 3])})
    mean = g.call("mean", x, axis=axes, keepdims=True)
    var = g.call("subtract", g.call("mean", g.call("multiply", x, x), axis=axes, keepdims=True),
                 g.call("multiply", mean, mean))
    std = g.call("add", g.call("sqrt", var), g.scalar(1e-9, var))
    return g.call("divide", g.call("subtract", x, mean), std)


@_reg("LpNormalization")
def _lp_norm(g: GraphBuilder, node: NodeView) -> Expr:
    x, p = _x(node), int(node.attr("p", 2))
    axis = normalize_axis(g, node.attr("axis", -1), g.ndim(x))
    if p == 1:
        norm = g.call("sum", g.call("abs", x), axis=[axis], keepdims=True)
    elif p == 2:
        norm = g.call("sqrt", g.call("sum", g.call("multiply", x, x), axis=[axis], keepdims=True))
    else:
        raise node.fail(f"p must be 1 or 2, got {p}")
    # a zero vector stays zero (ONNX's reference and ONNX Runtime), not 0/0
    zero = g.call("equal", norm, g.scalar(0, norm))
    return g.call("where", zero, g.call("zeros_like", x), g.call("divide", x, norm))


@_reg("LRN")
def _lrn(g: GraphBuilder, node: NodeView) -> Expr:
    size = int(node.attr("size"))
    return g.call(
        "nn.lrn",
        _x(node),
        size=size,
        axis=1,
        bias=float(node.attr("bias", 1.0)),
        alpha=float(node.attr("alpha", 1e-4)),
        beta=float(node.attr("beta", 0.75)),
    )


@_reg("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def _composite_reduce(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    if node.opset >= 18 and is_runtime(g, node.input(1)):
        return _runtime_axes_reduce(g, node, x)
    if node.opset >= 18:
        axes = g.ints(node.input(1), "axes") if node.input(1) is not None else []
    else:
        axes = list(node.attr("axes", []))
    keep = bool(node.attr("keepdims", 1))
    if not axes and node.opset >= 18 and node.attr("noop_with_empty_axes", 0):
        axis = None
        if node.op_type in ("ReduceL1", "ReduceL2"):
            return g.call("abs", x)
        if node.op_type == "ReduceSumSquare":
            return g.call("multiply", x, x)
        return g.call("log", x) if node.op_type == "ReduceLogSum" else x
    axis = None if not axes else sorted({normalize_axis(g, a, g.ndim(x), "axes") for a in axes})
    op = node.op_type
    if op == "ReduceL1":
        return g.call("sum", g.call("abs", x), axis=axis, keepdims=keep)
    if op == "ReduceSumSquare":
        return g.call("sum", g.call("multiply", x, x), axis=axis, keepdims=keep)
    if op == "ReduceL2":
        return g.call("sqrt", g.call("sum", g.call("multiply", x, x), axis=axis, keepdims=keep))
    if op == "ReduceLogSum":
        return g.call("log", g.call("sum", x, axis=axis, keepdims=keep))
    # log-sum-exp, shifted by the maximum so large inputs do not overflow
    shape = g.static_shape(x)
    reduced = range(len(shape)) if axis is None else axis
    if any(shape[a] == 0 for a in reduced):  # log(sum of nothing) = log(0)
        out = [1 if i in reduced else d for i, d in enumerate(shape) if keep or i not in reduced]
        return g.const(np.full(out, -np.inf, dtype=g.dtype(x)))
    m = g.call("max", x, axis=axis, keepdims=True)
    s = g.call("sum", g.call("exp", g.call("subtract", x, m)), axis=axis, keepdims=keep)
    m_out = m if keep else g.call("reshape", m, newshape=g.shape(s) or ())
    return g.call("add", g.call("log", s), m_out)


def _runtime_axes_reduce(g: GraphBuilder, node: NodeView, x: Expr) -> Expr:
    """The composite reductions over run-time axes: elementwise ops around `dyn.reduce`, which also
    decides `noop_with_empty_axes` at run time (each formula then gives ONNX's no-op result)."""
    axes, keep, op = node.inputs[1], bool(node.attr("keepdims", 1)), node.op_type
    assert axes is not None

    def reduce(v: Expr, how: str = "sum", keepdims: bool = keep) -> Expr:
        return dyn_reduce(g, node, v, axes, how, keepdims)

    if op == "ReduceL1":
        return reduce(g.call("abs", x))
    if op == "ReduceSumSquare":
        return reduce(g.call("multiply", x, x))
    if op == "ReduceL2":
        return g.call("sqrt", reduce(g.call("multiply", x, x)))
    if op == "ReduceLogSum":
        return g.call("log", reduce(x))
    # log-sum-exp, shifted by the maximum (ONNX's -inf for an empty reduction follows from max's)
    m = reduce(x, "max", True)
    s = reduce(g.call("exp", g.call("subtract", x, m)))
    return g.call("add", g.call("log", s), m if keep else reduce(x, "max", False))
