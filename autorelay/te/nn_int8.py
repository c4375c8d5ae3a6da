"""Integer tensor computes: 8-bit operands, 32-bit accumulation (the bodies of the qnn kernels).

The weight of the convolution is laid out for the host's integer dot-product instructions: the
input-channel block is split into groups of `group` consecutive channels that one instruction
multiplies and sums into one 32-bit lane (AVX-512 VNNI `vpdpbusd` sums 4 byte products per lane,
`vpmaddwd` 2 word products), and a vector of output channels sits between the group and the
channel blocks, so one weight load feeds one instruction for `oc_bn` lanes.

The computes state only the arithmetic (every product widened to int32, summed in int32); the
templates tagged `conv2d_nchwc_int8` and `dense_int8` decide how the group is computed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.nn import _out_dim, _pad4, _pair, pad
from autorelay.te.nn_depthwise import depthwise_nchwc_window
from autorelay.te.tensor import Tensor

INT8_DTYPES = ("int8", "uint8")
DOT_GROUP = 4  # input channels one int32 lane sums per dot-product instruction (the weight layout's g)


def _check_int8(op: str, *tensors: Tensor) -> None:
    for t in tensors:
        if t.dtype not in INT8_DTYPES:
            raise ValueError(f"{op}: operand {t.name} must be int8 or uint8, got {t.dtype}")


def narrow_pairs(weight: np.ndarray) -> bool:
    """Whether every adjacent pair along the last (group) axis of an int8 weight sums to at most
    128 in magnitude: then a byte multiply-add of unsigned data (`vpmaddubsw`, int16 pair sums)
    cannot saturate (255 * 128 < 32768). True of any weight quantized to 7 bits."""
    w = np.abs(np.asarray(weight).astype(np.int16))
    if w.shape[-1] % 2:
        return False  # a group is never odd; a dense's odd K is padded with a zero by its caller
    return bool(np.all(w[..., 0::2] + w[..., 1::2] <= 128))


def conv2d_nchwc_int8(
    data: Tensor,
    weight: Tensor,
    strides=1,
    padding=0,
    pad_value: int = 0,
    name: str = "conv2d_nchwc_int8",
    narrow: bool = False,
) -> Tensor:
    """data [N, C/icb, H, W, icb] (u8 or s8), weight [OC/ocb, C/icb, KH, KW, icb/g, ocb, g] (s8)
    -> int32 [N, OC/ocb, OH, OW, ocb] = sum over (c, kh, kw) of data * weight, the padded border
    reading `pad_value` (a quantized input's zero point: real zero). `narrow`: the caller checked
    the constant weight with `narrow_pairs` (recorded in the attrs; templates may then use a byte
    multiply-add)."""
    _check_int8(name, data, weight)
    n, co, h, w, icb = data.shape
    oco, ico, kh, kw, groups, ocb, g = weight.shape
    if co != ico or groups * g != icb:
        raise ValueError(f"{name}: data {data.shape} and weight {weight.shape} disagree on channels")
    (sh, sw) = _pair(strides)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb), _out_dim(w, kw, sw, pl, pr)
    x = pad(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), value=int(pad_value), name=f"{name}_pad")
    rc, rh, rw = te.reduce_axis(co * icb, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def body(b, f, y, xx, v):
        pixel = E.cast(x[b, rc // icb, y * sh + rh, xx * sw + rw, rc % icb], "int32")
        tap = E.cast(weight[f, rc // icb, rh, rw, (rc % icb) // g, v, rc % g], "int32")
        return te.sum(pixel * tap, [rc, rh, rw])

    return te.compute(
        (n, oco, oh, ow, ocb),
        body,
        name=name,
        tag="conv2d_nchwc_int8",
        attrs={"ic_bn": icb, "oc_bn": ocb, "group": g, **({"narrow": 1} if narrow else {})},
    )


def depthwise_conv2d_nchwc_int8(data: Tensor, weight: Tensor, strides=1, padding=0, pad_value: int = 0,
                                name: str = "depthwise_nchwc_int8", weight_value: np.ndarray | None = None
                                ) -> Tensor:
    """data [N, C/b, H, W, b] (u8 or s8), weight [C/b, 1, KH, KW, g, b] (s8) -> int32
    [N, C/b, OH, OW, b] = sum over (kh, kw) of data * weight, the border reading `pad_value`. Each
    channel block is one vector of lanes; the float template `depthwise_nchwc` schedules it (the
    tag), widening the bytes as it loads them. With g > 1 channels per group, b/g whole groups
    are packed in each block and lane v also sums over its group's g lanes, as
    `te.nn_depthwise.packed_group_conv2d_nchwc` does in float.

    The sums run in float32 where that is exact, and are converted to int32 at the end: a product
    of a byte and a signed byte is at most 255 * 128 = 2^15 - 2^7 in magnitude, so every partial
    sum of at most `_F32_EXACT_TAPS` taps is an integer below 2^24, which float32 holds exactly
    (a fused multiply-add rounds only its result, here already exact). Why: CPUs have no cheap
    int32 vector multiply (`vpmulld` is two micro-ops at ten cycles' latency), while a float
    multiply-add issues twice a cycle; no dot-product instruction fits a depthwise convolution,
    whose lanes are channels with one tap each. `weight_value`, the weight's constant value when
    it has one, then becomes a float32 constant, so the kernel loads its taps without converting
    them."""
    _check_int8(name, data, weight)
    g = weight.shape[4]
    x, shape, (sh, sw), _, rh, rw = depthwise_nchwc_window(data, weight, strides, padding, name,
                                                           int(pad_value), group=g)
    acc = "float32" if weight.shape[2] * weight.shape[3] * g <= _F32_EXACT_TAPS else "int32"
    taps = weight
    if acc == "float32" and weight_value is not None:
        taps = te.constant(weight_value, "float32", f"{name}_weight_f32")
    rc = te.reduce_axis(g, "rc") if g > 1 else None
    tag = "depthwise_nchwc" if rc is None else "group_conv2d_nchwc"

    def body(i, c, y, z, v):
        if rc is None:  # depthwise
            pixel = E.cast(x[i, c, y * sh + rh, z * sw + rw, v], acc)
            return te.sum(pixel * E.cast(taps[c, 0, rh, rw, 0, v], acc), [rh, rw])
        pixel = E.cast(x[i, c, y * sh + rh, z * sw + rw, v // g * g + rc], acc)
        return te.sum(pixel * E.cast(taps[c, 0, rh, rw, rc, v], acc), [rc, rh, rw])

    if acc == "int32":
        return te.compute(shape, body, name=name, tag=tag)
    sums = te.compute(shape, body, name=f"{name}_f32", tag=tag)
    return te.compute(shape, lambda *i: E.cast(sums[i], "int32"), name=name)


# taps whose byte x signed-byte products always sum exactly in float32: n * 2^15 <= 2^24
_F32_EXACT_TAPS = 1 << 9


def dense_int8(data: Tensor, weight: Tensor, name: str = "dense_int8", narrow: bool = False) -> Tensor:
    """data [M, K] (u8 or s8), weight [N, K] (s8) -> int32 [M, N] = sum_k data[m, k] * weight[n, k].
    `narrow`: the caller checked the constant weight's pairs along K (`narrow_pairs`)."""
    _check_int8(name, data, weight)
    if data.ndim != 2 or weight.ndim != 2 or data.shape[1] != weight.shape[1]:
        raise ValueError(f"{name}: data {data.shape} and weight {weight.shape} disagree on K")
    m, k = data.shape
    nn = weight.shape[0]
    rk = te.reduce_axis(k, "k")
    return te.compute(
        (m, nn),
        lambda i, j: te.sum(E.cast(data[i, rk], "int32") * E.cast(weight[j, rk], "int32"), [rk]),
        name=name,
        tag="dense_int8",
        attrs={"weight": weight.name, "data": data.name, **({"narrow": 1} if narrow else {})},
    )


def conv2d_nchw_q(
    data: Tensor,
    weight: Tensor,
    data_zero: E.Expr,
    weight_zero: Callable[[E.Expr], E.Expr],
    strides=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    name: str = "qconv2d",
) -> Tensor:
    """Any quantized NCHW/OIHW convolution (grouped, depthwise, dilated), zero points subtracted
    in the body: out[b, f, y, x] = sum over (c, kh, kw) of (data - data_zero) * (weight -
    weight_zero(f)), the border reading `data_zero` (real zero). The general, unblocked form; the
    NCHW[x]c form with a zero weight zero point is `conv2d_nchwc_int8`."""
    _check_int8(name, data, weight)
    n, _c, h, w = data.shape
    o, cg, kh, kw = weight.shape
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    pt, pl, pb, pr = _pad4(padding)
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    x = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), value=E.cast(data_zero, data.dtype), name=f"{name}_pad")
    og = o // groups
    rc, rh, rw = te.reduce_axis(cg, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    zero = E.cast(data_zero, "int32")

    def body(b, f, y, xx):
        ch = rc.var if groups == 1 else f // og * cg + rc.var
        pixel = E.cast(x[b, ch, y * sh + rh * dh, xx * sw + rw * dw], "int32") - zero
        tap = E.cast(weight[f, rc, rh, rw], "int32") - E.cast(weight_zero(f), "int32")
        return te.sum(pixel * tap, [rc, rh, rw])

    plain = groups == 1 and (dh, dw) == (1, 1)
    # the conv template packs the weight it names (the group's inputs come in any order)
    return te.compute((n, o, oh, ow), body, name=name, tag="conv2d_nchw" if plain else "reduce",
                      attrs={"weight": weight.name})


def dense_q(data: Tensor, weight: Tensor, data_zero: E.Expr, weight_zero: Callable[[E.Expr], E.Expr],
            name: str = "qdense") -> Tensor:
    """out[..., j] = sum_k (data[..., k] - data_zero) * (weight[j, k] - weight_zero(j)), int32."""
    _check_int8(name, data, weight)
    k = data.shape[-1]
    if weight.ndim != 2 or weight.shape[1] != k:
        raise ValueError(f"{name}: data {data.shape} and weight {weight.shape} disagree on K")
    rk = te.reduce_axis(k, "k")
    zero = E.cast(data_zero, "int32")

    def body(*idx):
        pixel = E.cast(data[(*idx[:-1], rk.var)], "int32") - zero
        tap = E.cast(weight[idx[-1], rk], "int32") - E.cast(weight_zero(idx[-1]), "int32")
        return te.sum(pixel * tap, [rk])

    return te.compute((*data.shape[:-1], weight.shape[0]), body, name=name, tag="reduce")


def depthwise_conv2d_nchw_q(data: Tensor, weight: Tensor, data_zero: E.Expr,
                            weight_zero: Callable[[E.Expr], E.Expr], strides=1, padding=0,
                            name: str = "qdwconv") -> Tensor:
    """Quantized depthwise NCHW convolution (weight [C, 1, KH, KW]), zero points subtracted in the
    body: the depthwise template's form (two reduction axes)."""
    _check_int8(name, data, weight)
    n, c, h, w = data.shape
    _, _, kh, kw = weight.shape
    (sh, sw) = _pair(strides)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb), _out_dim(w, kw, sw, pl, pr)
    x = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), value=E.cast(data_zero, data.dtype), name=f"{name}_pad")
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    zero = E.cast(data_zero, "int32")

    def body(b, f, y, xx):
        pixel = E.cast(x[b, f, y * sh + rh, xx * sw + rw], "int32") - zero
        tap = E.cast(weight[f, 0, rh, rw], "int32") - E.cast(weight_zero(f), "int32")
        return te.sum(pixel * tap, [rh, rw])

    return te.compute((n, c, oh, ow), body, name=name, tag="depthwise_conv2d_nchw")
