"""QuantizeLinear / DequantizeLinear as `qnn.quantize` / `qnn.dequantize`; DynamicQuantizeLinear
(what ONNX Runtime's dynamic quantizer puts before MatMulInteger / ConvInteger) in plain ops.

ONNX's zero point carries the quantised type (uint8 when absent) and may be any integer type; the
IR's qnn ops take a float32 scale and an int32 zero point, so both are cast (folded when constant).
Blocked quantisation (`block_size`, opset 21) is not supported. Opset 23's attributes are read:
DequantizeLinear's `output_dtype` (float32, or float16 by a cast of the float32 result) and
QuantizeLinear's `precision` (the division's type: float32, the only one computed here).
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import ONNX_DTYPES, GraphBuilder, NodeView, normalize_axis
from autorelay.ir.expr import Expr

TABLE: dict = {}
_QTYPES = ("int8", "uint8", "int16", "int32")


def _params(g: GraphBuilder, node: NodeView, data: Expr) -> tuple[Expr, Expr, int]:
    scale, zp = node.input(1), node.input(2)
    if scale is None:
        raise node.fail("the scale input is required")
    if node.attr("block_size", 0):
        raise node.fail("blocked quantisation (block_size) is not supported")
    if g.dtype(scale) != "float32":
        raise node.fail(f"scale of dtype {g.dtype(scale)} is not supported (float32 only)")
    if len(g.shape(scale)) > 1:
        raise node.fail(f"scale of shape {g.shape(scale)} must be a scalar or 1-d (per axis)")
    ndim = max(g.ndim(data), 1)
    per_axis = len(g.shape(scale)) == 1 and g.shape(scale)[0] != 1
    axis = (
        normalize_axis(g, node.attr("axis", 1), ndim) if per_axis else ndim - 1
    )  # axis only matters per axis
    zp32 = g.const(np.zeros((), "int32")) if zp is None else g.call("cast", zp, dtype="int32")
    return scale, zp32, axis


def _quantize(g: GraphBuilder, node: NodeView) -> Expr:
    x = node.input(0)
    zp = node.input(2)
    out_dtype = g.dtype(zp) if zp is not None else "uint8"
    if node.attr("output_dtype", 0):
        want = ONNX_DTYPES.get(node.attr("output_dtype"))
        if want is None or (zp is not None and want != out_dtype):
            raise node.fail(
                f"output_dtype {node.attr('output_dtype')} is unsupported or disagrees with the zero point"
            )
        out_dtype = want
    if out_dtype not in _QTYPES:
        raise node.fail(f"quantising to {out_dtype} is not supported ({', '.join(_QTYPES)})")
    precision = node.attr("precision", 0)
    if precision and ONNX_DTYPES.get(precision) != "float32":
        raise node.fail(f"precision {_type_name(precision)} is not supported (the division is computed in "
                        "float32)")
    scale, zp32, axis = _params(g, node, x)
    if g.dtype(x) != "float32":
        x = g.call("cast", x, dtype="float32")
    return g.call("qnn.quantize", x, scale, zp32, axis=axis, out_dtype=out_dtype)


def _dequantize(g: GraphBuilder, node: NodeView) -> Expr:
    x = node.input(0)
    if g.dtype(x) not in _QTYPES:
        raise node.fail(f"dequantising {g.dtype(x)} is not supported ({', '.join(_QTYPES)})")
    want = ONNX_DTYPES.get(node.attr("output_dtype", 0) or 1)  # 0: the scale's type, float32 here
    if want not in ("float32", "float16"):
        raise node.fail(f"output_dtype {_type_name(node.attr('output_dtype'))} is not supported "
                        "(float32 or float16)")
    scale, zp32, axis = _params(g, node, x)
    y = g.call("qnn.dequantize", x, scale, zp32, axis=axis, out_dtype="float32")
    return y if want == "float32" else g.call("cast", y, dtype=want)


def _type_name(code: int) -> str:
    """An ONNX element type code as ONNX names it (FLOAT16, BFLOAT16, ...), for messages."""
    import onnx

    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return str(code)


def _dynamic_quantize(g: GraphBuilder, node: NodeView) -> list[Expr | None]:
    """uint8 over the data's range widened to hold 0, as ONNX defines it (and ONNX Runtime computes
    it): scale = (max - min) / 255 (1 when the range is empty), zero point = round(-min / scale),
    y = saturate(round(x / scale) + zero point), rounding half to even, in float32."""
    x = node.input(0)
    if x is None or g.dtype(x) != "float32":
        raise node.fail("the data must be float32")
    f32 = g.const(np.zeros((), "float32"))
    lo = g.call("minimum", g.call("min", x, axis=None, keepdims=False), f32)
    hi = g.call("maximum", g.call("max", x, axis=None, keepdims=False), f32)
    span = g.call("subtract", hi, lo)
    empty = g.call("equal", span, f32)
    scale = g.call("where", empty, g.const(np.ones((), "float32")),
                   g.call("divide", span, g.const(np.float32(255))))
    zp_real = g.call("round", g.call("negative", g.call("divide", lo, scale)))
    zp = g.call("clip", zp_real, a_min=0.0, a_max=255.0)
    y = g.call("add", g.call("round", g.call("divide", x, scale)), zp)
    y = g.call("cast", g.call("clip", y, a_min=0.0, a_max=255.0), dtype="uint8")
    return [y, scale, g.call("cast", zp, dtype="uint8")]


TABLE["QuantizeLinear"] = _quantize
TABLE["DequantizeLinear"] = _dequantize
TABLE["DynamicQuantizeLinear"] = _dynamic_quantize
