"""Tensor computes of `nn.conv1d` and `nn.conv2d` (the op definitions live in `conv`).

conv2d maps each supported layout onto a declaration in `autorelay.te.nn` whose tag picks a direct
convolution template (a 1x1 stride-1 NCHW convolution is declared as the GEMM over pixels it is);
conv1d is a plain reduction over (input channel, tap) that the generic reduction template
vectorizes along the output width.
"""

from __future__ import annotations

from typing import Any

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import Type


def _pointwise(wshape: tuple, strides: tuple, pad: tuple, dil: tuple) -> bool:
    """A 1x1 kernel at stride 1 without padding: a GEMM over pixels (`te.nn.conv2d_1x1_nchw`)."""
    return tuple(wshape[2:]) == (1, 1) and tuple(strides) == (1, 1) and not any(pad) \
        and tuple(dil) == (1, 1)


def direct_nchwc(attrs: Attrs) -> bool:
    """Whether a conv2d with these attrs is the direct NCHW[x]c convolution (`te.nn.conv2d_nchwc`):
    blocked data and output, the matching blocked kernel (in groups: each group's channels in whole
    blocks), any dilation."""
    dl, kl, ol = attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"]
    return dl.startswith("NCHW") and dl.endswith("c") and ol.startswith("NCHW") \
        and kl == f"OIHW{dl[4:-1]}i{ol[4:-1]}o"


def packed_groups(attrs: Attrs, data_shape: tuple) -> int:
    """The channels per group of a grouped NCHW[b]c convolution whose groups are packed whole in
    each block (kernel `OIHW{g}i{b}o`, g dividing b, g channels in and out per group; g = 1 is
    depthwise), else 0 (`te.nn_depthwise.packed_group_conv2d_nchwc`)."""
    dl, kl, ol = attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"]
    if dl != ol or not (dl.startswith("NCHW") and dl.endswith("c")):
        return 0
    b = dl[4:-1]
    if not b.isdigit() or not (kl.startswith("OIHW") and kl.endswith(f"i{b}o")) or len(data_shape) != 5:
        return 0
    g = kl[4:-len(f"i{b}o")]
    if not g.isdigit() or int(g) < 1 or int(b) % int(g) \
            or attrs["groups"] * int(g) != data_shape[1] * data_shape[4]:
        return 0
    return int(g)


def conv2d_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """NCHW/OIHW (plain, depthwise when groups == channels, else grouped), NCHW[x]c/OIHW[x]i[y]o
    and NCHW[b]c/OIHW[g]i[b]o (depthwise, g = 1, or small groups packed in blocks) convolutions."""
    from autorelay.op import te_compute as tc
    from autorelay.op.conv import is_depthwise
    from autorelay.te import nn as tnn
    from autorelay.te import nn_depthwise

    data, weight = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    if attrs["out_dtype"] and attrs["out_dtype"] != data.dtype:
        raise tc.Unsupported(f"out_dtype {attrs['out_dtype']} differs from the data dtype {data.dtype}")
    dl, kl, ol = attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"]
    strides, pad, dil, groups = attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"]
    if (dl, kl, ol) == ("NCHW", "OIHW", "NCHW"):
        if groups == 1 and _pointwise(weight.shape, strides, pad, dil):
            out = tnn.conv2d_1x1_nchw(data, weight)
        elif groups == 1:
            out = tnn.conv2d_nchw(data, weight, strides, pad, dil)
        elif is_depthwise(groups, data.shape[1], weight.shape[0]):
            out = nn_depthwise.depthwise_conv2d_nchw(data, weight, strides, pad, dilation=dil)
        else:
            out = _grouped_conv2d(data, weight, groups, strides, pad, dil)
    elif direct_nchwc(attrs):
        out = tnn.conv2d_nchwc(data, weight, strides, pad, groups=groups, dilation=dil)
    elif packed_groups(attrs, data.shape):  # depthwise (g = 1) or small groups packed in blocks
        out = nn_depthwise.packed_group_conv2d_nchwc(data, weight, strides, pad, dilation=dil)
    else:
        raise tc.Unsupported(f"layouts {dl}/{kl}->{ol} with groups={groups}, dilation={dil} have no compute")
    if tuple(out.shape) != tc.out_shape(out_type):
        raise tc.Unsupported(f"compute shape {out.shape} differs from the type's {tc.out_shape(out_type)}")
    return out


