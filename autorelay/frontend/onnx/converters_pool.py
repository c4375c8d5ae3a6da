"""Pooling converters: MaxPool, AveragePool, LpPool and their Global forms, over 1, 2 or 3 spatial axes.

The IR pools in 2-d only (`nn.max_pool2d`, `nn.avg_pool2d`), so the other ranks are rewritten onto it:

* 1-d pooling is 2-d pooling over a height of one.
* 3-d pooling is two 2-d poolings. A pooling window is a box and every rule that shapes it is per
  axis — the extent, stride, dilation, padding, the `ceil_mode` overhang, and the divisor of an
  average (the product of the per-axis counts of window positions inside the input, or inside the
  padded input with `count_include_pad`). Max over a box is the max over depth of the max over each
  (height, width) slice, and likewise for the average, so pooling (H, W) with depth folded into the
  channels, then pooling depth with (H, W) folded into one axis, is exact.
* LpPool, `(sum |x|^p)^(1/p)` over a zero-padded window, is an average of `|x|^p` that counts the
  padding, times the window size, to the power `1/p`.

MaxUnpool, the inverse a segmentation decoder runs, is written for windows that tile the input
(stride = kernel, no padding, as SegNet's): every output position lies in at most one window, so it
keeps that window's value where the window's index names it, and 0 elsewhere — a gather, not a
scatter. With `output_shape`, the indices are flat positions in a tensor of that shape (the pooled
input's, whose last rows a floor-mode pooling left out), as ONNX Runtime reads them. An index must
name a position inside its own window, as MaxPool's do; one elsewhere is not written (ONNX
Runtime's scatter would write it).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.frontend.onnx.converters_nn import auto_pads
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _pool2d(g: GraphBuilder, kind: str, x: Expr, window: dict, count_include_pad: bool) -> Expr:
    """One `nn.max_pool2d` / `nn.avg_pool2d` with `window` = pool_size, strides, dilation, padding, ceil."""
    if kind == "max":
        return g.call("nn.max_pool2d", x, **window)
    return g.call("nn.avg_pool2d", x, count_include_pad=count_include_pad, **window)


def _window(kernel: list[int], strides: list[int], dil: list[int], pads: list[int], ceil: bool) -> dict:
    return dict(
        pool_size=tuple(kernel),
        strides=tuple(strides),
        dilation=tuple(dil),
        padding=tuple(pads),
        ceil_mode=ceil,
    )


def _window_attrs(
    g: GraphBuilder, node: NodeView, x: Expr, kernel: list[int]
) -> tuple[list[int], list[int], list[int], bool]:
    """(strides, dilations, explicit pads, ceil_mode) of a pooling node over data `x`."""
    nsp = len(kernel)
    if nsp not in (1, 2, 3) or g.ndim(x) != nsp + 2:
        raise node.fail(f"{nsp}-d pooling of rank-{g.ndim(x)} data is not supported (only 1-d, 2-d and 3-d)")
    strides = list(node.attr("strides", [1] * nsp))
    dil = list(node.attr("dilations", [1] * nsp))
    if len(strides) != nsp or len(dil) != nsp:
        raise node.fail(f"strides={strides} and dilations={dil} must have {nsp} entries")
    pads = auto_pads(node, g.shape(x)[2:], kernel, strides, dil)
    return strides, dil, pads, bool(node.attr("ceil_mode", 0))


def pool_nd(
    g: GraphBuilder,
    node: NodeView,
    kind: str,
    x: Expr,
    kernel: list[int],
    count_include_pad: bool = False,
) -> Expr:
    """Max (`kind="max"`) or average pooling of NC + 1..3 spatial axes from the node's window attributes."""
    nsp = len(kernel)
    strides, dil, pads, ceil = _window_attrs(g, node, x, kernel)
    if nsp == 2:
        return _pool2d(g, kind, x, _window(kernel, strides, dil, pads, ceil), count_include_pad)
    if nsp == 1:  # pool over (1, L)
        y = g.call("expand_dims", x, axis=2)
        win = _window([1] + kernel, [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]], ceil)
        return g.call("squeeze", _pool2d(g, kind, y, win, count_include_pad), axis=[2])
    n, c, d, h, w = g.static_shape(x, "data")
    hw = g.call("reshape", x, newshape=(n, c * d, h, w))
    hw_win = _window(kernel[1:], strides[1:], dil[1:], [pads[1], pads[2], pads[4], pads[5]], ceil)
    hw = _pool2d(g, kind, hw, hw_win, count_include_pad)
    oh, ow = g.static_shape(hw)[2:]
    depth = g.call("reshape", hw, newshape=(n, c, d, oh * ow))
    d_win = _window([kernel[0], 1], [strides[0], 1], [dil[0], 1], [pads[0], 0, pads[3], 0], ceil)
    depth = _pool2d(g, kind, depth, d_win, count_include_pad)
    return g.call("reshape", depth, newshape=(n, c, g.static_shape(depth)[2], oh, ow))


