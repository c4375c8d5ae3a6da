"""Tensor computes of the convolutions in which an output channel reads only its own channel or
its own small group: depthwise convolution in NCHW and NCHW[x]c, and grouped convolution whose
groups pack whole into a channel block. The int8 depthwise compute (`te.nn_int8`) shares their
window, `depthwise_nchwc_window`.
"""

from __future__ import annotations

from autorelay.te import tensor as te
from autorelay.te.nn import _out_dim, _pad4, _pair, pad
from autorelay.te.tensor import Tensor


def depthwise_conv2d_nchw(data: Tensor, weight: Tensor, strides=1, padding=0, name: str = "dwconv",
                          dilation=1) -> Tensor:
    n, c, h, w = data.shape
    wc, mult, kh, kw = weight.shape
    if wc != c or mult != 1:
        raise ValueError(f"depthwise_conv2d: weight {weight.shape} must be [C=={c}, 1, KH, KW]")
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb, dh), _out_dim(w, kw, sw, pl, pr, dw)
    x = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), name=f"{name}_pad")
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    return te.compute(
        (n, c, oh, ow),
        lambda b, f, y, xx: te.sum(
            x[b, f, y * sh + rh * dh, xx * sw + rw * dw] * weight[f, 0, rh, rw], [rh, rw]),
        name=name,
        tag="depthwise_conv2d_nchw",
    )


def depthwise_nchwc_window(data: Tensor, weight: Tensor, strides, padding, name: str, pad_value=0.0,
                           group: int = 1, dilation=1
                           ) -> tuple[Tensor, tuple[int, ...], tuple[int, int], tuple[int, int],
                                      te.IterVar, te.IterVar]:
    """What a depthwise (or, with `group` channels per group, a packed grouped) NCHW[x]c
    convolution reads, checked: (the padded data, the output shape, the strides, the dilations,
    the two spatial reduction axes). Shared by the float and the int8 computes."""
    n, cb, h, w, b = data.shape
    wcb, one, kh, kw, wg, wb = weight.shape
    if (wcb, one, wg, wb) != (cb, 1, group, b) or b % group:
        raise ValueError(f"{name}: weight {weight.shape} must be [{cb}, 1, KH, KW, {group}, {b}] "
                         f"with {group} dividing {b}")
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb, dh), _out_dim(w, kw, sw, pl, pr, dw)
    x = pad(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), value=pad_value, name=f"{name}_pad")
    return x, (n, cb, oh, ow, b), (sh, sw), (dh, dw), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")


def depthwise_conv2d_nchwc(data: Tensor, weight: Tensor, strides=1, padding=0,
                           name: str = "depthwise_nchwc", dilation=1) -> Tensor:
    """data [N, C/b, H, W, b], weight [C/b, 1, KH, KW, 1, b] (OIHW1i{b}o) -> [N, C/b, OH, OW, b]:
    each channel block is one vector of b lanes (template `depthwise_nchwc`)."""
    x, shape, (sh, sw), (dh, dw), rh, rw = depthwise_nchwc_window(data, weight, strides, padding, name,
                                                                  dilation=dilation)
    return te.compute(
        shape,
        lambda i, c, y, z, v: te.sum(
            x[i, c, y * sh + rh * dh, z * sw + rw * dw, v] * weight[c, 0, rh, rw, 0, v], [rh, rw]),
        name=name,
        tag="depthwise_nchwc",
    )


def packed_group_conv2d_nchwc(data: Tensor, weight: Tensor, strides=1, padding=0,
                              name: str = "group_conv2d_nchwc", dilation=1) -> Tensor:
    """data [N, C/b, H, W, b], weight [C/b, 1, KH, KW, g, b] (OIHW{g}i{b}o) -> [N, C/b, OH, OW, b]:
    a grouped convolution of g input and g output channels per group with b/g whole groups packed
    in each block, so a block reads only itself (ResNeXt's groups of 4 or 8 channels in blocks of
    one vector, where blocks of g would cost a re-layout on each side and short vectors). Output
    lane v sums the g lanes of its own group, v // g * g + rc, which a vector kernel reads as one
    load and a lane shuffle per rc. Depthwise is the case g = 1 (`depthwise_conv2d_nchwc`, whose
    compute has no group axis); one template schedules both."""
    g = weight.shape[4]
    if g == 1:
        return depthwise_conv2d_nchwc(data, weight, strides, padding, dilation=dilation)
    x, shape, (sh, sw), (dh, dw), rh, rw = depthwise_nchwc_window(data, weight, strides, padding, name,
                                                                  group=g, dilation=dilation)
    rc = te.reduce_axis(g, "rc")
    return te.compute(
        shape,
        lambda i, c, y, z, v: te.sum(
            x[i, c, y * sh + rh * dh, z * sw + rw * dw, v // g * g + rc] * weight[c, 0, rh, rw, rc, v],
            [rc, rh, rw]),
        name=name,
        tag="group_conv2d_nchwc",
    )