def _grouped_conv2d(data: Any, weight: Any, groups: int, strides: Any, pad: Any, dil: Any) -> Any:
    """An NCHW/OIHW convolution in groups that is neither plain nor the depthwise kernel (ResNeXt's
    and AlexNet's groups): output channel f reads the C/groups input channels of its group, as
    `conv1d_compute` does. Tagged `reduce`, so the generic reduction
    template schedules it (vectors along the output width)."""
    from autorelay.te import nn as tnn
    from autorelay.te import tensor as te

    x, shape, (sh, sw), (dh, dw), (rc, rh, rw) = tnn.conv2d_nchw_window(
        data, weight, strides, pad, dil, "group_conv2d", "conv2d", groups=groups)
    cg, per_group = weight.shape[1], shape[1] // groups

    def body(b: Any, f: Any, y: Any, xx: Any) -> Any:
        tap = x[b, f // per_group * cg + rc.var, y * sh + rh.var * dh, xx * sw + rw.var * dw]
        return te.sum(tap * weight[f, rc, rh, rw], [rc, rh, rw])

    return te.compute(shape, body, name="group_conv2d", tag="reduce", attrs={"weight": weight.name})


def conv1d_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """NCW/OIW convolution with strides, padding, dilation and groups:
    out[b, f, x] = sum over (c, k) of pad(data)[b, group(f) * C/groups + c, x * s + k * d] * w[f, c, k]."""
    from autorelay.op import te_compute as tc
    from autorelay.te import nn as tnn
    from autorelay.te import tensor as te

    data, weight = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    if attrs["out_dtype"] and attrs["out_dtype"] != data.dtype:
        raise tc.Unsupported(f"out_dtype {attrs['out_dtype']} differs from the data dtype {data.dtype}")
    layouts = (attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"])
    if layouts != ("NCW", "OIW", "NCW"):
        raise tc.Unsupported(f"conv1d layouts {layouts} have no compute (only NCW/OIW)")
    n, o, ow = tc.out_shape(out_type)
    cg, kw = weight.shape[1], weight.shape[2]
    og = o // attrs["groups"]
    (s,), (d,), (pl, pr) = attrs["strides"], attrs["dilation"], attrs["padding"]
    x = tnn.pad(data, (0, 0, pl), (0, 0, pr), name="conv1d_pad")
    rc, rk = te.reduce_axis(cg, "rc"), te.reduce_axis(kw, "rk")

    def body(b: Any, f: Any, xx: Any) -> Any:
        ch = rc.var if attrs["groups"] == 1 else f // og * cg + rc.var
        return te.sum(x[b, ch, xx * s + rk.var * d] * weight[f, rc, rk], [rc, rk])

    return te.compute((n, o, ow), body, name="conv1d", tag="reduce")


def conv_backward_weight_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """d(conv)/d(weight) in the canonical layouts (NCW/NCHW data and grad, OIW/OIHW weight):
    dw[f, c, k...] = sum over (n, out positions) of grad[n, f, out...] * pad(data)[n, group(f) *
    C/groups + c, out * s + k * d]: the training step's weight gradient, compiled. Tagged `reduce`,
    so the generic reduction template schedules it."""
    from autorelay.op import te_compute as tc
    from autorelay.te import nn as tnn
    from autorelay.te import tensor as te

    grad, data = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    nsp = data.ndim - 2
    sp = {1: "W", 2: "HW"}[nsp]
    layouts = (attrs["grad_layout"], attrs["data_layout"], attrs["kernel_layout"])
    if layouts != ("NC" + sp, "NC" + sp, "OI" + sp):
        raise tc.Unsupported(f"layouts {layouts} have no compute (only NC{sp}/OI{sp})")
    if (attrs["out_dtype"] and attrs["out_dtype"] != grad.dtype) or grad.dtype != data.dtype:
        raise tc.Unsupported("mixed dtypes have no compute")
    shape = tc.out_shape(out_type)
    strides, dil, pads = attrs["strides"], attrs["dilation"], attrs["padding"]
    x = tnn.pad(data, (0, 0, *pads[:nsp]), (0, 0, *pads[nsp:]), name="backward_weight_pad")
    per_group, cg = shape[0] // attrs["groups"], shape[1]
    rn = te.reduce_axis(grad.shape[0], "rn")
    rout = [te.reduce_axis(e, f"ro{i}") for i, e in enumerate(grad.shape[2:])]

    def body(f: Any, c: Any, *k: Any) -> Any:
        ch = c if attrs["groups"] == 1 else f // per_group * cg + c
        at = [o.var * s + kk * d for o, s, kk, d in zip(rout, strides, k, dil)]
        return te.sum(grad[(rn.var, f, *(o.var for o in rout))] * x[(rn.var, ch, *at)], [rn, *rout])

    return tc.compute0(shape, body, "conv_backward_weight", tag="reduce")
