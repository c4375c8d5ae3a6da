"""Convolutions: `nn.conv1d`, `nn.conv2d` and the weight gradient `nn.conv{1,2}d_backward_weight`.

One implementation serves every spatial rank and layout: attributes are normalised to tuples,
tensors are converted to the canonical `NC<spatial>` / `OI<spatial>` order (see `layout.py`), the
arithmetic runs there and the result is converted to `out_layout`. Grouped and depthwise convolution
(`groups == channels`) are the same code path: the channel axis is split into `groups` blocks.

Gradients are convolutions again: the data gradient is the transposed convolution of the output
gradient with the same kernel (read with O and I swapped), the weight gradient is
`nn.conv2d_backward_weight` (Relay's name), which correlates the padded data with the output gradient.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import AnyDim, IncompleteType, TensorType, Type, TypeVar
from autorelay.op.conv_compute import conv1d_compute, conv2d_compute, conv_backward_weight_compute
from autorelay.op.layout import (
    check_positive,
    from_canonical_array,
    from_canonical_shape,
    int_tuple,
    pad_tuple,
    parse_layout,
    swap_io,
    to_canonical_array,
    to_canonical_shape,
    window_out,
)
from autorelay.op.registry import NotReady, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, merge_dims, tensor_arg

SPATIAL = {1: "W", 2: "HW"}


def is_depthwise(groups: int, in_channels: object, out_channels: object) -> bool:
    """One filter per channel: every input channel is a group of its own and yields one output
    channel. The depthwise kernels run these; a channel multiplier, or groups of several channels,
    run the grouped forms."""
    return groups == in_channels == out_channels


def block_channels(groups: int, in_channels: int, out_channels: int) -> tuple[int, int]:
    """The input and output channel counts a layout block of this convolution must divide.

    A grouped convolution's block may not straddle two groups (a block of the output reads the
    input blocks of one group), so it divides each group's channels; a depthwise one packs input
    and output channels in one block, so it divides the channel count."""
    if is_depthwise(groups, in_channels, out_channels):
        return in_channels, out_channels
    return in_channels // groups, out_channels // groups


def packed_group_block(groups: int, in_channels: int, out_channels: int, requested: int) -> int:
    """The block of a grouped convolution that packs whole groups, b / g of them, into each block
    (`te.nn_depthwise.packed_group_conv2d_nchwc`): the largest multiple of its g channels per group, above
    g, dividing the channels and at most `requested`; 0 where none is, or where groups differ in
    their input and output channels or are whole blocks already (`block_channels`)."""
    g = in_channels // groups
    if groups == 1 or is_depthwise(groups, in_channels, out_channels) or out_channels != in_channels:
        return 0
    fits = [b for b in range(2 * g, min(requested, in_channels) + 1, g) if in_channels % b == 0]
    return max(fits, default=0)


def normalize_conv_attrs(op: str, nsp: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """Turn every int-or-list attribute into a tuple of the right length, checking ranges."""
    a = dict(attrs)
    for name in ("strides", "dilation"):
        a[name] = int_tuple(op, name, a[name], nsp)
        check_positive(op, name, a[name])
    a["padding"] = pad_tuple(op, a["padding"], nsp)
    if "output_padding" in a:
        a["output_padding"] = int_tuple(op, "output_padding", a["output_padding"], nsp)
    if a.get("kernel_size") is not None:
        a["kernel_size"] = int_tuple(op, "kernel_size", a["kernel_size"], nsp)
        check_positive(op, "kernel_size", a["kernel_size"])
    if not isinstance(a["groups"], int) or a["groups"] <= 0:
        raise rel_error(op, f"groups must be a positive integer, got {a['groups']!r}")
    if a.get("channels") is not None and (not isinstance(a["channels"], int) or a["channels"] <= 0):
        raise rel_error(op, f"channels must be a positive integer, got {a['channels']!r}")
    return a


def conv_attrs(nsp: int, data_layout: str, kernel_layout: str) -> dict[str, Any]:
    return {
        "strides": (1,) * nsp, "padding": (0,) * nsp, "dilation": (1,) * nsp, "groups": 1,
        "channels": None, "kernel_size": None, "data_layout": data_layout,
        "kernel_layout": kernel_layout, "out_layout": "", "out_dtype": "",
    }


def _known(t: Type) -> bool:
    return isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape)


def _check_kernel(op: str, attrs: Attrs, kshape: tuple, wshape: tuple) -> None:
    ks = attrs["kernel_size"]
    if ks is not None and any(dim_known_different(a, b) for a, b in zip(ks, kshape)):
        raise rel_error(op, f"weight of shape {fmt_shape(wshape)} has kernel size {tuple(kshape)}, "
                            f"but kernel_size={ks}")


def conv_rel(op: str, nsp: int, arg_types: list[Type], attrs: Attrs) -> Any:
    """Shape rule of an N-d convolution; infers the weight's type when it is not annotated."""
    sp = SPATIAL[nsp]
    data = tensor_arg(op, arg_types, 0, "data")
    dl = parse_layout(op, attrs["data_layout"], "NC" + sp, "data_layout")
    kl = parse_layout(op, attrs["kernel_layout"], "OI" + sp, "kernel_layout")
    ol = parse_layout(op, attrs["out_layout"] or attrs["data_layout"], "NC" + sp, "out_layout")
    n, c, *spatial = to_canonical_shape(op, data.shape, dl, "NC" + sp, "data")
    groups = attrs["groups"]
    if isinstance(c, int) and c % groups:
        raise rel_error(op, f"data of shape {fmt_shape(data.shape)} has {c} channels, "
                            f"not divisible by groups={groups}")
    w = arg_types[1]
    refined = None
    unknown = isinstance(w, IncompleteType | TypeVar)
    if unknown or (isinstance(w, TensorType) and not _known(w)):
        if attrs["channels"] is None or attrs["kernel_size"] is None:
            if unknown:
                raise NotReady(f"{op}: weight type unknown and channels/kernel_size not given")
            # a partially known weight without the attributes: check what is known below
        else:
            cin = c // groups if isinstance(c, int) else AnyDim()
            canon = (attrs["channels"], cin, *attrs["kernel_size"])
            wshape = from_canonical_shape(op, canon, kl, "OI" + sp, "weight")
            if isinstance(w, TensorType):
                if len(w.shape) != len(wshape) or any(map(dim_known_different, w.shape, wshape)):
                    raise rel_error(op, f"weight of shape {fmt_shape(w.shape)} does not match the shape "
                                        f"{fmt_shape(wshape)} implied by channels and kernel_size")
                wshape = tuple(merge_dims(a, b) for a, b in zip(w.shape, wshape))
            refined = TensorType(wshape, w.dtype if isinstance(w, TensorType) else data.dtype)
            w = refined
    weight = w if isinstance(w, TensorType) else tensor_arg(op, arg_types, 1, "weight")
    o, i, *kshape = to_canonical_shape(op, weight.shape, kl, "OI" + sp, "weight")
    if isinstance(c, int) and isinstance(i, int) and c != i * groups:
        raise rel_error(
            op, f"channel mismatch: data of shape {fmt_shape(data.shape)} has {c} input channels "
            f"({attrs['data_layout']}), but weight of shape {fmt_shape(weight.shape)} "
            f"({attrs['kernel_layout']}) expects {i} x groups={groups} = {i * groups}"
        )
    if attrs["channels"] is not None and dim_known_different(o, attrs["channels"]):
        raise rel_error(op, f"weight of shape {fmt_shape(weight.shape)} has {o} output channels, "
                            f"but channels={attrs['channels']}")
    if isinstance(o, int) and o % groups:
        raise rel_error(op, f"weight of shape {fmt_shape(weight.shape)}: {o} output channels are not "
                            f"divisible by groups={groups}")
    _check_kernel(op, attrs, tuple(kshape), weight.shape)
    if not attrs["out_dtype"] and weight.dtype != data.dtype:
        raise rel_error(op, f"data has dtype {data.dtype} but weight has dtype {weight.dtype}; "
                            "set out_dtype for mixed-precision convolution")
    pads = attrs["padding"]
    out_sp = []
    for ax in range(nsp):
        k = kshape[ax]
        if not isinstance(k, int):
            out_sp.append(AnyDim())
            continue
        out_sp.append(window_out(op, spatial[ax], k, attrs["strides"][ax], attrs["dilation"][ax],
                                 pads[ax], pads[nsp + ax], what=f"data {fmt_shape(data.shape)}"))
    out_shape = from_canonical_shape(op, (n, o, *out_sp), ol, "NC" + sp, "output")
    out = TensorType(out_shape, attrs["out_dtype"] or data.dtype)
    if refined is not None:
        return [data, refined], out
    return out