@_reg("MaxPool", "AveragePool")
def _pool(g: GraphBuilder, node: NodeView) -> Expr | list[Expr]:
    kernel = list(node.attr("kernel_shape", []))
    if node.op_type == "AveragePool":
        return pool_nd(g, node, "avg", _x(node), kernel, bool(node.attr("count_include_pad", 0)))
    y = pool_nd(g, node, "max", _x(node), kernel)
    if node.num_outputs > 1 and any(node.output_names[1:]):
        return [y, _max_pool_indices(g, node, _x(node), kernel, g.static_shape(y)[2:])]
    return y


def _max_pool_indices(
    g: GraphBuilder, node: NodeView, x: Expr, kernel: list[int], out_sizes: tuple[int, ...]
) -> Expr:
    """MaxPool's Indices: where in the flattened input each window's first maximum lies.

    No pooling op returns positions, so the window is unrolled: one strided slice of the -inf-padded
    input per kernel offset, each paired with a constant of the input positions it reads, kept where
    its value beats (strictly: the first maximum in row-major window order wins, as in ONNX Runtime)
    the best so far. That is prod(kernel) slices, which is what a kernel of pooling size costs anyway.
    `storage_order=1` numbers the spatial positions column-major.
    """
    strides, dil, pads, _ = _window_attrs(g, node, x, kernel)
    shape = g.static_shape(x, "data")
    nsp, sizes = len(kernel), shape[2:]
    need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out_sizes, strides, kernel, dil)]
    after = [max(n - b - z, e) for n, b, z, e in zip(need, pads[:nsp], sizes, pads[nsp:])]
    fill = g.scalar(float("-inf") if g.dtype(x).startswith("float") else int(np.iinfo(g.dtype(x)).min), x)
    width = ((0, 0), (0, 0), *zip(pads[:nsp], after))
    xp = g.call("nn.pad", x, fill, pad_width=width, pad_mode="constant")
    order = "F" if node.attr("storage_order", 0) else "C"
    grid = np.meshgrid(*[np.arange(o) * s for o, s in zip(out_sizes, strides)], indexing="ij")
    image = np.arange(shape[0] * shape[1], dtype=np.int64) * math.prod(sizes)
    image = image.reshape(shape[:2] + (1,) * nsp)  # (n * C + c) * prod(sizes): the image's first index
    best_val = best_idx = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        starts = [o * d for o, d in zip(offset, dil)]
        val = g.call(
            "strided_slice",
            xp,
            begin=(0, 0, *starts),
            end=(shape[0], shape[1], *[b + (o - 1) * s + 1 for b, o, s in zip(starts, out_sizes, strides)]),
            strides=(1, 1, *strides),
        )
        pos = [np.clip(p + b - pad, 0, n - 1) for p, b, pad, n in zip(grid, starts, pads[:nsp], sizes)]
        idx = g.const(image + np.ravel_multi_index(tuple(pos), sizes, order=order).astype(np.int64))
        if best_val is None:
            best_val, best_idx = val, idx
            continue
        beats = g.call("greater", val, best_val)
        best_idx = g.call("where", beats, idx, best_idx)
        best_val = g.call("where", beats, val, best_val)
    return best_idx


def _abs_pow(g: GraphBuilder, x: Expr, p: float) -> Expr:
    if p == 1.0:
        return g.call("abs", x)
    if p == 2.0:
        return g.call("multiply", x, x)
    return g.call("power", g.call("abs", x), g.scalar(p, x))


