"""QuantizeLinear / DequantizeLinear as `qnn.quantize` / `qnn.dequantize`.

ONNX's zero point carries the quantised type (uint8 when absent) and may be any integer type; the
IR's qnn ops take a float32 scale and an int32 zero point, so both are cast (folded when constant).
Blocked quantisation (`block_size`, opset 21) is not supported.
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
    scale, zp32, axis = _params(g, node, x)
    if g.dtype(x) != "float32":
        x = g.call("cast", x, dtype="float32")
    return g.call("qnn.quantize", x, scale, zp32, axis=axis, out_dtype=out_dtype)


def _dequantize(g: GraphBuilder, node: NodeView) -> Expr:
    x = node.input(0)
    if g.dtype(x) not in _QTYPES:
        raise node.fail(f"dequantising {g.dtype(x)} is not supported ({', '.join(_QTYPES)})")
    scale, zp32, axis = _params(g, node, x)
    return g.call("qnn.dequantize", x, scale, zp32, axis=axis, out_dtype="float32")


TABLE["QuantizeLinear"] = _quantize
TABLE["DequantizeLinear"] = _dequantize