# ---------------------------------------------------------------------------------------------
# NumPy kernels in canonical layout (also used by the transposed convolution)


def _window_slices(k: tuple[int, ...], out_sp: tuple[int, ...], strides, dilation) -> tuple:
    return tuple(slice(ki * d, ki * d + s * (o - 1) + 1, s)
                 for ki, o, s, d in zip(k, out_sp, strides, dilation))


def _im2col(xp: np.ndarray, groups: int, kshape, out_sp, strides, dilation) -> np.ndarray:
    """Every window of padded `xp` (N, C, *S) as a column: (N, groups, C/groups * prod(K), prod(Out))."""
    n, c = xp.shape[:2]
    size = int(np.prod(out_sp, dtype=np.int64))  # explicit extents: -1 is ambiguous for empty arrays
    xg = xp.reshape(n, groups, c // groups, *xp.shape[2:])
    patches = [
        xg[(Ellipsis, *_window_slices(k, out_sp, strides, dilation))].reshape(n, groups, c // groups, size)
        for k in itertools.product(*(range(s) for s in kshape))
    ]
    cols = np.stack(patches, axis=3)  # (N, G, C/G, K, Out): kernel offsets in C order, as in the weight
    return cols.reshape(n, groups, cols.shape[2] * cols.shape[3], size)


def _pad_spatial(x: np.ndarray, pads) -> np.ndarray:
    nsp = x.ndim - 2
    return np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[nsp + i]) for i in range(nsp)])


