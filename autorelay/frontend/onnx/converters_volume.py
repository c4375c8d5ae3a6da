"""3-d convolutions from 2-d ones: the IR's convolutions are 1-d and 2-d, and a volume's depth axis
folds into the batch, so the tuned 2-d kernels serve video and medical-imaging models too.

Conv: output depth k reads input depths `k * stride + j * dilation` (after the depth padding) for
kernel depths j. Each j's planes are one strided slice of the depth-first input, so every output
plane is a 2-d convolution of the kd planes it reads. Without groups those kd planes are stacked
along the channels and convolved once with the weight's depth taps stacked the same way (one 2-d
convolution with kd times the input channels: one kernel, one task to tune, nothing recomputed).
With groups, stacking would break the groups' channel blocks, so the kd taps are kd grouped 2-d
convolutions of the same shape (one task), summed.

ConvTranspose: one 2-d transposed convolution per kernel depth, spread over the output depths
(`conv3d_transpose`).
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder
from autorelay.ir.expr import Expr


def _planar(window: dict) -> dict:
    """A 3-d window's height and width part, for the 2-d convolutions."""
    pads = window["padding"]
    out = dict(window, strides=window["strides"][1:], dilation=window["dilation"][1:],
               kernel_size=window["kernel_size"][1:], padding=pads[1:3] + pads[4:])
    if "output_padding" in window:
        out["output_padding"] = window["output_padding"][1:]
    return out


def conv3d(g: GraphBuilder, x: Expr, w: Expr, window: dict) -> Expr:
    """x [n, c, d, h, w] convolved with w [co, c / groups, kd, kh, kw] (see the module docstring)."""
    n, c, d, h, wd = g.static_shape(x, "X")
    co, per_group, kd, kh, kw = g.static_shape(w, "W")
    s, dil = window["strides"][0], window["dilation"][0]
    before, after = window["padding"][0], window["padding"][3]
    od = (d + before + after - (kd - 1) * dil - 1) // s + 1
    if od < 1:
        raise g.fail(f"a depth of {d} (padded by {before} and {after}) is smaller than the kernel's "
                     f"{(kd - 1) * dil + 1}")
    planar = _planar(window)
    depth_first = g.call("transpose", x, axes=(0, 2, 1, 3, 4))  # [n, d, c, h, w]
    if before or after:
        width = ((0, 0), (before, after), (0, 0), (0, 0), (0, 0))
        depth_first = g.call("nn.pad", depth_first, g.scalar(0.0, x), pad_width=width)

    def planes(j: int) -> Expr:  # [n, od, c, h, w]: the input planes kernel depth j reads
        begin = j * dil
        return g.call("strided_slice", depth_first, begin=(begin,), end=(begin + (od - 1) * s + 1,),
                      strides=(s,), axes=(1,))

    if window["groups"] == 1:
        taps = [planes(j) for j in range(kd)]
        stacked = taps[0] if kd == 1 else g.call("concatenate", g.tuple(taps), axis=2)
        stacked = g.call("reshape", stacked, newshape=(n * od, kd * c, h, wd))
        depth_major = g.call("transpose", w, axes=(0, 2, 1, 3, 4))  # [co, kd, c, kh, kw], as stacked
        w2 = g.call("reshape", depth_major, newshape=(co, kd * per_group, kh, kw))
        y = g.call("nn.conv2d", stacked, w2, **planar)
    else:
        y = None
        for j in range(kd):
            wj = g.call("reshape", g.call("strided_slice", w, begin=(j,), end=(j + 1,), axes=(2,)),
                        newshape=(co, per_group, kh, kw))
            yj = g.call("nn.conv2d", g.call("reshape", planes(j), newshape=(n * od, c, h, wd)), wj, **planar)
            y = yj if y is None else g.call("add", y, yj)
    assert y is not None
    oh, ow = g.static_shape(y)[2:]
    return g.call("transpose", g.call("reshape", y, newshape=(n, od, co, oh, ow)), axes=(0, 2, 1, 3, 4))


def conv3d_transpose(g: GraphBuilder, x: Expr, w: Expr, window: dict) -> Expr:
    """3-d transposed convolution from 2-d ones: the IR has no 3-d convolution.

    Input depth i and kernel depth j add to output depth `i * stride + j * dilation` (before the
    depth padding is cropped), so each kernel depth slice is one 2-d transposed convolution of every
    input depth at once (depth folded into the batch), spread over the output depths with the stride
    (zero rows between them), shifted by `j * dilation` and summed: Kd 2-d convolutions, exactly.
    """
    n, c, d, h, wd = g.static_shape(x, "X")
    kd, s, dil = window["kernel_size"][0], window["strides"][0], window["dilation"][0]
    pb, pe, op = window["padding"][0], window["padding"][3], window["output_padding"][0]
    win2 = _planar(window)
    full = s * (d - 1) + (kd - 1) * dil + 1 + op  # output depth before cropping the padding
    planes = g.call("reshape", g.call("transpose", x, axes=(0, 2, 1, 3, 4)), newshape=(n * d, c, h, wd))
    wshape = g.static_shape(w, "W")
    total = None
    for j in range(kd):
        wj = g.call("strided_slice", w, begin=(j,), end=(j + 1,), axes=(2,))
        wj = g.call("reshape", wj, newshape=wshape[:2] + wshape[3:])
        yj = g.call("nn.conv2d_transpose", planes, wj, **win2)
        co, oh, ow = g.static_shape(yj)[1:]
        yj = g.call("transpose", g.call("reshape", yj, newshape=(n, d, co, oh * ow)), axes=(0, 2, 1, 3))
        if s > 1:  # output depth i * s: s - 1 zero rows after every input depth
            zeros = g.const(np.zeros((n, co, d, s - 1, oh * ow), dtype=g.dtype(yj)))
            rows = g.tuple([g.call("expand_dims", yj, axis=3), zeros])
            yj = g.call("reshape", g.call("concatenate", rows, axis=3), newshape=(n, co, d * s, oh * ow))
        tail = full - j * dil - d * s
        width = ((0, 0), (0, 0), (j * dil, max(tail, 0)), (0, 0))
        yj = g.call("nn.pad", yj, g.scalar(0.0, yj), pad_width=width)
        if tail < 0:  # only zero rows of the stride spreading hang past the output
            yj = g.call("strided_slice", yj, begin=(0,), end=(full,), axes=(2,))
        total = yj if total is None else g.call("add", total, yj)
    assert total is not None
    total = g.call("strided_slice", total, begin=(pb,), end=(full - pe,), axes=(2,))
    return g.call("reshape", total, newshape=(n, co, full - pb - pe, oh, ow))
