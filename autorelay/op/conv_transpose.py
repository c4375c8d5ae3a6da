"""Transposed convolutions `nn.conv1d_transpose` and `nn.conv2d_transpose` (Relay's "deconvolution").

The kernel is `IO<spatial>` by default: `(in_channels, out_channels / groups, *kernel)`. The output
extent is `(in - 1) * stride - pad_before - pad_after + dilation * (kernel - 1) + 1 + output_padding`.
The forward computation scatters every input element times the kernel into a full-size buffer and
crops the padding, which is exactly the adjoint of the strided, padded correlation in `conv.py` —
so the gradient rules of the two ops are each other.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import AnyDim, IncompleteType, TensorType, Type, TypeVar
from autorelay.op.conv import SPATIAL, conv_attrs, normalize_conv_attrs, static_canonical
from autorelay.op.layout import (
    from_canonical_array,
    from_canonical_shape,
    parse_layout,
    swap_io,
    to_canonical_array,
    to_canonical_shape,
)
from autorelay.op.registry import NotReady, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, tensor_arg


def conv_transpose_rel(op: str, nsp: int, arg_types: list[Type], attrs: Attrs) -> Any:
    sp = SPATIAL[nsp]
    data = tensor_arg(op, arg_types, 0, "data")
    dl = parse_layout(op, attrs["data_layout"], "NC" + sp, "data_layout")
    kl = parse_layout(op, attrs["kernel_layout"], "IO" + sp, "kernel_layout")
    ol = parse_layout(op, attrs["out_layout"] or attrs["data_layout"], "NC" + sp, "out_layout")
    n, c, *spatial = to_canonical_shape(op, data.shape, dl, "NC" + sp, "data")
    groups = attrs["groups"]
    w = arg_types[1]
    refined = None
    if isinstance(w, IncompleteType | TypeVar):
        if attrs["channels"] is None or attrs["kernel_size"] is None:
            raise NotReady(f"{op}: weight type unknown and channels/kernel_size not given")
        if attrs["channels"] % groups:
            raise rel_error(op, f"channels={attrs['channels']} is not divisible by groups={groups}")
        canon = (c, attrs["channels"] // groups, *attrs["kernel_size"])
        refined = TensorType(from_canonical_shape(op, canon, kl, "IO" + sp, "weight"), data.dtype)
        w = refined
    weight = w if isinstance(w, TensorType) else tensor_arg(op, arg_types, 1, "weight")
    i, o_per_group, *kshape = to_canonical_shape(op, weight.shape, kl, "IO" + sp, "weight")
    if dim_known_different(c, i):
        raise rel_error(
            op, f"channel mismatch: data of shape {fmt_shape(data.shape)} has {c} input channels "
            f"({attrs['data_layout']}), but weight of shape {fmt_shape(weight.shape)} "
            f"({attrs['kernel_layout']}) expects {i}"
        )
    if isinstance(c, int) and c % groups:
        raise rel_error(op, f"data of shape {fmt_shape(data.shape)} has {c} channels, "
                            f"not divisible by groups={groups}")
    o = o_per_group * groups if isinstance(o_per_group, int) else AnyDim()
    if attrs["channels"] is not None and dim_known_different(o, attrs["channels"]):
        raise rel_error(op, f"weight of shape {fmt_shape(weight.shape)} gives {o} output channels, "
                            f"but channels={attrs['channels']}")
    ks = attrs["kernel_size"]
    if ks is not None and any(dim_known_different(a, b) for a, b in zip(ks, kshape)):
        raise rel_error(op, f"weight of shape {fmt_shape(weight.shape)} has kernel size {tuple(kshape)}, "
                            f"but kernel_size={ks}")
    if not attrs["out_dtype"] and weight.dtype != data.dtype:
        raise rel_error(op, f"data has dtype {data.dtype} but weight has dtype {weight.dtype}")
    pads, s, d, opad = attrs["padding"], attrs["strides"], attrs["dilation"], attrs["output_padding"]
    out_sp: list[Any] = []
    for ax in range(nsp):
        if opad[ax] < 0 or (opad[ax] >= s[ax] and opad[ax] >= d[ax]):
            raise rel_error(op, f"output_padding={opad} must be smaller than the stride {s} or dilation {d}")
        size, k = spatial[ax], kshape[ax]
        if not (isinstance(size, int) and isinstance(k, int)):
            out_sp.append(AnyDim())
            continue
        ext = (size - 1) * s[ax] - pads[ax] - pads[nsp + ax] + d[ax] * (k - 1) + 1 + opad[ax]
        if ext <= 0:
            raise rel_error(op, f"padding {pads} leaves no output for data of shape {fmt_shape(data.shape)}")
        out_sp.append(ext)
    out_shape = from_canonical_shape(op, (n, o, *out_sp), ol, "NC" + sp, "output")
    out = TensorType(out_shape, attrs["out_dtype"] or data.dtype)
    return ([data, refined], out) if refined is not None else out


def conv_transpose_canonical(x: np.ndarray, w: np.ndarray, strides, pads, dilation, out_pad,
                             groups: int, dtype) -> np.ndarray:
    """Scatter-add form of the transposed convolution of `x` (N, C, *S) with `w` (C, O/groups, *K)."""
    nsp = x.ndim - 2
    x = x.astype(dtype, copy=False)
    w = w.astype(dtype, copy=False)
    n, c, in_sp = x.shape[0], x.shape[1], x.shape[2:]
    og, kshape = w.shape[1], w.shape[2:]
    full_sp = [(in_sp[i] - 1) * strides[i] + dilation[i] * (kshape[i] - 1) + 1 + out_pad[i]
               for i in range(nsp)]
    full = np.zeros((n, groups, og, *full_sp), dtype=dtype)
    size, ksize = int(np.prod(in_sp, dtype=np.int64)), int(np.prod(kshape, dtype=np.int64))
    xg = x.reshape(n, groups, c // groups, size)
    # (G, O/G * K, C/G) @ (N, G, C/G, S): every (output channel, kernel offset) contribution at once
    wt = np.swapaxes(w.reshape(groups, c // groups, og * ksize), 1, 2)
    cols = np.matmul(wt[None], xg).reshape(n, groups, og, ksize, *in_sp)
    for j, k in enumerate(itertools.product(*(range(s) for s in kshape))):
        contrib = cols[:, :, :, j]
        window = tuple(
            slice(k[i] * dilation[i], k[i] * dilation[i] + strides[i] * (in_sp[i] - 1) + 1, strides[i])
            for i in range(nsp)
        )
        full[(Ellipsis, *window)] += contrib
    crop = tuple(slice(pads[i], full_sp[i] - pads[nsp + i]) for i in range(nsp))
    return full[(Ellipsis, *crop)].reshape(n, groups * og, *[s_.stop - s_.start for s_ in crop])


def _reference(nsp: int):
    sp = SPATIAL[nsp]

    def reference(attrs: Attrs, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
        dl = parse_layout("conv_transpose", attrs["data_layout"], "NC" + sp)
        kl = parse_layout("conv_transpose", attrs["kernel_layout"], "IO" + sp)
        ol = parse_layout("conv_transpose", attrs["out_layout"] or attrs["data_layout"], "NC" + sp)
        out = conv_transpose_canonical(
            to_canonical_array(data, dl, "NC" + sp), to_canonical_array(weight, kl, "IO" + sp),
            attrs["strides"], attrs["padding"], attrs["dilation"], attrs["output_padding"], attrs["groups"],
            np.dtype(attrs["out_dtype"] or data.dtype),
        )
        return np.ascontiguousarray(from_canonical_array(out, ol, "NC" + sp))

    return reference


def _gradient(nsp: int, op: str):
    sp = SPATIAL[nsp]

    def gradient(c: Call, g: Expr) -> list[Expr]:
        a = c.attrs
        x, w = c.args
        xs = static_canonical(op, x.checked_type, a["data_layout"], "NC" + sp, "data")
        ws = static_canonical(op, w.checked_type, a["kernel_layout"], "IO" + sp, "weight")
        out_layout = a["out_layout"] or a["data_layout"]
        common = dict(strides=a["strides"], padding=a["padding"], dilation=a["dilation"], groups=a["groups"],
                      channels=xs[1], kernel_size=ws[2:], kernel_layout=swap_io(a["kernel_layout"]))
        # y = T(x, w) is linear in x with adjoint conv(., w); in w, the adjoint correlates x with g.
        dx = call(f"nn.conv{nsp}d", g, w, data_layout=out_layout, out_layout=a["data_layout"],
                  out_dtype=x.checked_type.dtype, **common)
        dw = call(f"nn.conv{nsp}d_backward_weight", x, g, grad_layout=a["data_layout"],
                  data_layout=out_layout, out_dtype=w.checked_type.dtype, **common)
        return [dx, dw]

    return gradient


def _masked_compute(x: Any, w: Any, attrs: Attrs, out_type: Type) -> Any:
    """A dilated transposed convolution (1-d or 2-d, NC<spatial>/IO<spatial>): every tap, kept where
    it lands on an input element. Output position `y` reads input `i = (y + pad - k * dilation) / s`
    through tap `k` when that division is exact and `i` in range. The phase trick of the gather
    forms does not apply (a phase's taps are not every s-th one), so this does `s` times the work
    per spatial axis: it serves the rare dilated layer, the gather forms the rest."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    nsp = x.ndim - 2
    groups, cg, og = attrs["groups"], x.shape[1] // attrs["groups"], w.shape[1]
    strides, dilation, pads = attrs["strides"], attrs["dilation"], attrs["padding"][:nsp]
    rc = te.reduce_axis(cg, "rc")
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(w.shape[2:])]

    def body(b: E.Expr, f: E.Expr, *out: E.Expr) -> E.Expr:
        ch = rc.var if groups == 1 else f // og * cg + rc.var
        lands, src = [], []
        for a, (y, k, s) in enumerate(zip(out, taps, strides)):
            t = y + pads[a] - k.var * dilation[a]
            q = t // s if s > 1 else t
            lands += [t >= 0, q < x.shape[2 + a]] + ([E.compare("eq", t - q * s, 0)] if s > 1 else [])
            src.append(E.minimum(E.maximum(q, 0), x.shape[2 + a] - 1))
        prod = x[(b, ch, *src)] * w[(ch, f if groups == 1 else f % og, *[k.var for k in taps])]
        return te.sum(E.select(E.all_of(*lands), prod, E.const(0.0, x.dtype)), [rc, *taps])

    fn = (lambda b, f, y: body(b, f, y)) if nsp == 1 else (lambda b, f, y, xx: body(b, f, y, xx))
    return te.compute(tuple(tc.out_shape(out_type)), fn, name=f"conv{nsp}d_transpose_dilated", tag="reduce")


