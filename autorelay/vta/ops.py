"""The accelerator's layers as graph ops: `vta.conv2d` and `vta.dense`.

Each is one whole int8 layer as the accelerator runs it — GEMM with int32 accumulation, bias,
requantize by a rounding shift, clip — so the partitioner (`autorelay.vta.partition`) can replace
the qnn chain it came from with a single call that the executor hands to the simulator. Their NumPy
references are the integer oracles the simulator is tested against (`conv_reference`,
`dense_reference`), so the reference interpreter runs a partitioned graph too, and the relation
checks what the hardware needs (int8 data and weights, int32 bias). The core's BATCH is 1, so a
batch of N images is N runs of the layer's program (`autorelay.vta.runtime`).

    vta.conv2d(data int8 [N, C, H, W], weight int8 [O, C, KH, KW], bias int32 [O];
               strides, padding, shift, clip_min, clip_max) -> int8 [N, O, OH, OW]
    vta.dense(data int8 [M, K], weight int8 [N, K], bias int32 [N]; shift, clip_min, clip_max)
               -> int8 [M, N]
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op.registry import REQUIRED, OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import fmt_shape, tensor_arg
from autorelay.vta.conv import conv_reference
from autorelay.vta.programs import dense_reference

_EPILOGUE = {"shift": REQUIRED, "clip_min": -128, "clip_max": 127}


def _int8_args(op: str, arg_types: list[Type]) -> tuple[TensorType, TensorType, TensorType]:
    data = tensor_arg(op, arg_types, 0, "data")
    weight = tensor_arg(op, arg_types, 1, "weight")
    bias = tensor_arg(op, arg_types, 2, "bias")
    for name, t, dtype in (("data", data, "int8"), ("weight", weight, "int8"), ("bias", bias, "int32")):
        if t.dtype != dtype:
            raise rel_error(op, f"{name} must be {dtype}, got {t.dtype}")
    if bias.shape != (weight.shape[0],):
        raise rel_error(op, f"bias must have shape ({weight.shape[0]},) (one per output channel), "
                            f"got {fmt_shape(bias.shape)}")
    return data, weight, bias


def _check_epilogue(op: str, attrs: Attrs) -> None:
    if not 0 <= int(attrs["shift"]) < 32:
        raise rel_error(op, f"shift must be in [0, 32), got {attrs['shift']}")
    if not -128 <= int(attrs["clip_min"]) <= int(attrs["clip_max"]) <= 127:
        raise rel_error(op, f"clip bounds must satisfy -128 <= clip_min <= clip_max <= 127, "
                            f"got [{attrs['clip_min']}, {attrs['clip_max']}]")


def _conv_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "vta.conv2d"
    data, weight, _ = _int8_args(op, arg_types)
    if len(data.shape) != 4:
        raise rel_error(op, f"data must be NCHW, got {fmt_shape(data.shape)}")
    if len(weight.shape) != 4 or weight.shape[1] != data.shape[1]:
        raise rel_error(op, f"weight {fmt_shape(weight.shape)} (OIHW) does not match data "
                            f"{fmt_shape(data.shape)}")
    _check_epilogue(op, attrs)
    s, p = int(attrs["strides"]), int(attrs["padding"])
    oh = (data.shape[2] + 2 * p - weight.shape[2]) // s + 1
    ow = (data.shape[3] + 2 * p - weight.shape[3]) // s + 1
    if oh < 1 or ow < 1:
        raise rel_error(op, f"the output of data {fmt_shape(data.shape)} with kernel "
                            f"{fmt_shape(weight.shape)} is empty")
    return TensorType((data.shape[0], weight.shape[0], oh, ow), "int8")


def _conv_ref(attrs: Attrs, data: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    args = (int(attrs["strides"]), int(attrs["padding"]), int(attrs["shift"]), int(attrs["clip_min"]),
            int(attrs["clip_max"]))
    return np.concatenate([conv_reference(image[None], weight, bias, *args) for image in data])


def _dense_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "vta.dense"
    data, weight, _ = _int8_args(op, arg_types)
    if len(data.shape) != 2 or len(weight.shape) != 2 or weight.shape[1] != data.shape[1]:
        raise rel_error(op, f"data {fmt_shape(data.shape)} [M, K] and weight {fmt_shape(weight.shape)} "
                            f"[N, K] do not match")
    _check_epilogue(op, attrs)
    return TensorType((data.shape[0], weight.shape[0]), "int8")


def _dense_ref(attrs: Attrs, data: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return dense_reference(data, weight, bias, int(attrs["shift"]), int(attrs["clip_min"]),
                           int(attrs["clip_max"]))


register(OpDef(
    name="vta.conv2d",
    arg_names=("data", "weight", "bias"),
    type_rel=_conv_rel,
    pattern=OpPattern.OPAQUE,
    attrs={"strides": 1, "padding": 0, **_EPILOGUE},
    reference=_conv_ref,
    doc="An int8 convolution layer as the accelerator runs it (bias, rounding shift, clip).",
))

register(OpDef(
    name="vta.dense",
    arg_names=("data", "weight", "bias"),
    type_rel=_dense_rel,
    pattern=OpPattern.OPAQUE,
    attrs=dict(_EPILOGUE),
    reference=_dense_ref,
    doc="An int8 dense layer as the accelerator runs it (bias, rounding shift, clip).",
))

OFFLOADED_OPS = ("vta.conv2d", "vta.dense")

__all__ = ["OFFLOADED_OPS"]
