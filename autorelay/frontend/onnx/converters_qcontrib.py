"""ONNX Runtime's quantised contrib ops (domain com.microsoft), as its QOperator quantizer emits them
around QLinearConv / QLinearMatMul / QGemm: QLinearAdd, QLinearMul, QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearLeakyRelu, QLinearSigmoid, QLinearSoftmax, and its
QuantizeLinear / DequantizeLinear.

Add and Concat have integer qnn ops (`qnn.add`, `qnn.concatenate`). The others run as
dequantize -> the float op's own converter -> quantize: correct to one quantisation step (ONNX
Runtime computes them in float or with table lookups too), and cheap next to the convolutions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autorelay.frontend.onnx import (
    converters_math,
    converters_nn,
    converters_pool,
    converters_quant,
    converters_rnn,
    converters_shape,
)
from autorelay.frontend.onnx.context import GraphBuilder, NodeView, required_input
from autorelay.frontend.onnx.qparams import QParams, check_dtype, dequantize, qparams, quantize
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_MS = "com.microsoft."
_FLOAT = {**converters_math.TABLE, **converters_nn.TABLE, **converters_pool.TABLE, **converters_shape.TABLE}


def _float_op(g: GraphBuilder, node: NodeView, op_type: str, inputs: Sequence[Expr],
              attrs: dict[str, Any] | None = None, opset: int | None = None) -> Expr:
    """The float converter of `op_type` applied to `inputs` (errors still name this node)."""
    view = NodeView(node.index, node.name, op_type, list(inputs), [""] * len(inputs),
                    dict(attrs or {}), 1, node.opset if opset is None else opset, node.output_names[:1])
    return _FLOAT[op_type](g, view)


def _binary(g: GraphBuilder, node: NodeView) -> tuple[Expr, QParams, Expr, QParams, QParams]:
    a, b = _x(node, 0), _x(node, 3)
    aq = qparams(g, node, 1, 2, "A", g.dtype(a))
    bq = qparams(g, node, 4, 5, "B", g.dtype(b))
    cq = qparams(g, node, 6, 7, "C", g.dtype(a))
    for what, dt in (("A", g.dtype(a)), ("B", g.dtype(b)), ("C", cq.dtype)):
        check_dtype(node, dt, what)
    return a, aq, b, bq, cq


def _qlinear_add(g: GraphBuilder, node: NodeView) -> Expr:
    a, aq, b, bq, cq = _binary(g, node)
    if aq.per_tensor and bq.per_tensor and g.dtype(a) == g.dtype(b) == cq.dtype:
        return g.call("qnn.add", a, b, aq.scale_expr(g), aq.zp_expr(g), bq.scale_expr(g), bq.zp_expr(g),
                      cq.scale_expr(g), cq.zp_expr(g))
    return quantize(g, _float_op(g, node, "Add", [dequantize(g, a, aq), dequantize(g, b, bq)]), cq)


def _qlinear_mul(g: GraphBuilder, node: NodeView) -> Expr:
    a, aq, b, bq, cq = _binary(g, node)
    return quantize(g, _float_op(g, node, "Mul", [dequantize(g, a, aq), dequantize(g, b, bq)]), cq)


def _qlinear_concat(g: GraphBuilder, node: NodeView) -> Expr:
    """Inputs: Y_scale, Y_zero_point, then (tensor, scale, zero point) per joined tensor."""
    if len(node.inputs) < 5 or (len(node.inputs) - 2) % 3:
        raise node.fail(f"expected Y_scale, Y_zero_point and (X, scale, zero point) triples, "
                        f"got {len(node.inputs)} inputs")
    xs = [_x(node, i) for i in range(2, len(node.inputs), 3)]
    yq = qparams(g, node, 0, 1, "Y", g.dtype(xs[0]))
    qs = [qparams(g, node, i + 1, i + 2, f"input {i}", g.dtype(x)) for i, x in zip(range(2, 99999, 3), xs)]
    check_dtype(node, yq.dtype, "Y")
    axis = int(node.attr("axis", 0))
    if all(q.per_tensor for q in qs) and all(g.dtype(x) == yq.dtype for x in xs):
        return g.call("qnn.concatenate", g.tuple(xs), g.tuple([q.scale_expr(g) for q in qs]),
                      g.tuple([q.zp_expr(g) for q in qs]), yq.scale_expr(g), yq.zp_expr(g), axis=axis)
    floats = [dequantize(g, x, q) for x, q in zip(xs, qs)]
    return quantize(g, _float_op(g, node, "Concat", floats, {"axis": axis}), yq)


def _unary(float_type: str, keep: Sequence[str] = ()):
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point -> dequantize, `float_type`, quantize;
    `channels_last` data (NHWC) is transposed to the float op's NCHW and back; an `opset`
    attribute (QLinearSoftmax's) gives the float op's semantics (Softmax's axis coercion < 13)."""

    def convert(g: GraphBuilder, node: NodeView) -> Expr:
        x = _x(node, 0)
        xq = qparams(g, node, 1, 2, "X", g.dtype(x))
        yq = qparams(g, node, 3, 4, "Y", g.dtype(x))
        check_dtype(node, g.dtype(x), "X")
        check_dtype(node, yq.dtype, "Y")
        if not (xq.per_tensor and yq.per_tensor):
            raise node.fail("scales and zero points must be per tensor")
        v = dequantize(g, x, xq)
        last = bool(node.attr("channels_last", 0)) and g.ndim(x) > 2
        nd = g.ndim(x)
        if last:
            v = g.call("transpose", v, axes=(0, nd - 1, *range(1, nd - 1)))
        attrs = {k: node.attrs[k] for k in keep if k in node.attrs}
        y = _float_op(g, node, float_type, [v], attrs, node.attr("opset"))
        if last:
            y = g.call("transpose", y, axes=(0, *range(2, nd), 1))
        return quantize(g, y, yq)

    return convert