def _conv2d_transpose_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """The direct (gather) form: only the kernel taps that land on an input element are summed.

    Output row `y` receives input row `i` through kernel row `k` when `i * s + k == y + pad_top`,
    so with `Y = y + pad_top` the contributing taps are `k = Y % s + s * t` reading `i = Y // s - t`
    for `t < ceil(KH / s)`: a stride-1 correlation per output phase. Summing over the zero-dilated
    input instead (the textbook adjoint) would do `s * s` times the multiply-adds.
    """
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import nn as tnn
    from autorelay.te import tensor as te

    x, w = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    layouts = (attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"])
    if layouts != ("NCHW", "IOHW", "NCHW"):
        raise tc.Unsupported("only NCHW/IOHW transposed convolution has a compute")
    if tuple(attrs["dilation"]) != (1, 1):
        return _masked_compute(x, w, attrs, out_type)
    n, o, oh, ow = tc.out_shape(out_type)
    _, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    groups = attrs["groups"]
    cg = c // groups
    (sh, sw), (pt, pl) = attrs["strides"], attrs["padding"][:2]
    th, tw = -(-kh // sh), -(-kw // sw)  # taps per output phase
    # zero rows/columns so every gathered input index is in range: the inner loop has no bounds test
    before = (max(0, th - 1 - pt // sh), max(0, tw - 1 - pl // sw))
    after = (max(0, (oh - 1 + pt) // sh - (h - 1)), max(0, (ow - 1 + pl) // sw - (wd - 1)))
    xp = tnn.pad(x, (0, 0, *before), (0, 0, *after), name="conv2d_transpose_pad")
    rc, ty, tx = te.reduce_axis(cg, "rc"), te.reduce_axis(th, "ty"), te.reduce_axis(tw, "tx")

    def body(b: E.Expr, f: E.Expr, yy: E.Expr, xx: E.Expr) -> E.Expr:
        ch = rc.var if groups == 1 else f // og * cg + rc.var
        ky, kx = (yy + pt) % sh + ty.var * sh, (xx + pl) % sw + tx.var * sw
        ry, rx = E.minimum(ky, kh - 1), E.minimum(kx, kw - 1)  # clamped only where a phase has fewer taps
        src = xp[b, ch, (yy + pt) // sh - ty.var + before[0], (xx + pl) // sw - tx.var + before[1]]
        prod = src * w[ch, f if groups == 1 else f % og, ry if kh % sh else ky, rx if kw % sw else kx]
        valid = [cond for cond, ragged in ((ky < kh, kh % sh), (kx < kw, kw % sw)) if ragged]
        return E.select(E.all_of(*valid), prod, E.const(0.0, x.dtype)) if valid else prod

    return te.compute(
        (n, o, oh, ow), lambda b, f, yy, xx: te.sum(body(b, f, yy, xx), [rc, ty, tx]),
        # the direct NCHW template: its weight Pack makes a vector of output channels (IOHW axis 1)
        # contiguous; every input pixel is broadcast
        name="conv2d_transpose", tag="conv2d_nchw", attrs={"weight": w.name, "weight_oc_axis": 1},
    )


def _conv1d_transpose_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """The 1-d gather form of `_conv2d_transpose_compute` (one output phase per `x % stride`), a
    plain reduction over (input channel, tap) for the generic reduction template, as `conv1d`."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import nn as tnn
    from autorelay.te import tensor as te

    x, w = inputs
    tc.check_dtypes(inputs, ("float32", "float64"))
    layouts = (attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"])
    if layouts != ("NCW", "IOW", "NCW"):
        raise tc.Unsupported("only NCW/IOW transposed convolution has a compute")
    if attrs["out_dtype"] and attrs["out_dtype"] != x.dtype:
        raise tc.Unsupported(f"out_dtype {attrs['out_dtype']} differs from the data dtype {x.dtype}")
    if tuple(attrs["dilation"]) != (1,):
        return _masked_compute(x, w, attrs, out_type)
    n, o, ow = tc.out_shape(out_type)
    _, c, width = x.shape
    _, og, kw = w.shape
    groups = attrs["groups"]
    cg = c // groups
    (s,), pl = attrs["strides"], attrs["padding"][0]
    taps = -(-kw // s)
    before, after = max(0, taps - 1 - pl // s), max(0, (ow - 1 + pl) // s - (width - 1))
    xp = tnn.pad(x, (0, 0, before), (0, 0, after), name="conv1d_transpose_pad")
    rc, rt = te.reduce_axis(cg, "rc"), te.reduce_axis(taps, "rt")

    def body(b: E.Expr, f: E.Expr, xx: E.Expr) -> E.Expr:
        ch = rc.var if groups == 1 else f // og * cg + rc.var
        k = (xx + pl) % s + rt.var * s
        prod = xp[b, ch, (xx + pl) // s - rt.var + before] * \
            w[ch, f if groups == 1 else f % og, E.minimum(k, kw - 1) if kw % s else k]
        return te.sum(E.select(k < kw, prod, E.const(0.0, x.dtype)) if kw % s else prod, [rc, rt])

    return te.compute((n, o, ow), body, name="conv1d_transpose", tag="reduce")


for _nsp, (_dl, _kl) in {1: ("NCW", "IOW"), 2: ("NCHW", "IOHW")}.items():
    _name = f"nn.conv{_nsp}d_transpose"
    _attrs = conv_attrs(_nsp, _dl, _kl)
    _attrs["output_padding"] = (0,) * _nsp
    register(OpDef(
        name=_name,
        arg_names=("data", "weight"),
        type_rel=lambda ts, a, _op=_name, _n=_nsp: conv_transpose_rel(_op, _n, ts, a),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        attrs=_attrs,
        reference=_reference(_nsp),
        gradient=_gradient(_nsp, _name),
        compute=_conv2d_transpose_compute if _nsp == 2 else _conv1d_transpose_compute,
        normalize_attrs=lambda a, _op=_name, _n=_nsp: normalize_conv_attrs(_op, _n, a),
        doc=f"{_nsp}-d transposed convolution with strides, padding, output_padding, dilation and groups.",
    ))
