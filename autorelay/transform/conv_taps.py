"""Dropping the kernel taps of a convolution that read only padding (a `SimplifyExpr` rule).

A dilated convolution on a small map can have taps that no output position reaches the input
with: DeepLab's atrous pyramid runs 3x3 kernels at dilation 12, 24 and 36 with as much padding,
and on a map of 28 pixels or fewer every tap but the centre reads zeros only. Such a tap adds
zero times its weight to every output, so the convolution with those kernel rows (or columns)
removed, and its padding reduced by what they spanned, computes the same values with a fraction
of the work: here a 1x1 convolution, which then runs as a GEMM, where the dilated one read a
buffer padded to several times the map's size.

Only whole leading and trailing rows/columns of the kernel are dropped (a dead tap between live
ones stays). Where the kept taps start past the leading padding, the data is cropped instead of
padded negatively; the output's shape never changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Call, Constant, Expr
from autorelay.op import registry
from autorelay.op.layout import parse_layout
from autorelay.transform.util import static_shape, with_type

_SPATIAL = {"nn.conv1d": "W", "nn.conv2d": "HW"}


def _live_taps(size: int, kernel: int, out: int, stride: int, dilation: int, before: int) -> list[int]:
    """The taps along one axis that read the input (not only padding) at some output position."""
    return [k for k in range(kernel)
            if any(0 <= o * stride - before + k * dilation < size for o in range(out))]


def spatial_axes(c: Call) -> tuple[list[str], list[str], list[str], str] | None:
    """The axes of `c`'s data, kernel and output layouts (blocked ones too: `NCHW8c` is N, C, H, W,
    c) and its spatial axis letters, or None when a layout does not parse."""
    spatial = _SPATIAL[c.op.name]  # type: ignore[union-attr]
    attrs = c.attrs
    layouts = (attrs["data_layout"], attrs["kernel_layout"], attrs["out_layout"] or attrs["data_layout"])
    primal = (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}")
    try:
        dl, kl, ol = (list(parse_layout(c.op.name, t, p).axes) for t, p in zip(layouts, primal))  # type: ignore[union-attr]
    except TypeCheckError:  # not a layout of these axes
        return None
    return dl, kl, ol, spatial


def restrict_outputs(c: Call, spans: Sequence[tuple[int, int]] | None = None) -> Expr | None:
    """`c` (an `nn.conv1d`/`nn.conv2d` with static shapes) computing only the outputs `spans[i]`
    (start, stop) along its i-th spatial axis (all of them when None), without the leading and
    trailing taps that read only padding there, its data cropped to what those outputs read.
    None when nothing changes (every output, every tap live) or when some axis has no live tap."""
    axes = spatial_axes(c)
    shapes = [static_shape(e) for e in (*c.args, c)]
    if axes is None or any(s is None for s in shapes):
        return None
    dl, kl, ol, spatial = axes
    (data, weight), attrs = c.args, c.attrs
    dshape, wshape, oshape = shapes
    nsp = len(spatial)
    spans = spans or [(0, oshape[ol.index(a)]) for a in spatial]  # type: ignore[index]
    before, after = list(attrs["padding"][:nsp]), list(attrs["padding"][nsp:])
    kernel, dilation = [wshape[kl.index(a)] for a in spatial], list(attrs["dilation"])  # type: ignore[index]
    crop_begin, crop_end = [0] * len(dl), list(dshape)  # type: ignore[arg-type]
    tap_begin, tap_end = [0] * len(kl), list(wshape)  # type: ignore[arg-type]
    changed = False
    for i, axis in enumerate(spatial):
        (o0, o1), s, d, at = spans[i], attrs["strides"][i], dilation[i], dl.index(axis)
        size, out, full = dshape[at], o1 - o0, (o0, o1) == (0, oshape[ol.index(axis)])  # type: ignore[index]
        lead0 = before[i] - o0 * s  # the padding (negative: the data skipped) before the band's first read
        live = _live_taps(size, kernel[i], out, s, d, lead0)
        if not live:
            return None
        if full and live[0] == 0 and live[-1] == kernel[i] - 1:
            continue
        changed = True
        first, last = live[0], live[-1]
        tap_begin[kl.index(axis)], tap_end[kl.index(axis)] = first, last + 1
        kernel[i] = last - first + 1
        lead = lead0 - first * d  # padding still in front of the first kept tap's reads
        crop_begin[at] = max(-lead, 0)
        size -= crop_begin[at]
        before[i] = max(lead, 0)
        # the padding (or, negative, the crop) after the data that the last output's reads reach
        trail = (out - 1) * s + (kernel[i] - 1) * d + 1 - size - before[i]
        crop_end[at] = dshape[at] + min(trail, 0)  # type: ignore[index]
        after[i] = max(trail, 0)
        if kernel[i] == 1:
            dilation[i] = 1
    if not changed:
        return None
    if crop_begin != [0] * len(dl) or crop_end != list(dshape):  # type: ignore[arg-type]
        data = registry.call("strided_slice", data, begin=tuple(crop_begin), end=tuple(crop_end),
                             strides=(1,) * len(dl))
    if isinstance(weight, Constant):  # sliced now: later rules (FoldScaleAxis) want a constant weight
        kept = tuple(slice(b, e) for b, e in zip(tap_begin, tap_end))
        weight = Constant(weight.data[kept].copy())
    else:
        weight = registry.call("strided_slice", weight, begin=tuple(tap_begin), end=tuple(tap_end),
                               strides=(1,) * len(kl))
    new_attrs = {**attrs, "padding": (*before, *after), "dilation": tuple(dilation)}
    if attrs.get("kernel_size") is not None:
        new_attrs["kernel_size"] = tuple(kernel)
    return registry.call(c.op.name, data, weight, **new_attrs)  # type: ignore[union-attr]


def drop_dead_taps(c: Call) -> Expr | None:
    """`c` (an `nn.conv1d`/`nn.conv2d` with static shapes) without the leading and trailing taps
    that read only padding, or None when every tap is live."""
    out = restrict_outputs(c)
    return None if out is None else with_type(out, c)


__all__ = ["drop_dead_taps", "restrict_outputs", "spatial_axes"]