def _dynamic_quantize_lstm(g: GraphBuilder, node: NodeView) -> list[Expr | None]:
    """`DynamicQuantizeLSTM` (what `quantize_dynamic` makes of an LSTM): an LSTM whose W and R are
    8-bit and stored transposed, `[directions, input, 4 * hidden]` and `[directions, hidden, 4 *
    hidden]`, with a scale and zero point per direction or per gate column (inputs 8-11). The
    weights are dequantized into the float LSTM's layout, a constant expression folded at build,
    and the LSTM runs in float32: ONNX Runtime also quantizes each step's activations, so the two
    agree to within that rounding, not bit for bit."""
    if len(node.inputs) < 12 or any(node.input(i) is None for i in (1, 2, 8, 9, 10, 11)):
        raise node.fail("expected X, W, R, ..., W_scale, W_zero_point, R_scale, R_zero_point (12 inputs)")

    def weight(q: Expr, scale: Expr, zp: Expr, what: str) -> Expr:
        directions, _, gates = g.static_shape(q, what)
        per_column = g.ndim(scale) == 2  # [directions, 4 * hidden], else [directions]
        per = (directions, 1, gates) if per_column else (directions, 1, 1)
        zero = g.call("reshape", g.call("cast", zp, dtype="float32"), newshape=per)
        real = g.call("subtract", g.call("cast", q, dtype="float32"), zero)
        real = g.call("multiply", real, g.call("reshape", scale, newshape=per))
        return g.call("transpose", real, axes=(0, 2, 1))

    w = weight(node.input(1), node.input(8), node.input(9), "W")  # type: ignore[arg-type]
    r = weight(node.input(2), node.input(10), node.input(11), "R")  # type: ignore[arg-type]
    lstm = NodeView(node.index, node.name, "LSTM", [node.input(0), w, r, *node.inputs[3:8]],
                    node.input_names[:8], node.attrs, node.num_outputs, node.opset, node.output_names)
    return converters_rnn.TABLE["LSTM"](g, lstm)


_POOL_ATTRS = ("kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad", "dilations")
TABLE.update({
    _MS + "QLinearAdd": _qlinear_add,
    _MS + "DynamicQuantizeLSTM": _dynamic_quantize_lstm,
    _MS + "QLinearMul": _qlinear_mul,
    _MS + "QLinearConcat": _qlinear_concat,
    _MS + "QLinearGlobalAveragePool": _unary("GlobalAveragePool"),
    _MS + "QLinearAveragePool": _unary("AveragePool", _POOL_ATTRS),
    _MS + "QLinearLeakyRelu": _unary("LeakyRelu", ("alpha",)),
    _MS + "QLinearSigmoid": _unary("Sigmoid"),
    _MS + "QLinearSoftmax": _unary("Softmax", ("axis",)),
    _MS + "QuantizeLinear": converters_quant.TABLE["QuantizeLinear"],
    _MS + "DequantizeLinear": converters_quant.TABLE["DequantizeLinear"],
})
