"""bfloat16 tensor computes: bf16 operands, float32 products and float32 accumulation.

A bf16 tensor is stored as uint16 words (neither the IR nor NumPy has a bfloat16 type); every read
of one is widened with `bf16_to_f32` (exact), so the computes state plain float32 arithmetic on the
rounded values. The products of two bf16 values are exact in float32 (8-bit significands), so the
only rounding left is the float32 accumulation, as in the fp32 kernels.

The dense is tagged `dense_bf16`: its template packs the weight in pairs of K and tensorizes the
pair as a bf16 dot (`vdpbf16ps` with AVX512-BF16, two FMAs elsewhere; see
`autorelay.codegen.llvm.dot.emit_bf16_dot`). The convolution is the fp32 NCHW convolution with
widened reads (tag `conv2d_nchw`), so it takes the fp32 NCHW template.
"""

from __future__ import annotations

import numpy as np

from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.nn import _out_dim, _pad4, _pair, conv2d_nchw_window
from autorelay.te.tensor import Tensor

BF16_STORAGE = "uint16"


def _check_bf16(op: str, *tensors: Tensor) -> None:
    for t in tensors:
        if t.dtype != BF16_STORAGE:
            raise ValueError(f"{op}: operand {t.name} must hold bf16 words ({BF16_STORAGE}), got {t.dtype}")


def widen(x: E.Expr) -> E.Expr:
    """A bf16 word read as the float32 it stands for."""
    return E.call("bf16_to_f32", x)


def dense_bf16(data: Tensor, weight: Tensor, name: str = "dense_bf16") -> Tensor:
    """data [M, K], weight [N, K] (bf16 words) -> float32 [M, N] = sum_k data[m, k] * weight[n, k]."""
    _check_bf16(name, data, weight)
    if data.ndim != 2 or weight.ndim != 2 or data.shape[1] != weight.shape[1]:
        raise ValueError(f"{name}: data {data.shape} and weight {weight.shape} disagree on K")
    m, k = data.shape
    rk = te.reduce_axis(k, "k")
    return te.compute(
        (m, weight.shape[0]),
        lambda i, j: te.sum(widen(data[i, rk]) * widen(weight[j, rk]), [rk]),
        name=name,
        tag="dense_bf16",
        attrs={"weight": weight.name, "data": data.name},
    )


def conv2d_nchw_bf16(data: Tensor, weight: Tensor, strides=1, padding=0, dilation=1,
                     name: str = "conv2d_bf16") -> Tensor:
    """data [N, C, H, W], weight [O, C, KH, KW] (bf16 words) -> float32 [N, O, OH, OW]; the padded
    border reads the word 0 (+0.0).

    The padding stage also interleaves channel pairs (`[N, C/2, H', W', 2]`), so the two words a
    bf16 dot multiplies per pixel are one 32-bit load; that form is tagged `conv2d_nchw_bf16` (the
    pair-dot template). An odd channel count (an RGB stem) gets a zero channel in that stage and a
    zero input channel in the weight, which must then be a constant (a new constant input; +0.0
    words add nothing); with an unknown weight an odd count keeps the fp32 template's form."""
    if data.ndim == 4 and data.shape[1] % 2 == 0:
        return _conv2d_pairs(data, weight, strides, padding, dilation, name)
    value = getattr(weight, "value", None)
    if data.ndim == 4 and weight.ndim == 4 and value is not None:
        even = np.pad(np.asarray(value), ((0, 0), (0, 1), (0, 0), (0, 0)))
        return _conv2d_pairs(data, te.constant(even, BF16_STORAGE, f"{weight.name}_even"), strides, padding,
                             dilation, name)
    _check_bf16(name, data, weight)
    x, shape, (sh, sw), (dh, dw), (rc, rh, rw) = conv2d_nchw_window(data, weight, strides, padding,
                                                                    dilation, name, name, pad_value=0)

    def body(b, f, y, xx):
        pixel = widen(x[b, rc, y * sh + rh * dh, xx * sw + rw * dw])
        return te.sum(pixel * widen(weight[f, rc, rh, rw]), [rc, rh, rw])

    return te.compute(shape, body, name=name, tag="conv2d_nchw", attrs={"weight": weight.name})


def _conv2d_pairs(data: Tensor, weight: Tensor, strides, padding, dilation, name: str) -> Tensor:
    """The interleaved form; `weight` may have one more (zero) input channel than `data` has."""
    _check_bf16(name, data, weight)
    n, c, h, w = data.shape
    oc, ic, kh, kw = weight.shape
    if ic not in (c, c + 1) or ic % 2:
        raise ValueError(f"{name}: data has {c} channels, weight expects {ic}")
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb, dh), _out_dim(w, kw, sw, pl, pr, dw)

    def interleave(b, c2, y, xx, p):
        j, i, ch = y - pt, xx - pl, c2 * 2 + p
        conds = [j >= 0, j < h, i >= 0, i < w]
        if ic > c:  # the zero channel that makes an odd count even
            conds.append(ch < c)
            ch = E.minimum(ch, c - 1)
        src = data[b, ch, E.maximum(E.minimum(j, h - 1), 0), E.maximum(E.minimum(i, w - 1), 0)]
        return E.select(E.all_of(*conds), src, E.const(0, BF16_STORAGE))

    x = te.compute((n, ic // 2, h + pt + pb, w + pl + pr, 2), interleave, name=f"{name}_pad", tag="pad")
    rc, rh, rw = te.reduce_axis(ic, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")

    def body(b, f, y, xx):
        pixel = widen(x[b, rc // 2, y * sh + rh * dh, xx * sw + rw * dw, rc % 2])
        return te.sum(pixel * widen(weight[f, rc, rh, rw]), [rc, rh, rw])

    # no weight name in the attrs: lowering renames a constant made here (the zero-channel weight)
    return te.compute((n, oc, oh, ow), body, name=name, tag="conv2d_nchw_bf16")
