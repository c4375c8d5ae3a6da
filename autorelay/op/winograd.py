"""Winograd F(2x2, 3x3) convolution ops, produced by the `WinogradConv` pass, never by frontends.

* `nn.winograd_weight_transform(weight)`: OIHW 3x3 weight [K, C, 3, 3] -> U [16, K, C]. The pass
  applies it to constant weights, so constant folding computes it once at build time.
* `nn.conv2d_winograd(data, U)`: NCHW data, stride 1, the given padding -> [N, K, OH, OW]; fuses
  elementwise consumers like `nn.conv2d`.

The transforms themselves (and why the last rows of Bt and G are negated) are documented in
`autorelay.te.winograd`. These ops are inference rewrites and have no gradient rules: a program
that is differentiated is differentiated before the pass runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op.layout import pad_tuple
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import fmt_shape, tensor_arg

WEIGHT_TRANSFORM = "nn.winograd_weight_transform"
CONV = "nn.conv2d_winograd"


def _weight_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    w = tensor_arg(WEIGHT_TRANSFORM, arg_types, 0, "weight")
    if len(w.shape) != 4 or tuple(w.shape[2:]) != (3, 3):
        raise rel_error(WEIGHT_TRANSFORM, f"weight of shape {fmt_shape(w.shape)} is not an OIHW 3x3 kernel")
    return TensorType((16, w.shape[0], w.shape[1]), w.dtype)


def _weight_reference(attrs: Attrs, weight: np.ndarray) -> np.ndarray:
    from autorelay.te.winograd import weight_transform_np

    return weight_transform_np(weight)


def _weight_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.te.winograd import weight_transform

    return weight_transform(inputs[0])


def _conv_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = tensor_arg(CONV, arg_types, 0, "data")
    u = tensor_arg(CONV, arg_types, 1, "weight")
    if len(data.shape) != 4:
        raise rel_error(CONV, f"data of shape {fmt_shape(data.shape)} is not NCHW")
    if len(u.shape) != 3 or u.shape[0] != 16:
        raise rel_error(CONV, f"transformed weight of shape {fmt_shape(u.shape)} is not [16, K, C]")
    n, c, h, w = data.shape
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
    return TensorType((n, u.shape[1], oh, ow), data.dtype)


def conv_reference(attrs: Attrs, data: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The same algorithm in NumPy (float64 inside): input transform, 16 GEMMs, output transform."""
    bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]], np.float64)
    at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
    pt, pl, pb, pr = attrs["padding"]
    n, c, h, w = data.shape
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    x = np.zeros((n, c, 2 * th + 2, 2 * tw + 2))
    x[:, :, pt : pt + h, pl : pl + w] = data
    x = x[:, :, : 2 * th + 2, : 2 * tw + 2]
    win = np.lib.stride_tricks.sliding_window_view(x, (4, 4), axis=(2, 3))[:, :, ::2, ::2]  # n c th tw 4 4
    v = np.einsum("ai,ncyxij,bj->abcnyx", bt, win, bt).reshape(16, c, n, th, tw)
    m = np.einsum("zkc,zcnyx->zknyx", u.astype(np.float64), v).reshape(4, 4, -1, n, th, tw)
    y = np.einsum("ia,abknyx,jb->nkyixj", at, m, at).reshape(n, -1, 2 * th, 2 * tw)
    return np.ascontiguousarray(y[:, :, :oh, :ow]).astype(data.dtype)


def _conv_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.op import te_compute as tc
    from autorelay.te.winograd import conv2d_winograd_nchw

    tc.check_dtypes(inputs, ("float32", "float64"))
    return conv2d_winograd_nchw(inputs[0], inputs[1], attrs["padding"])


register(OpDef(
    name=WEIGHT_TRANSFORM,
    arg_names=("weight",),
    type_rel=_weight_rel,
    pattern=OpPattern.OPAQUE,
    reference=_weight_reference,
    compute=_weight_compute,
    doc="Winograd F(2x2, 3x3) weight transform U = G g Gt of an OIHW 3x3 kernel, as [16, K, C].",
))

register(OpDef(
    name=CONV,
    arg_names=("data", "weight"),
    type_rel=_conv_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"padding": (1, 1, 1, 1)},
    reference=conv_reference,
    compute=_conv_compute,
    normalize_attrs=lambda a: {**a, "padding": pad_tuple(CONV, a["padding"], 2)},
    doc="Stride-1 3x3 NCHW convolution by Winograd F(2x2, 3x3) on a transformed weight [16, K, C].",
))
