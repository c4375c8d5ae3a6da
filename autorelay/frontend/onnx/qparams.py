"""Quantisation parameters of ONNX's quantised operators, read once for every converter.

ONNX gives a scale (float32) and a zero point (the quantised type, often optional) per quantised
tensor; the IR's qnn ops take a float32 scale and an int32 zero point, scalar or 1-d along an axis.
Their values must be static: the fixed-point multipliers of `qnn.requantize` are derived from them
when the model is built, and every quantiser (ONNX Runtime's, PyTorch's) stores them as
initializers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView
from autorelay.ir.expr import Expr

QTYPES8 = ("uint8", "int8")


@dataclass(frozen=True)
class QParams:
    """A tensor's scale (float32) and zero point (int32), scalar or 1-d, as values and constants."""

    scale: np.ndarray
    zero_point: np.ndarray
    dtype: str  # the quantised type the zero point names (the tensor's own)

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    def scale_expr(self, g: GraphBuilder) -> Expr:
        return g.const(_squeeze1(self.scale), "float32")

    def zp_expr(self, g: GraphBuilder) -> Expr:
        return g.const(_squeeze1(self.zero_point), "int32")


def _squeeze1(v: np.ndarray) -> np.ndarray:
    """A one-element parameter as a scalar (per tensor), a longer one as 1-d (per channel)."""
    return v.reshape(()) if v.size == 1 else v.reshape(-1)


def qparams(g: GraphBuilder, node: NodeView, scale_at: int, zp_at: int | None, what: str,
            default_dtype: str) -> QParams:
    """The static scale and zero point at inputs `scale_at` / `zp_at` (absent zero point: 0 of
    `default_dtype`)."""
    scale_in = node.input(scale_at)
    if scale_in is None:
        raise node.fail(f"{what} scale (input {scale_at}) is required")
    scale = np.asarray(g.value(scale_in, f"{what} scale"))
    if scale.dtype not in (np.float32, np.float16) or scale.ndim > 1:
        raise node.fail(f"{what} scale must be a float32 (or float16) scalar or 1-d tensor, got "
                        f"{scale.dtype} of shape {scale.shape}")
    scale = scale.astype(np.float32)  # float16 widens exactly
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise node.fail(f"{what} scale must be positive and finite, got {scale.reshape(-1)[:4]}")
    zp_in = node.input(zp_at) if zp_at is not None else None
    if zp_in is None:
        return QParams(scale, np.zeros((), "int32"), default_dtype)
    zp = np.asarray(g.value(zp_in, f"{what} zero point"))
    if zp.ndim > 1:
        raise node.fail(f"{what} zero point must be a scalar or 1-d tensor, got shape {zp.shape}")
    return QParams(scale, zp.astype("int32"), str(zp.dtype))


def check_dtype(node: NodeView, dtype: str, what: str, allowed: tuple[str, ...] = QTYPES8) -> None:
    if dtype not in allowed:
        raise node.fail(f"{what} of type {dtype} is not supported ({', '.join(allowed)})")


def product_scale(a: QParams, b: QParams, alpha: float = 1.0) -> np.ndarray:
    """The real scale of an int32 product accumulator: a_scale * b_scale (* alpha), float32."""
    return (np.float32(alpha) * a.scale.reshape(-1).astype(np.float32)
            * b.scale.reshape(-1).astype(np.float32)).astype(np.float32)


def dequantize(g: GraphBuilder, x: Expr, q: QParams, axis: int = -1) -> Expr:
    return g.call("qnn.dequantize", x, q.scale_expr(g), q.zp_expr(g), axis=axis, out_dtype="float32")


def quantize(g: GraphBuilder, x: Expr, q: QParams, axis: int = -1) -> Expr:
    return g.call("qnn.quantize", x, q.scale_expr(g), q.zp_expr(g), axis=axis, out_dtype=q.dtype)


def as_int8_weight(g: GraphBuilder, w: Expr, zp: np.ndarray) -> tuple[Expr, np.ndarray]:
    """An int8 weight and its zero point for the qnn ops (whose weights are int8): a uint8 weight
    is shifted by -128 with its zero point, which leaves every `w - zp` unchanged."""
    if g.dtype(w) == "int8":
        return w, zp
    shifted = g.call("subtract", g.call("cast", w, dtype="int16"), g.const(np.array(128), "int16"))
    return g.call("cast", shifted, dtype="int8"), (zp.astype(np.int64) - 128).astype("int32")
