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

from autorelay.ir.expr import Call, Constant, Expr
from autorelay.op import registry
from autorelay.transform.util import static_shape, with_type

_SPATIAL = {"nn.conv1d": "W", "nn.conv2d": "HW"}


def _live_taps(size: int, kernel: int, out: int, stride: int, dilation: int, before: int) -> list[int]:
    """The taps along one axis that read the input (not only padding) at some output position."""
    return [k for k in range(kernel)
            if any(0 <= o * stride - before + k * dilation < size for o in range(out))]


def drop_dead_taps(c: Call) -> Expr | None:
    """`c` (an `nn.conv1d`/`nn.conv2d` with static shapes in unblocked layouts) without the
    leading and trailing taps that read only padding, or None when every tap is live."""
    spatial = _SPATIAL[c.op.name]  # type: ignore[union-attr]
    data, weight = c.args
    attrs = c.attrs
    dl, kl = attrs["data_layout"], attrs["kernel_layout"]
    shapes = [static_shape(e) for e in (data, weight, c)]
    if any(s is None for s in shapes) or any(len(lay) != len(spatial) + 2 for lay in (dl, kl)):
        return None
    dshape, wshape, oshape = shapes
    ol = attrs["out_layout"] or dl
    nsp = len(spatial)
    before, after = list(attrs["padding"][:nsp]), list(attrs["padding"][nsp:])
    kernel, dilation = [wshape[kl.index(a)] for a in spatial], list(attrs["dilation"])  # type: ignore[index]
    crop_begin, crop_end = [0] * len(dl), list(dshape)  # type: ignore[arg-type]
    tap_begin, tap_end = [0] * len(kl), list(wshape)  # type: ignore[arg-type]
    changed = False
    for i, axis in enumerate(spatial):
        size, out, s, d = dshape[dl.index(axis)], oshape[ol.index(axis)], attrs["strides"][i], dilation[i]  # type: ignore[index]
        live = _live_taps(size, kernel[i], out, s, d, before[i])
        if not live or (live[0] == 0 and live[-1] == kernel[i] - 1):
            continue
        changed = True
        first, last = live[0], live[-1]
        tap_begin[kl.index(axis)], tap_end[kl.index(axis)] = first, last + 1
        kernel[i] = last - first + 1
        lead = before[i] - first * d  # padding still in front of the first kept tap's reads
        crop_begin[dl.index(axis)] = max(-lead, 0)
        size -= crop_begin[dl.index(axis)]
        before[i] = max(lead, 0)
        # the padding (or, negative, the crop) after the data that the last output's reads reach
        trail = (out - 1) * s + (kernel[i] - 1) * d + 1 - size - before[i]
        crop_end[dl.index(axis)] = dshape[dl.index(axis)] + min(trail, 0)  # type: ignore[index]
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
    return with_type(registry.call(c.op.name, data, weight, **new_attrs), c)  # type: ignore[union-attr]


__all__ = ["drop_dead_taps"]
