"""The loop-nest computes of 2-d pooling (`pool.py` holds the ops' types and NumPy references):
max and average pooling, global pooling, and both poolings' gradients with respect to the data.

Every compute works on NCHW and channel-blocked NCHW[x]c alike: the spatial axes are 2 and 3, and a
block is one more free axis after them.

The gradients are written as gathers, one output element (an input pixel) at a time, so they need
no scatter and no atomic add: a pixel sums over the window taps that could read it, and tap
(rh, rw) contributes when the window it implies exists (the offset divides by the stride and lands
inside the pooled map). Max pooling gives a window's gradient to its first maximal element, as
its reference does; that element is found in a stage of its own (the window's maximum, then the
first tap equal to it), so the gather compares one index per tap.
"""

from __future__ import annotations

from typing import Any

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import Type

INT_MAX_POOL = ("int8", "uint8", "int32")


def check_pool_layout(attrs: Attrs) -> None:
    """Pooling computes handle NCHW and channel-blocked NCHW[x]c (the block is one more free axis)."""
    from autorelay.op import te_compute as tc

    lay, out = attrs["layout"], attrs["out_layout"] or attrs["layout"]
    blocked = lay.startswith("NCHW") and lay[4:-1].isdigit() and lay.endswith("c")
    if out != lay or not (lay == "NCHW" or blocked):
        raise tc.Unsupported(f"layout {lay} -> {out} has no pooling compute")