def conv_canonical(x: np.ndarray, w: np.ndarray, strides, pads, dilation, groups: int, dtype) -> np.ndarray:
    """Grouped cross-correlation of `x` (N, C, *S) with `w` (O, C/groups, *K), as one batched matmul."""
    nsp = x.ndim - 2
    xp = _pad_spatial(x.astype(dtype, copy=False), pads)
    n, o, kshape = x.shape[0], w.shape[0], w.shape[2:]
    out_sp = tuple(
        (xp.shape[2 + i] - dilation[i] * (kshape[i] - 1) - 1) // strides[i] + 1 for i in range(nsp)
    )
    cols = _im2col(xp, groups, kshape, out_sp, strides, dilation)
    wg = w.astype(dtype, copy=False).reshape(groups, o // groups, cols.shape[2])
    return np.matmul(wg[None], cols).reshape(n, o, *out_sp)


def conv_backward_weight_canonical(g: np.ndarray, x: np.ndarray, kshape, strides, pads, dilation,
                                   groups: int, dtype) -> np.ndarray:
    """d(conv)/d(weight): correlate padded `x` (N, C, *S) with output gradient `g` (N, O, *Out)."""
    xp = _pad_spatial(x.astype(dtype, copy=False), pads)
    n, c = x.shape[:2]
    o, out_sp = g.shape[1], g.shape[2:]
    cols = _im2col(xp, groups, kshape, out_sp, strides, dilation)
    gg = g.astype(dtype, copy=False).reshape(n, groups, o // groups, cols.shape[3])
    dw = np.matmul(gg, np.swapaxes(cols, 2, 3)).sum(axis=0, dtype=dtype)  # (G, O/G, C/G * K)
    return dw.reshape(o, c // groups, *kshape)


def _conv_reference(nsp: int):
    sp = SPATIAL[nsp]

    def reference(attrs: Attrs, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
        dl = parse_layout("conv", attrs["data_layout"], "NC" + sp)
        kl = parse_layout("conv", attrs["kernel_layout"], "OI" + sp)
        ol = parse_layout("conv", attrs["out_layout"] or attrs["data_layout"], "NC" + sp)
        dtype = np.dtype(attrs["out_dtype"] or data.dtype)
        out = conv_canonical(to_canonical_array(data, dl, "NC" + sp),
                             to_canonical_array(weight, kl, "OI" + sp), attrs["strides"],
                             attrs["padding"], attrs["dilation"], attrs["groups"], dtype)
        return np.ascontiguousarray(from_canonical_array(out, ol, "NC" + sp))

    return reference


def static_canonical(op: str, t: Type, layout: str, primal: str, what: str) -> tuple[int, ...]:
    """A static canonical shape of an argument's checked type (gradients need concrete sizes)."""
    if not isinstance(t, TensorType) or not t.is_static:
        raise rel_error(op, f"gradient needs a statically shaped {what}, got {t}")
    return to_canonical_shape(op, t.shape, parse_layout(op, layout, primal), primal, what)


def _conv_gradient(nsp: int, op: str):
    sp = SPATIAL[nsp]
    transpose_op = f"nn.conv{nsp}d_transpose"
    weight_op = f"nn.conv{nsp}d_backward_weight"

    def gradient(c: Call, g: Expr) -> list[Expr]:
        a = c.attrs
        x, w = c.args
        xs = static_canonical(op, x.checked_type, a["data_layout"], "NC" + sp, "data")
        ws = static_canonical(op, w.checked_type, a["kernel_layout"], "OI" + sp, "weight")
        out_layout = a["out_layout"] or a["data_layout"]
        ys = static_canonical(op, c.checked_type, out_layout, "NC" + sp, "output")
        kshape = ws[2:]
        pads, s, d = a["padding"], a["strides"], a["dilation"]
        # the rows the forward window never reached come back as output padding
        out_pad = tuple(
            xs[2 + i] - ((ys[2 + i] - 1) * s[i] - pads[i] - pads[nsp + i] + d[i] * (kshape[i] - 1) + 1)
            for i in range(nsp)
        )
        dx = call(transpose_op, g, w, strides=s, padding=pads, output_padding=out_pad, dilation=d,
                  groups=a["groups"], channels=xs[1], kernel_size=kshape, data_layout=out_layout,
                  kernel_layout=swap_io(a["kernel_layout"]), out_layout=a["data_layout"],
                  out_dtype=x.checked_type.dtype)
        dw = call(weight_op, g, x, strides=s, padding=pads, dilation=d, groups=a["groups"],
                  channels=ws[0], kernel_size=kshape, grad_layout=out_layout, data_layout=a["data_layout"],
                  kernel_layout=a["kernel_layout"], out_dtype=w.checked_type.dtype)
        return [dx, dw]

    return gradient


for _nsp, (_dl, _kl) in {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW")}.items():
    _name = f"nn.conv{_nsp}d"
    register(OpDef(
        name=_name,
        arg_names=("data", "weight"),
        type_rel=lambda ts, a, _op=_name, _n=_nsp: conv_rel(_op, _n, ts, a),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        attrs=conv_attrs(_nsp, _dl, _kl),
        reference=_conv_reference(_nsp),
        gradient=_conv_gradient(_nsp, _name),
        compute=conv2d_compute if _nsp == 2 else conv1d_compute,
        normalize_attrs=lambda a, _op=_name, _n=_nsp: normalize_conv_attrs(_op, _n, a),
        doc=f"{_nsp}-d convolution (cross-correlation) with strides, padding, dilation and groups.",
    ))


# ---------------------------------------------------------------------------------------------
# weight gradient


def backward_weight_rel(op: str, nsp: int, arg_types: list[Type], attrs: Attrs) -> TensorType:
    sp = SPATIAL[nsp]
    grad = tensor_arg(op, arg_types, 0, "grad")
    data = tensor_arg(op, arg_types, 1, "data")
    gl = parse_layout(op, attrs["grad_layout"], "NC" + sp, "grad_layout")
    dl = parse_layout(op, attrs["data_layout"], "NC" + sp, "data_layout")
    kl = parse_layout(op, attrs["kernel_layout"], "OI" + sp, "kernel_layout")
    gn, go, *gsp = to_canonical_shape(op, grad.shape, gl, "NC" + sp, "grad")
    n, c, *spatial = to_canonical_shape(op, data.shape, dl, "NC" + sp, "data")
    if attrs["kernel_size"] is None:
        raise rel_error(op, "kernel_size is required")
    groups = attrs["groups"]
    if dim_known_different(gn, n):
        raise rel_error(op, f"grad of shape {fmt_shape(grad.shape)} and data of shape "
                            f"{fmt_shape(data.shape)} disagree on the batch size")
    for name, ch in (("data", c), ("grad", go)):
        if isinstance(ch, int) and ch % groups:
            raise rel_error(op, f"{name} has {ch} channels, not divisible by groups={groups}")
    o = attrs["channels"] if attrs["channels"] is not None else go
    if dim_known_different(o, go):
        raise rel_error(op, f"grad of shape {fmt_shape(grad.shape)} has {go} channels, "
                            f"but channels={attrs['channels']}")
    pads = attrs["padding"]
    for ax in range(nsp):
        want = window_out(op, spatial[ax], attrs["kernel_size"][ax], attrs["strides"][ax],
                          attrs["dilation"][ax], pads[ax], pads[nsp + ax], what="data")
        if dim_known_different(want, gsp[ax]):
            raise rel_error(op, f"grad of shape {fmt_shape(grad.shape)} does not match the convolution "
                                f"output of data of shape {fmt_shape(data.shape)}")
    cin = c // groups if isinstance(c, int) else AnyDim()
    wshape = from_canonical_shape(op, (o, cin, *attrs["kernel_size"]), kl, "OI" + sp, "weight")
    return TensorType(wshape, attrs["out_dtype"] or grad.dtype)


def _backward_weight_reference(nsp: int):
    sp = SPATIAL[nsp]

    def reference(attrs: Attrs, grad: np.ndarray, data: np.ndarray) -> np.ndarray:
        gl = parse_layout("conv", attrs["grad_layout"], "NC" + sp)
        dl = parse_layout("conv", attrs["data_layout"], "NC" + sp)
        kl = parse_layout("conv", attrs["kernel_layout"], "OI" + sp)
        dw = conv_backward_weight_canonical(
            to_canonical_array(grad, gl, "NC" + sp), to_canonical_array(data, dl, "NC" + sp),
            attrs["kernel_size"], attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
            np.dtype(attrs["out_dtype"] or grad.dtype),
        )
        return np.ascontiguousarray(from_canonical_array(dw, kl, "OI" + sp))

    return reference


for _nsp, (_dl, _kl) in {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW")}.items():
    _name = f"nn.conv{_nsp}d_backward_weight"
    _attrs = conv_attrs(_nsp, _dl, _kl)
    del _attrs["out_layout"]
    _attrs["grad_layout"] = _dl
    register(OpDef(
        name=_name,
        arg_names=("grad", "data"),
        type_rel=lambda ts, a, _op=_name, _n=_nsp: backward_weight_rel(_op, _n, ts, a),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        attrs=_attrs,
        reference=_backward_weight_reference(_nsp),
        compute=conv_backward_weight_compute,
        normalize_attrs=lambda a, _op=_name, _n=_nsp: normalize_conv_attrs(_op, _n, a),
        doc="Gradient of a convolution with respect to its weight (used by the conv gradient rule).",
    ))
