"""Integer qnn ops: `qnn.conv2d`, `qnn.dense`, `qnn.concatenate` (Relay's signatures; `qnn.add` is in
`qnn_add.py`).

* conv2d / dense: int32 `sum((data - input_zero_point) * (weight - kernel_zero_point))`; the
  padded border reads the input zero point (real zero). The scales do not change the integer
  result — its real scale is `input_scale * kernel_scale` — and are carried for the requantize
  that follows. The kernel zero point may be per output channel.
* concatenate: every input rescaled to the output's scale and zero point, then joined.

Every rescaling is `qnn_fixed`'s one rule, in references and kernels alike; references compute
in int64 NumPy. Per-tensor parameters are scalars (or 1-element tensors).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op import qnn_fixed as F
from autorelay.op.conv import conv_attrs, conv_canonical, conv_rel, is_depthwise, normalize_conv_attrs
from autorelay.op.layout import from_canonical_array, parse_layout, to_canonical_array
from autorelay.op.qnn import _qparam, constant_value, fixed_point_rescaler, rescale_along
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import fmt_shape, normalize_axis, tensor_arg, tuple_arg

INT8 = ("int8", "uint8")


def _scalar_or_vector(op: str, t: TensorType, name: str, dtype: str, channels: Any) -> None:
    if t.dtype != dtype:
        raise rel_error(op, f"{name} must have dtype {dtype}, got {t.dtype}")
    if t.shape == () or t.shape == (1,):
        return
    if channels is None or len(t.shape) != 1 or (isinstance(channels, int) and t.shape[0] != channels):
        want = "a scalar" if channels is None else f"a scalar or ({channels},)"
        raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must be {want}")


def _int8_operands(op: str, arg_types: list[Type]) -> tuple[TensorType, TensorType]:
    data = tensor_arg(op, arg_types, 0, "data")
    weight = tensor_arg(op, arg_types, 1, "weight")
    for t, name in ((data, "data"), (weight, "weight")):
        if t.dtype not in INT8:
            raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must be int8 or uint8, got {t.dtype}")
    return data, weight


def _check_qparams(op: str, arg_types: list[Type], channels: Any) -> None:
    spec = (("input_zero_point", "int32", None), ("kernel_zero_point", "int32", channels),
            ("input_scale", "float32", None), ("kernel_scale", "float32", channels))
    for k, (name, dtype, ch) in enumerate(spec, start=2):
        _scalar_or_vector(op, tensor_arg(op, arg_types, k, name), name, dtype, ch)


def _out_int32(op: str, attrs: Attrs) -> None:
    if attrs["out_dtype"] not in ("int32",):
        raise rel_error(op, f"out_dtype must be int32, got {attrs['out_dtype']!r}")


def _per_channel(v: np.ndarray, n: int) -> np.ndarray:
    v = np.asarray(v, np.int64).reshape(-1)
    return np.broadcast_to(v, (n,)) if v.size == 1 else v


# ---- qnn.conv2d -------------------------------------------------------------------------------


_PACKED = re.compile(r"OIHW(\d+)i(\d+)o(\d+)i$")
# a depthwise weight in NCHW{b}c (OIHW1i{b}o), or one of small groups packed whole (OIHW{g}i{b}o)
_DEPTHWISE_BLOCKED = re.compile(r"OIHW(\d+)i(\d+)o$")


def _packed(kernel_layout: str) -> tuple[int, int, int] | None:
    """(icb/g, ocb, g) of the dot-product weight layout `OIHW{icb/g}i{ocb}o{g}i`, else None."""
    m = _PACKED.match(kernel_layout)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


def _unpacked_attrs(attrs: Attrs) -> Attrs:
    """The attributes with a dot-product weight layout named as the plain blocked one."""
    pk = _packed(attrs["kernel_layout"])
    return attrs if pk is None else attrs.replace(kernel_layout=f"OIHW{pk[0] * pk[2]}i{pk[1]}o")


def _unpack(weight: np.ndarray, attrs: Attrs) -> np.ndarray:
    """[O/y, I/x, KH, KW, x/g, y, g] -> [O/y, I/x, KH, KW, x, y] (`OIHW{x}i{y}o`)."""
    if _packed(attrs["kernel_layout"]) is None:
        return weight
    ob, ib, kh, kw, xg, y, g = weight.shape
    return weight.transpose(0, 1, 2, 3, 4, 6, 5).reshape(ob, ib, kh, kw, xg * g, y)


def _conv_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.conv2d"
    _out_int32(op, attrs)
    _, weight = _int8_operands(op, arg_types)
    pk = _packed(attrs["kernel_layout"])
    if pk is not None:
        if len(weight.shape) != 7 or tuple(weight.shape[4:]) != pk:
            raise rel_error(op, f"weight of shape {fmt_shape(weight.shape)} does not have the kernel layout "
                                f"{attrs['kernel_layout']}")
        ob, ib, kh, kw, xg, y, g = weight.shape
        weight = TensorType((ob, ib, kh, kw, xg * g, y), weight.dtype)
    out = conv_rel(op, 2, [arg_types[0], weight], _unpacked_attrs(attrs))
    if isinstance(out, tuple):  # a refined weight type cannot arise: the weight is known above
        out = out[1]
    ol = attrs["out_layout"] or attrs["data_layout"]
    channels = out.shape[ol.index("C")] if ol in ("NCHW", "NHWC") else None
    if ol.startswith("NCHW") and ol.endswith("c") and len(out.shape) == 5:
        channels = out.shape[1] * out.shape[4]
    _check_qparams(op, arg_types, channels)
    return out


def _conv_ref(attrs: Attrs, data, weight, zd, zw, _sd, _sw) -> np.ndarray:
    weight, attrs = _unpack(weight, attrs), _unpacked_attrs(attrs)
    dl = parse_layout("qnn.conv2d", attrs["data_layout"], "NCHW")
    kl = parse_layout("qnn.conv2d", attrs["kernel_layout"], "OIHW")
    ol = parse_layout("qnn.conv2d", attrs["out_layout"] or attrs["data_layout"], "NCHW")
    x = to_canonical_array(data, dl, "NCHW").astype(np.int64) - np.int64(np.asarray(zd).reshape(()))
    w = to_canonical_array(weight, kl, "OIHW").astype(np.int64)
    w = w - _per_channel(zw, w.shape[0]).reshape(-1, 1, 1, 1)
    out = conv_canonical(x, w, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                         np.int64)
    return np.ascontiguousarray(from_canonical_array(out, ol, "NCHW")).astype(np.int32)


def _conv_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.op import te_compute as tc
    from autorelay.te import nn_int8

    data, weight, zd, zw = inputs[:4]
    layouts = (attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"])
    if _packed(attrs["kernel_layout"]) is not None or _DEPTHWISE_BLOCKED.match(attrs["kernel_layout"]):
        return _conv_nchwc_compute(inputs, attrs, out_type)
    if layouts != ("NCHW", "OIHW", "NCHW"):
        raise tc.Unsupported(f"qnn.conv2d layouts {layouts} have no compute (NCHW/OIHW)")
    zero, weight_zero = _qparam(zd, (), 0), lambda f: _qparam(zw, (f,), 0)
    groups, dilation = attrs["groups"], tuple(attrs["dilation"])
    if is_depthwise(groups, data.shape[1], weight.shape[0]) and dilation == (1, 1):
        out = nn_int8.depthwise_conv2d_nchw_q(data, weight, zero, weight_zero, attrs["strides"],
                                              attrs["padding"])
    else:
        out = nn_int8.conv2d_nchw_q(data, weight, zero, weight_zero, attrs["strides"], attrs["padding"],
                                    dilation, groups)
    if tuple(out.shape) != tc.out_shape(out_type):
        raise tc.Unsupported(f"compute shape {out.shape} differs from the type's {tc.out_shape(out_type)}")
    return out


def _conv_nchwc_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """NCHW[x]c with the dot-product weight layout: the raw u8 x s8 sums (`conv2d_nchwc_int8`,
    padded with the input zero point), minus `zero_point * sum(weight)` per output channel,
    precomputed from the constant weight. Depthwise (`OIHW1i{b}o`) or small groups packed in
    blocks (`OIHW{g}i{b}o`): the same with `depthwise_conv2d_nchwc_int8`, the sum over each
    channel's taps (and its group's g channels)."""
    from autorelay.op import te_compute as tc
    from autorelay.te import nn_int8
    from autorelay.te import tensor as te

    data, weight, zd, zw = inputs[:4]
    zd_value, zw_value, w_value = constant_value(zd), constant_value(zw), constant_value(weight)
    if zd_value is None or zd_value.size != 1 or zw_value is None or np.any(zw_value != 0):
        raise tc.Unsupported("qnn.conv2d in a blocked layout needs constant zero points, the weight's zero")
    in_block = _DEPTHWISE_BLOCKED.match(attrs["kernel_layout"]) is not None  # each block reads itself
    if (attrs["groups"] != 1 and not in_block) or tuple(attrs["dilation"]) != (1, 1):
        raise tc.Unsupported("qnn.conv2d in a blocked layout: groups (other than depthwise or packed "
                             "in blocks) and dilation must be 1")
    zero = int(zd_value.reshape(()))
    if in_block:
        raw = nn_int8.depthwise_conv2d_nchwc_int8(data, weight, attrs["strides"], attrs["padding"],
                                                  pad_value=zero, weight_value=w_value)
    else:
        raw = nn_int8.conv2d_nchwc_int8(data, weight, attrs["strides"], attrs["padding"], pad_value=zero,
                                        narrow=w_value is not None and nn_int8.narrow_pairs(w_value))
    if tuple(raw.shape) != tc.out_shape(out_type):
        raise tc.Unsupported(f"compute shape {raw.shape} differs from the type's {tc.out_shape(out_type)}")
    if zero == 0:
        return raw
    if w_value is None:
        raise tc.Unsupported("qnn.conv2d in a blocked layout with a nonzero input zero point needs a "
                             "constant weight")
    sums = w_value.astype(np.int64).sum(axis=(1, 2, 3, 4) if in_block else (1, 2, 3, 4, 6))  # [OC/ocb, ocb]
    corr = te.constant(zero * sums, "int32", "zero_point_correction")
    return te.compute(raw.shape, lambda b, f, y, x, v: raw[b, f, y, x, v] - corr[f, v], name="qconv_zp")


register(OpDef(
    name="qnn.conv2d",
    arg_names=("data", "weight", "input_zero_point", "kernel_zero_point", "input_scale", "kernel_scale"),
    type_rel=_conv_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={**conv_attrs(2, "NCHW", "OIHW"), "out_dtype": "int32"},
    reference=_conv_ref,
    compute=_conv_compute,
    normalize_attrs=lambda a: normalize_conv_attrs("qnn.conv2d", 2, a),
    doc="Quantized 2-d convolution: int32 sum of (data - zp) * (weight - kernel_zp).",
))


# ---- qnn.dense ----------------------------------------------------------------------------------


def _dense_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.dense"
    _out_int32(op, attrs)
    data, weight = _int8_operands(op, arg_types)
    if len(weight.shape) != 2 or len(data.shape) < 1 or data.shape[-1] != weight.shape[1]:
        raise rel_error(op, f"data of shape {fmt_shape(data.shape)} and weight of shape "
                            f"{fmt_shape(weight.shape)} disagree: weight must be [units, {data.shape[-1:]}]")
    if attrs["units"] is not None and attrs["units"] != weight.shape[0]:
        raise rel_error(op, f"weight of shape {fmt_shape(weight.shape)} has {weight.shape[0]} units, "
                            f"but units={attrs['units']}")
    _check_qparams(op, arg_types, weight.shape[0])
    return TensorType((*data.shape[:-1], weight.shape[0]), "int32")


def _dense_ref(attrs: Attrs, data, weight, zd, zw, _sd, _sw) -> np.ndarray:
    x = data.astype(np.int64) - np.int64(np.asarray(zd).reshape(()))
    w = weight.astype(np.int64) - _per_channel(zw, weight.shape[0]).reshape(-1, 1)
    return (x @ w.T).astype(np.int32)


def _dense_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.te import nn_int8

    data, weight, zd, zw = inputs[:4]
    zd_value, zw_value, w_value = constant_value(zd), constant_value(zw), constant_value(weight)
    scalar_zps = zd_value is not None and zd_value.size == 1 and zw_value is not None and zw_value.size == 1
    fast = data.ndim == 2 and data.dtype == "uint8" and weight.dtype == "int8" and scalar_zps \
        and int(zw_value.reshape(())) == 0  # type: ignore[union-attr]
    if not fast:
        return nn_int8.dense_q(data, weight, _qparam(zd, (), 0), lambda j: _qparam(zw, (j,), 0))
    narrow = False
    if w_value is not None:  # K padded to even with a zero (as the template pads it): pairs along K
        narrow = nn_int8.narrow_pairs(np.pad(w_value, ((0, 0), (0, w_value.shape[1] % 2))))
    raw = nn_int8.dense_int8(data, weight, narrow=narrow)  # u8 x s8: the dot-product instructions' form
    zero = int(zd_value.reshape(()))
    if zero == 0:
        return raw
    if w_value is None:  # the correction needs the weight's row sums
        return nn_int8.dense_q(data, weight, _qparam(zd, (), 0), lambda j: _qparam(zw, (j,), 0))
    from autorelay.te import tensor as te

    corr = te.constant(zero * w_value.astype(np.int64).sum(axis=1), "int32", "zero_point_correction")
    return te.compute(raw.shape, lambda i, j: raw[i, j] - corr[j], name="qdense_zp")


register(OpDef(
    name="qnn.dense",
    arg_names=("data", "weight", "input_zero_point", "kernel_zero_point", "input_scale", "kernel_scale"),
    type_rel=_dense_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None, "out_dtype": "int32"},
    reference=_dense_ref,
    compute=_dense_compute,
    doc="Quantized dense: int32 sum_k (data - zp) * (weight - kernel_zp), weight [units, K].",
))


def _rescaled(q: np.ndarray, zp: Any, scale: Any, out_scale: Any) -> np.ndarray:
    ratio = np.float64(np.asarray(scale).reshape(())) / np.float64(np.asarray(out_scale).reshape(()))
    return rescale_along(q.astype(np.int64) - np.int64(np.asarray(zp).reshape(())), ratio, -1, "UPWARD")



# ---- qnn.concatenate ----------------------------------------------------------------------------


def _concat_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.concatenate"
    fields = tuple_arg(op, arg_types, 0, "data")
    scales = tuple_arg(op, arg_types, 1, "input_scales")
    zps = tuple_arg(op, arg_types, 2, "input_zero_points")
    if not fields or len(scales) != len(fields) or len(zps) != len(fields):
        raise rel_error(op, f"{len(fields)} inputs need as many input scales and zero points, got "
                            f"{len(scales)} and {len(zps)}")
    for k, (s, z) in enumerate(zip(scales, zps)):
        _scalar_or_vector(op, s, f"input_scales.{k}", "float32", None)
        _scalar_or_vector(op, z, f"input_zero_points.{k}", "int32", None)
    for k, (name, dtype) in enumerate((("output_scale", "float32"), ("output_zero_point", "int32")), start=3):
        _scalar_or_vector(op, tensor_arg(op, arg_types, k, name), name, dtype, None)
    first = fields[0]
    axis = normalize_axis(op, attrs["axis"], len(first.shape))
    size = 0
    for k, f in enumerate(fields):
        same = len(f.shape) == len(first.shape) and all(
            a == b for d, (a, b) in enumerate(zip(f.shape, first.shape)) if d != axis)
        if f.dtype != first.dtype or f.dtype not in INT8 or not same:
            raise rel_error(op, f"input {k} of shape {fmt_shape(f.shape)} ({f.dtype}) does not join input 0 "
                                f"of shape {fmt_shape(first.shape)} ({first.dtype}) on axis {axis}")
        size += f.shape[axis]
    shape = list(first.shape)
    shape[axis] = size
    return TensorType(tuple(shape), first.dtype)


def _concat_ref(attrs: Attrs, data, scales, zps, out_scale, out_zp) -> np.ndarray:
    parts = [_rescaled(d, z, s, out_scale) + np.int64(np.asarray(out_zp).reshape(()))
             for d, s, z in zip(data, scales, zps)]
    return F.saturate(np.concatenate(parts, axis=attrs["axis"]), str(data[0].dtype))


def _concat_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E

    n = (len(inputs) - 2) // 3
    data, scales, zps = inputs[:n], inputs[n:2 * n], inputs[2 * n:3 * n]
    out_scale, out_zp = inputs[3 * n], inputs[3 * n + 1]
    axis = attrs["axis"] % data[0].ndim
    rescalers = [fixed_point_rescaler(s, out_scale, "UPWARD", "qnn.concatenate") for s in scales]
    offsets = list(np.cumsum([0] + [t.shape[axis] for t in data]))
    dtype = tc.out_dtype(out_type)

    def body(*i: E.Expr) -> E.Expr:
        def read(k: int) -> E.Expr:
            t = data[k]
            idx = tuple(E.maximum(E.minimum(v - int(offsets[k]), t.shape[axis] - 1), 0) if d == axis else v
                        for d, v in enumerate(i))
            diff = E.cast(t[idx], "int64") - E.cast(_qparam(zps[k], i, 0), "int64")
            return rescalers[k](diff, i)

        out = read(n - 1)
        for k in range(n - 2, -1, -1):
            out = E.select(i[axis] < int(offsets[k + 1]), read(k), out)
        return F.saturate_expr(out + E.cast(_qparam(out_zp, i, 0), "int64"), dtype)

    return tc.compute0(tc.out_shape(out_type), body, "qnn_concatenate", tag="injective")


register(OpDef(
    name="qnn.concatenate",
    arg_names=("data", "input_scales", "input_zero_points", "output_scale", "output_zero_point"),
    type_rel=_concat_rel,
    pattern=OpPattern.INJECTIVE,
    attrs={"axis": 0},
    reference=_concat_ref,
    compute=_concat_compute,
    doc="Quantized concatenate: each input rescaled to the output's scale and zero point.",
))

__all__ = ["constant_value"]
