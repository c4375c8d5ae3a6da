"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution ops, produced by the `WinogradConv` pass, never
by frontends.

* `nn.winograd_weight_transform(weight, tile=2)`: OIHW 3x3 weight [K, C, 3, 3] -> U [P, K, C] with
  P = (tile + 2)^2 (16 or 36). The pass applies it to constant weights, so constant folding
  computes it once at build time.
* `nn.conv2d_winograd(data, U)`: NCHW data, stride 1, the given padding -> [N, K, OH, OW]; the
  output tile follows from U's first axis. Fuses elementwise consumers like `nn.conv2d`.
  With `data_layout="NCHW{x}c"` (what `ConvertLayout` makes of it among blocked layers) the data
  is [N, C/x, H, W, x], U is [P, K/y, C, y] and the output [N, K/y, OH, OW, y] (NCHW{y}c).

The transforms themselves are documented in `autorelay.te.winograd`. These ops are inference
rewrites and have no gradient rules: a program that is differentiated is differentiated before the
pass runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op.layout import from_canonical_array, pad_tuple, parse_layout, to_canonical_array
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import fmt_shape, tensor_arg
from autorelay.te.winograd import TILE_SIZES, transforms

WEIGHT_TRANSFORM = "nn.winograd_weight_transform"
CONV = "nn.conv2d_winograd"
POSITIONS = tuple(transforms(t).positions for t in TILE_SIZES)


def _positions(tile: Any) -> int:
    if tile not in TILE_SIZES:
        raise rel_error(WEIGHT_TRANSFORM, f"output tile {tile!r} is not supported (choose from {TILE_SIZES})")
    return transforms(tile).positions


def _weight_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    w = tensor_arg(WEIGHT_TRANSFORM, arg_types, 0, "weight")
    if len(w.shape) != 4 or tuple(w.shape[2:]) != (3, 3):
        raise rel_error(WEIGHT_TRANSFORM, f"weight of shape {fmt_shape(w.shape)} is not an OIHW 3x3 kernel")
    return TensorType((_positions(attrs["tile"]), w.shape[0], w.shape[1]), w.dtype)


def _weight_reference(attrs: Attrs, weight: np.ndarray) -> np.ndarray:
    from autorelay.te.winograd import weight_transform_np

    return weight_transform_np(weight, attrs["tile"])


def _weight_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.te.winograd import weight_transform

    return weight_transform(inputs[0], attrs["tile"])


def data_block(layout: str) -> int:
    """The channel block of a `data_layout`: 0 for NCHW, x for NCHW{x}c."""
    lay = parse_layout(CONV, layout, "NCHW", "data_layout")
    if lay.axes == ("N", "C", "H", "W"):
        return 0
    if lay.axes == ("N", "C", "H", "W", "c"):
        return lay.factors["c"]
    raise rel_error(CONV, f"data_layout must be NCHW or NCHW<x>c, got {layout!r}")


def _conv_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = tensor_arg(CONV, arg_types, 0, "data")
    u = tensor_arg(CONV, arg_types, 1, "weight")
    block = data_block(attrs["data_layout"])
    if len(data.shape) != (5 if block else 4) or (block and data.shape[4] != block):
        raise rel_error(CONV, f"data of shape {fmt_shape(data.shape)} is not {attrs['data_layout']}")
    expect = "[16 or 36, K/y, C, y]" if block else "[16 or 36, K, C]"
    if len(u.shape) != (4 if block else 3) or u.shape[0] not in POSITIONS:
        raise rel_error(CONV, f"transformed weight of shape {fmt_shape(u.shape)} is not {expect}")
    n, c, h, w = data.shape[:4]
    if block and isinstance(c, int):
        c *= block
    if isinstance(c, int) and isinstance(u.shape[2], int) and c != u.shape[2]:
        raise rel_error(CONV, f"channel mismatch: data of shape {fmt_shape(data.shape)} has {c} channels, "
                              f"transformed weight of shape {fmt_shape(u.shape)} expects {u.shape[2]}")
    if data.dtype != u.dtype:
        raise rel_error(CONV, f"data is {data.dtype} but the transformed weight is {u.dtype}")
    pt, pl, pb, pr = attrs["padding"]
    oh = h + pt + pb - 2 if isinstance(h, int) else h
    ow = w + pl + pr - 2 if isinstance(w, int) else w
    if (isinstance(oh, int) and oh < 1) or (isinstance(ow, int) and ow < 1):
        raise rel_error(CONV, f"data of shape {fmt_shape(data.shape)} with padding {attrs['padding']} "
                              "is smaller than the 3x3 window")
    if block:
        return TensorType((n, u.shape[1], oh, ow, u.shape[3]), data.dtype)
    return TensorType((n, u.shape[1], oh, ow), data.dtype)


def conv_reference(attrs: Attrs, data: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The same algorithm in NumPy (float64 inside): input transform, the GEMMs, output transform
    (blocked operands are unblocked around it)."""
    from autorelay.te.winograd import conv_reference as winograd_reference

    if not data_block(attrs.get("data_layout", "NCHW")):
        return winograd_reference(data, u, tuple(attrs["padding"]))
    p, kb, c, oc = u.shape
    flat = to_canonical_array(data, parse_layout(CONV, attrs["data_layout"], "NCHW"), "NCHW")
    y = winograd_reference(flat, u.transpose(0, 1, 3, 2).reshape(p, kb * oc, c), tuple(attrs["padding"]))
    return np.ascontiguousarray(from_canonical_array(y, parse_layout(CONV, f"NCHW{oc}c", "NCHW"), "NCHW"))


def _conv_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.op import te_compute as tc
    from autorelay.te.winograd import conv2d_winograd_nchw, conv2d_winograd_nchwc

    tc.check_dtypes(inputs, ("float32", "float64"))
    compute = conv2d_winograd_nchwc if data_block(attrs["data_layout"]) else conv2d_winograd_nchw
    return compute(inputs[0], inputs[1], attrs["padding"])


register(OpDef(
    name=WEIGHT_TRANSFORM,
    arg_names=("weight",),
    type_rel=_weight_rel,
    pattern=OpPattern.OPAQUE,
    attrs={"tile": 2},
    reference=_weight_reference,
    compute=_weight_compute,
    doc="Winograd F(tile x tile, 3x3) weight transform U = G g Gt of an OIHW 3x3 kernel, as "
        "[(tile + 2)^2, K, C].",
))

register(OpDef(
    name=CONV,
    arg_names=("data", "weight"),
    type_rel=_conv_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"padding": (1, 1, 1, 1), "data_layout": "NCHW"},
    reference=conv_reference,
    compute=_conv_compute,
    normalize_attrs=lambda a: {**a, "padding": pad_tuple(CONV, a["padding"], 2)},
    doc="Stride-1 3x3 convolution by Winograd F(2x2, 3x3) or F(4x4, 3x3) on a transformed weight: "
        "NCHW data with [16 or 36, K, C], or NCHW{x}c data with [16 or 36, K/y, C, y].",
))
