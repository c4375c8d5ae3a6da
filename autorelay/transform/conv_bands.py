"""SplitConvBands: a dilated convolution whose taps read padding over part of its output, computed
in bands of outputs that each run only their live taps.

A dilated kernel on a map not much wider than its dilation reads zeros with most of its taps at
most output positions: DeepLab's atrous pyramid (3x3 at dilation 12, padding 12) on a 16x16 map
reaches the input with its outer rows only from the top and bottom 4 rows of output, so three
quarters of its multiply-adds add zero. `SimplifyExpr` drops the taps that are dead at *every*
output (`conv_taps`); this pass handles the ones dead at *some*. Along each spatial axis the
output divides into bands within which each tap is live throughout or dead throughout; each band
(a product of bands, in 2-d) becomes a convolution over just its live taps on the part of the
data it reads, and the pieces are concatenated back. The value is unchanged; the work drops to
the live multiply-adds (there 2.4 → 0.6 GFLOP) at the price of a kernel per piece, each reading
its own slice of the weights.

The split pays only where much of the work is dead, so it is chosen by an estimate: a piece
costs its taps x (its pixels + `WEIGHT_PIXELS`), the second term standing for reading the piece's
weights, which each piece does once (on a small map, where the weights dominate, extra pieces
cost more than they save). The cheapest choice of axes to split is taken when it saves at least
`MIN_SAVING` of the estimate. Only direct channel-blocked convolutions are split (the pipelines
run this pass after their layout conversion, so the slices and concatenations of the pieces stay
in the blocked layout); a plain dilated 3x3 of a backbone (dilation 2 on a 16x16 map) is left
whole.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Expr, Function, GlobalVar, Tuple
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.op import registry
from autorelay.op.conv_compute import direct_nchwc
from autorelay.transform.conv_taps import restrict_outputs, spatial_axes
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import op_name, static_shape, with_type

WEIGHT_PIXELS = 16  # reading one tap's weights costs about as much as this many pixels' multiply-adds
MIN_SAVING = 0.25  # split only where the estimate drops by at least this fraction

Band = tuple[int, int, int]  # output start, stop, live taps spanned (first live to last live)


def _tap_outputs(size: int, out: int, stride: int, dilation: int, before: int, k: int) -> tuple[int, int]:
    """The outputs [lo, hi) along an axis at which tap `k` reads the data (not padding)."""
    lo = max(0, -((k * dilation - before) // stride))  # ceil((before - k*d) / s)
    hi = min(out, (size - 1 + before - k * dilation) // stride + 1)
    return lo, max(lo, hi)


def axis_bands(size: int, out: int, kernel: int, stride: int, dilation: int,
               before: int) -> list[Band] | None:
    """The output bands along one axis within which the first and the last live tap stay the
    same; None when some outputs read no data at all."""
    spans = [_tap_outputs(size, out, stride, dilation, before, k) for k in range(kernel)]
    cuts = sorted({0, out, *(b for lo, hi in spans if lo < hi for b in (lo, hi))})
    bands: list[tuple[int, int, int, int]] = []  # start, stop, first and last live tap
    for a, b in itertools.pairwise(cuts):
        live = [k for k, (lo, hi) in enumerate(spans) if lo <= a and b <= hi]
        if not live:
            return None
        if bands and bands[-1][2:] == (live[0], live[-1]):
            bands[-1] = (bands[-1][0], b, live[0], live[-1])
        else:
            bands.append((a, b, live[0], live[-1]))
    return [(a, b, last - first + 1) for a, b, first, last in bands]


def estimate(bands: list[list[Band]]) -> int:
    """The cost estimate of computing one piece per product of `bands` (see the module docstring)."""
    total = 0
    for piece in itertools.product(*bands):
        taps = pixels = 1
        for start, stop, span in piece:
            taps, pixels = taps * span, pixels * (stop - start)
        total += taps * (pixels + WEIGHT_PIXELS)
    return total


def choose_bands(c: Call, min_saving: float = MIN_SAVING) -> list[list[Band]] | None:
    """The bands per spatial axis that `c` is best computed in (one band for an axis left whole),
    or None when no split saves `min_saving` of the estimate."""
    axes, shapes = spatial_axes(c), [static_shape(e) for e in (c.args[0], c.args[1], c)]
    if axes is None or any(s is None for s in shapes):
        return None
    dl, kl, ol, spatial = axes
    dshape, wshape, oshape = shapes
    nsp, attrs = len(spatial), c.attrs
    whole, split = [], []
    for i, a in enumerate(spatial):
        size, out, kernel = dshape[dl.index(a)], oshape[ol.index(a)], wshape[kl.index(a)]  # type: ignore[index]
        whole.append([(0, out, kernel)])
        bands = axis_bands(size, out, kernel, attrs["strides"][i], attrs["dilation"][i], attrs["padding"][i])
        split.append(bands if bands is not None and len(bands) > 1 else None)
    options = [[split[i] if i in chosen and split[i] else whole[i] for i in range(nsp)]
               for n in range(1, nsp + 1) for chosen in itertools.combinations(range(nsp), n)]
    best = min(options, key=estimate, default=None)
    if best is None or best == whole or estimate(best) > (1 - min_saving) * estimate(whole):
        return None
    return best


def split_bands(c: Call, min_saving: float = MIN_SAVING) -> Expr | None:
    """`c` as its pieces concatenated, or None when it is better left whole."""
    if op_name(c) != "nn.conv2d" or not direct_nchwc(c.attrs):
        return None
    bands = choose_bands(c, min_saving)
    if bands is None:
        return None
    _, _, ol, spatial = spatial_axes(c)  # type: ignore[misc]
    return _join(c, bands, [ol.index(a) for a in spatial], ())


def _join(c: Call, bands: list[list[Band]], out_axes: list[int],
          outer: tuple[tuple[int, int], ...]) -> Expr | None:
    """The pieces within the outer bands `outer`, concatenated along the next spatial axis; None
    when a piece reads no data at all (the convolution reads only padding along another axis)."""
    axis = len(outer)
    parts = []
    for start, stop, _ in bands[axis]:
        spans = (*outer, (start, stop))
        part = _join(c, bands, out_axes, spans) if axis + 1 < len(bands) else restrict_outputs(c, spans)
        if part is None:
            return None
        parts.append(part)
    if len(parts) == 1:
        return parts[0]
    return registry.call("concatenate", Tuple(tuple(parts)), axis=out_axes[axis])


class _Splitter(ExprMutator):
    def __init__(self, min_saving: float) -> None:
        super().__init__()
        self.min_saving = min_saving

    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if isinstance(new, Call):
            with_type(new, c)  # a rewritten argument keeps its type
        return (split_bands(new, self.min_saving) if isinstance(new, Call) else None) or new


@dataclass(frozen=True)
class SplitConvBands(FunctionPass):
    """Compute each direct channel-blocked convolution with partly dead taps in bands of outputs
    (see the module docstring); run after the layout conversion, before fusion. `min_saving`:
    the fraction of the estimate a split must save (a negative one splits wherever bands exist)."""

    name: ClassVar[str] = "SplitConvBands"
    requires_types: ClassVar[bool] = True
    min_saving: float = MIN_SAVING

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Splitter(self.min_saving).visit(fn)
        assert isinstance(out, Function)
        return out


__all__ = ["SplitConvBands", "axis_bands", "choose_bands", "estimate", "split_bands"]
