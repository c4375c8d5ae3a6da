"""bfloat16 ops: `bf16.quantize`, `bf16.dequantize`, `bf16.dense`, `bf16.conv2d`, and the NumPy pair.

Neither the IR nor NumPy has a bfloat16 dtype, so a bf16 tensor is a `uint16` tensor of bf16 words
(the top 16 bits of the float32 pattern). `to_bf16` / `from_bf16` are the one definition of the
conversion: the ops' references, the tests' oracle and the quantizer's weight folding all call them,
and the kernels' `f32_to_bf16` / `bf16_to_f32` (`autorelay.te.expr.BF16_FUNCS`) do the same
arithmetic bit for bit.

* `bf16.quantize`: float32 -> bf16 words, round to nearest even, NaN kept a NaN.
* `bf16.dequantize`: bf16 words -> float32, exact.
* `bf16.dense` / `bf16.conv2d`: bf16 data and weight, float32 products summed in float32, a float32
  result (a bias or activation that follows fuses as the fp32 epilogue it is). The conv takes
  `nn.conv2d`'s attributes, NCHW / OIHW only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.conv import conv_attrs, conv_canonical, conv_rel, normalize_conv_attrs
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import fmt_shape, tensor_arg
from autorelay.te import expr as E
from autorelay.te import nn_bf16

STORAGE = "uint16"


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 (or anything castable) -> uint16 bf16 words, rounding to nearest even; a NaN becomes
    a quiet NaN with its sign, infinities stay infinite, overflow rounds to infinity."""
    f = np.ascontiguousarray(np.asarray(x, np.float32))
    bits = f.view(np.uint32)
    top = bits >> np.uint32(16)
    rounded = (bits + (np.uint32(0x7FFF) + (top & np.uint32(1)))) >> np.uint32(16)  # wraps only for NaNs
    return np.where(np.isnan(f), top | np.uint32(0x40), rounded).astype(np.uint16)


def from_bf16(w: np.ndarray) -> np.ndarray:
    """uint16 bf16 words -> float32, exactly."""
    u = np.ascontiguousarray(np.asarray(w, np.uint16)).astype(np.uint32) << np.uint32(16)
    return u.view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """`x` rounded to the nearest bf16 value, as float32 (what a bf16 layer computes with)."""
    return from_bf16(to_bf16(x))


def _unary_rel(op: str, src: str, dst: str):
    def rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
        x = tensor_arg(op, arg_types, 0, "data")
        if x.dtype != src:
            raise rel_error(op, f"data of shape {fmt_shape(x.shape)} must be {src}, got {x.dtype}")
        return TensorType(x.shape, dst)

    return rel


def _convert_compute(fn: str):
    def compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
        return tc.bcast_map(lambda v: E.call(fn, v), inputs[:1], out_type, name=fn)

    return compute


register(OpDef(
    name="bf16.quantize",
    arg_names=("data",),
    type_rel=_unary_rel("bf16.quantize", "float32", STORAGE),
    pattern=OpPattern.ELEMWISE,
    reference=lambda attrs, x: to_bf16(x),
    compute=_convert_compute("f32_to_bf16"),
    doc="float32 -> bfloat16 words (uint16), round to nearest even.",
))

register(OpDef(
    name="bf16.dequantize",
    arg_names=("data",),
    type_rel=_unary_rel("bf16.dequantize", STORAGE, "float32"),
    pattern=OpPattern.ELEMWISE,
    reference=lambda attrs, x: from_bf16(x),
    compute=_convert_compute("bf16_to_f32"),
    doc="bfloat16 words (uint16) -> float32, exact.",
))


def _operands(op: str, arg_types: list[Type]) -> tuple[TensorType, TensorType]:
    data, weight = tensor_arg(op, arg_types, 0, "data"), tensor_arg(op, arg_types, 1, "weight")
    for t, name in ((data, "data"), (weight, "weight")):
        if t.dtype != STORAGE:
            raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must hold bf16 words ({STORAGE}), "
                                f"got {t.dtype}")
    return data, weight


def _dense_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "bf16.dense"
    data, weight = _operands(op, arg_types)
    if len(weight.shape) != 2 or len(data.shape) < 1 or data.shape[-1] != weight.shape[1]:
        raise rel_error(op, f"data of shape {fmt_shape(data.shape)} and weight of shape "
                            f"{fmt_shape(weight.shape)} disagree: weight must be [units, {data.shape[-1:]}]")
    return TensorType((*data.shape[:-1], weight.shape[0]), "float32")


def _dense_ref(attrs: Attrs, data, weight) -> np.ndarray:
    return (from_bf16(data).astype(np.float64) @ from_bf16(weight).astype(np.float64).T).astype(np.float32)


def _dense_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    data, weight = inputs
    if data.ndim != 2:
        raise tc.Unsupported(f"bf16.dense: data of rank {data.ndim} (the compute needs [M, K])")
    return nn_bf16.dense_bf16(data, weight)


register(OpDef(
    name="bf16.dense",
    arg_names=("data", "weight"),
    type_rel=_dense_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None},
    reference=_dense_ref,
    compute=_dense_compute,
    doc="bf16 dense, float32 accumulation: sum_k data[..., k] * weight[j, k], weight [units, K].",
))


def _conv_rel(arg_types: list[Type], attrs: Attrs) -> Any:
    op = "bf16.conv2d"
    _operands(op, arg_types)
    layouts = (attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or "NCHW")
    if layouts != ("NCHW", "OIHW", "NCHW"):
        raise rel_error(op, "only NCHW data, OIHW weight and NCHW output are supported")
    out = conv_rel(op, 2, arg_types, attrs)
    out = out[1] if isinstance(out, tuple) else out
    return TensorType(out.shape, "float32")


def _conv_ref(attrs: Attrs, data, weight) -> np.ndarray:
    x, w = from_bf16(data).astype(np.float64), from_bf16(weight).astype(np.float64)
    out = conv_canonical(x, w, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                         np.float64)
    return out.astype(np.float32)


def _conv_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    data, weight = inputs
    if attrs["groups"] != 1:
        raise tc.Unsupported("bf16.conv2d: grouped convolution has no bf16 compute")
    out = nn_bf16.conv2d_nchw_bf16(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"])
    if tuple(out.shape) != tc.out_shape(out_type):
        raise tc.Unsupported(f"compute shape {out.shape} differs from the type's {tc.out_shape(out_type)}")
    return out


register(OpDef(
    name="bf16.conv2d",
    arg_names=("data", "weight"),
    type_rel=_conv_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={**conv_attrs(2, "NCHW", "OIHW"), "out_dtype": "float32"},
    reference=_conv_ref,
    compute=_conv_compute,
    normalize_attrs=lambda a: normalize_conv_attrs("bf16.conv2d", 2, a),
    doc="bf16 2-d convolution (NCHW/OIHW), float32 accumulation and output.",
))

__all__ = ["STORAGE", "from_bf16", "round_bf16", "to_bf16"]