def _root(g: GraphBuilder, s: Expr, p: float) -> Expr:
    if p == 1.0:
        return s
    if p == 2.0:
        return g.call("sqrt", s)
    return g.call("power", s, g.scalar(1.0 / p, s))


def _p_of(node: NodeView) -> float:
    p = float(node.attr("p", 2))
    if not p > 0:
        raise node.fail(f"p={p} must be positive")
    return p


@_reg("LpPool")
def _lp_pool(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    kernel = list(node.attr("kernel_shape", []))
    p = _p_of(node)
    if node.attr("ceil_mode", 0):
        # A ceil_mode window hanging over the padded edge holds fewer than prod(kernel) positions, so
        # the average no longer scales back to the sum; without an overhang ceil_mode changes nothing.
        sizes = g.static_shape(x, "data")[2:]
        strides = list(node.attr("strides", [1] * len(kernel)))
        dil = list(node.attr("dilations", [1] * len(kernel)))
        pads = auto_pads(node, sizes, kernel, strides, dil)
        nsp = len(kernel)
        for ax, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dil)):
            span = n + pads[ax] + pads[nsp + ax] - (k - 1) * d - 1
            if span % s:
                raise node.fail("ceil_mode=1 with a window hanging over the padded input is not supported")
    mean = pool_nd(g, node, "avg", _abs_pow(g, x, p), kernel, count_include_pad=True)
    total = g.call("multiply", mean, g.scalar(float(math.prod(kernel)), mean))
    return _root(g, total, p)


@_reg("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    nd = g.ndim(x)
    if nd < 3:
        raise node.fail(f"data of rank {nd} has no spatial axes")
    if nd == 4 and node.op_type != "GlobalLpPool":
        op = "nn.global_avg_pool2d" if node.op_type == "GlobalAveragePool" else "nn.global_max_pool2d"
        return g.call(op, x)
    axes = list(range(2, nd))
    if node.op_type == "GlobalLpPool":
        p = _p_of(node)
        return _root(g, g.call("sum", _abs_pow(g, x, p), axis=axes, keepdims=True), p)
    op = "mean" if node.op_type == "GlobalAveragePool" else "max"
    return g.call(op, x, axis=axes, keepdims=True)


@_reg("MaxUnpool")
def _max_unpool(g: GraphBuilder, node: NodeView) -> Expr:
    x, indices = _x(node, 0), _x(node, 1)
    shape = g.static_shape(x)
    kernel, nsp = list(node.attr("kernel_shape", [])), len(shape) - 2
    strides = list(node.attr("strides", [1] * nsp))
    pads = list(node.attr("pads", [0] * 2 * nsp))
    if nsp not in (1, 2) or kernel != strides or any(pads) or len(kernel) != nsp:
        raise node.fail(f"only windows that tile the input are supported (1-d or 2-d, strides = "
                        f"kernel_shape, no pads); got kernel_shape {kernel}, strides {strides}, pads {pads}")
    out = [*shape[:2], *(n * k for n, k in zip(shape[2:], kernel))]
    wide, where = x, g.call("cast", indices, dtype="int64")
    for axis, k in enumerate(kernel, start=2):  # each input element repeated over its window
        wide = g.call("repeat", wide, repeats=k, axis=axis)
        where = g.call("repeat", where, repeats=k, axis=axis)
    target = out if node.input(2) is None else g.ints(node.input(2), "output_shape")
    if len(target) != len(out) or target[:2] != out[:2] or any(t < o for t, o in zip(target, out)):
        raise node.fail(f"output_shape {target} must keep N, C and be at least {out}")
    # the indices are flat positions in the output (the pooled input's shape, as ONNX Runtime reads
    # output_shape): those of the positions the windows cover, then the rest of the output is 0
    flat = np.arange(int(np.prod(target)), dtype="int64").reshape(target)
    flat = g.const(np.ascontiguousarray(flat[tuple(slice(0, o) for o in out)]))
    y = g.call("where", g.call("equal", where, flat), wide, g.call("zeros_like", wide))
    if target == out:
        return y
    return g.call("nn.pad", y, g.scalar(0.0, y), pad_width=tuple((0, t - o) for t, o in zip(target, out)))