def _padded_frame(x: Any, attrs: Attrs, pooled_hw: tuple[int, int], fill: float | int) -> Any:
    """`x` padded to the frame its windows span: the explicit padding, and after it any ceil-mode
    overhang past the explicit bottom/right padding."""
    from autorelay.te import nn as tnn

    (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    pt, pl, pb, pr = attrs["padding"]
    h, w = x.shape[2:4]
    after_h = max((pooled_hw[0] - 1) * sh + dh * (kh - 1) + 1 - pt - h, pb)
    after_w = max((pooled_hw[1] - 1) * sw + dw * (kw - 1) + 1 - pl - w, pr)
    extra = (0,) * (x.ndim - 4)
    return tnn.pad(x, (0, 0, pt, pl, *extra), (0, 0, after_h, after_w, *extra), value=fill, name="pool_pad")


def _window_max(xp: Any, shape: tuple[int, ...], attrs: Attrs, name: str, tag: str) -> Any:
    from autorelay.te import tensor as te

    (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    # the window and strides, for a kernel that computes the band of input rows a tile reads
    window = {"pool_size": (kh, kw), "strides": (sh, sw), "dilation": (dh, dw)}
    return te.compute(shape, lambda *i: te.max(xp[(i[0], i[1], i[2] * sh + rh * dh, i[3] * sw + rw * dw,
                                                   *i[4:])], [rh, rw]),
                      name=name, tag=tag, attrs=window)


def _counted(y: Any, k: int, s: int, lo: int, hi: int) -> Any:
    """How many rows (or columns) of window `y` an average counts: those in [lo, hi) of the frame."""
    from autorelay.te import expr as E

    return E.minimum(y * s + k, hi) - E.maximum(y * s, lo)


def _count_bounds(attrs: Attrs, hw: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The frame rows and columns an average counts: the explicitly padded input with
    `count_include_pad`, else the input alone."""
    pt, pl, pb, pr = attrs["padding"]
    h, w = hw
    if attrs["count_include_pad"]:
        return (0, pt + h + pb), (0, pl + w + pr)
    return (pt, pt + h), (pl, pl + w)


def pool_compute(avg: bool):
    """NCHW pooling over the frame the type relation implies (explicit padding + ceil_mode overhang).

    Max pads with -inf (an integer type's minimum: max pooling of quantized values is exact, so the
    quantizer keeps it in int8); average sums and divides by the number of counted positions of each
    window (all of the explicitly padded frame with count_include_pad, else only real pixels).
    """

    def compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
        from autorelay.op import te_compute as tc
        from autorelay.te import expr as E
        from autorelay.te import tensor as te

        x = inputs[0]
        tc.check_dtypes([x], ("float32", "float64") if avg else ("float32", "float64", *INT_MAX_POOL))
        check_pool_layout(attrs)
        shape = tc.out_shape(out_type)  # (N, C, OH, OW) or (N, C/b, OH, OW, b): pooling is over axes 2, 3
        (kh, kw), (sh, sw), dil = attrs["pool_size"], attrs["strides"], attrs["dilation"]
        if not avg:
            fill = lowest(x.dtype)
            return _window_max(_padded_frame(x, attrs, shape[2:4], fill), shape, attrs, "pool", "pool")
        if tuple(dil) != (1, 1):
            raise tc.Unsupported("dilated average pooling has no compute")
        xp = _padded_frame(x, attrs, shape[2:4], 0.0)
        rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
        acc = te.compute(shape, lambda *i: te.sum(xp[(i[0], i[1], i[2] * sh + rh, i[3] * sw + rw, *i[4:])],
                                                  [rh, rw]),
                         name="pool", tag="pool", attrs={"pool_size": (kh, kw), "strides": (sh, sw),
                                                         "dilation": (1, 1)})
        (lo_h, hi_h), (lo_w, hi_w) = _count_bounds(attrs, x.shape[2:4])
        return te.compute(shape, lambda *i: acc[i] / E.cast(
            _counted(i[2], kh, sh, lo_h, hi_h) * _counted(i[3], kw, sw, lo_w, hi_w), x.dtype),
            name="avg_pool")

    return compute


def lowest(dtype: Any) -> float | int:
    """What max pooling pads with: -inf, or an integer type's minimum."""
    import numpy as np

    return float("-inf") if np.issubdtype(np.dtype(dtype), np.floating) else int(np.iinfo(dtype).min)


def global_pool_compute(kind: str):
    def compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
        from autorelay.op import te_compute as tc
        from autorelay.te import expr as E

        x = inputs[0]
        tc.check_dtypes([x], ("float32", "float64"))
        check_pool_layout(attrs)
        if kind == "max":
            return tc.reduction(x, "max", [2, 3], True, out_type, name="global_max_pool")
        s = tc.reduction(x, "sum", [2, 3], True, out_type, name="global_sum")
        inv = E.const(1.0 / (x.shape[2] * x.shape[3]), x.dtype)
        return tc.compute0(s.shape, lambda *i: s[i] * inv, "global_avg_pool")

    return compute


def _reading_window(pixel: Any, lead: int, tap: Any, dilation: int, stride: int,
                    pooled: int) -> tuple[Any, Any]:
    """Along one axis: the window whose tap `tap` reads input `pixel` (`lead` rows of padding before
    the input), clamped into the pooled map so that reading it is always in bounds, and whether
    that window exists."""
    from autorelay.te import expr as E

    offset = pixel + lead - tap * dilation
    ahead = E.maximum(offset, 0)
    window = ahead // stride
    exists = E.all_of(offset >= 0, E.compare("eq", ahead % stride, 0), window < pooled)
    return E.minimum(window, pooled - 1), exists


def pool_grad_compute(avg: bool):
    """`nn.{max,avg}_pool2d_grad(out_grad, data)` as a gather over each pixel's window taps (see the
    module docstring). Tagged `reduce`, so the generic reduction template schedules it."""

    def compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
        from autorelay.op import te_compute as tc
        from autorelay.te import expr as E
        from autorelay.te import tensor as te

        grad, x = inputs
        tc.check_dtypes(inputs, ("float32", "float64"))
        check_pool_layout(attrs)
        shape = tc.out_shape(out_type)
        pooled = tuple(grad.shape[2:4])
        (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
        pt, pl = attrs["padding"][:2]
        if avg and (dh, dw) != (1, 1):
            raise tc.Unsupported("dilated average pooling has no gradient compute")
        if avg:
            (lo_h, hi_h), (lo_w, hi_w) = _count_bounds(attrs, x.shape[2:4])

            def share(at: tuple, _tap: Any) -> Any:
                count = _counted(at[2], kh, sh, lo_h, hi_h) * _counted(at[3], kw, sw, lo_w, hi_w)
                return grad[at] / E.cast(E.maximum(count, 1), grad.dtype)
        else:
            first = _first_maximal_tap(x, attrs, pooled)

            def share(at: tuple, tap: Any) -> Any:
                return E.select(E.compare("eq", first[at], tap), grad[at], E.const(0, grad.dtype))

        rh, rw = te.reduce_axis(kh, "gh"), te.reduce_axis(kw, "gw")

        def body(*i: Any) -> Any:
            wh, in_h = _reading_window(i[2], pt, rh.var, dh, sh, pooled[0])
            ww, in_w = _reading_window(i[3], pl, rw.var, dw, sw, pooled[1])
            at = (i[0], i[1], wh, ww, *i[4:])
            tap = E.cast(rh.var * kw + rw.var, "int32")
            return te.sum(E.select(E.binary("and", in_h, in_w), share(at, tap), E.const(0, grad.dtype)),
                          [rh, rw])

        return tc.compute0(shape, body, f"{'avg' if avg else 'max'}_pool_grad", tag="reduce")

    return compute


def _first_maximal_tap(x: Any, attrs: Attrs, pooled: tuple[int, int]) -> Any:
    """Per window, the row-major index of its first tap holding the window's maximum (padding
    counts as -inf, as in the forward pooling); a NaN is the maximum, and the first NaN's tap the
    index, as NumPy's argmax answers."""
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    xp = _padded_frame(x, attrs, pooled, float("-inf"))
    shape = (*x.shape[:2], *pooled, *x.shape[4:])
    best = _window_max(xp, shape, attrs, "pool_grad_max", "reduce")
    rh, rw = te.reduce_axis(kh, "fh"), te.reduce_axis(kw, "fw")

    def first(*i: Any) -> Any:
        value = xp[(i[0], i[1], i[2] * sh + rh * dh, i[3] * sw + rw * dw, *i[4:])]
        hit = E.binary("or", E.compare("eq", value, best[i]),
                       E.binary("and", E.compare("ne", value, value), E.compare("ne", best[i], best[i])))
        tap = E.cast(rh.var * kw + rw.var, "int32")
        return te.min(E.select(hit, tap, E.const(kh * kw, "int32")), [rh, rw])

    return te.compute(shape, first, name="pool_grad_first", tag="reduce")


__all__ = ["INT_MAX_POOL", "check_pool_layout", "global_pool_compute", "lowest", "pool_compute",
           "pool_grad_compute"]
