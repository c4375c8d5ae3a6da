"""Ops whose result is a pattern of positions: Trilu (one triangle of each matrix kept), EyeLike,
OneHot and Hardmax (a one at each slice's largest element).

Trilu and EyeLike depend only on static shapes and their diagonal offset, so the pattern is a
constant: Trilu is a `where` against a boolean mask that broadcasts over the batch axes (for
matrices of run-time extents, the mask compares run-time row and column positions). OneHot
and Hardmax are `one_hot`, after wrapping negative indices (ONNX counts them from the end) or
after an `argmax`.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import (
    ONNX_DTYPES,
    GraphBuilder,
    NodeView,
    normalize_axis,
    registrar,
    required_input,
    wrap_negative,
)
from autorelay.frontend.onnx.converters_dynamic import dyn_range
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _offset(g: GraphBuilder, node: NodeView, index: int) -> int:
    k = node.input(index)
    return 0 if k is None else int(np.asarray(g.value(k, "k")).reshape(()))


@_reg("Trilu")
def _trilu(g: GraphBuilder, node: NodeView) -> Expr:
    """A constant mask for static matrices; for dynamic ones (a causal mask over a run-time sequence
    length) the mask compares a run-time row and column index, `dyn.arange` of the extents."""
    x = _x(node)
    shape = g.shape(x)
    if len(shape) < 2:
        raise node.fail(f"expects a tensor of rank >= 2, got shape {shape}")
    k = _offset(g, node, 1)
    if all(isinstance(d, int) for d in shape[-2:]):
        n, m = shape[-2:]
        rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
        keep = g.const(cols - rows >= k if node.attr("upper", 1) else cols - rows <= k)
    else:
        extents = g.call("shape_of", x)
        rows, cols = (_positions(g, node, extents, axis) for axis in (len(shape) - 2, len(shape) - 1))
        offset = g.call("subtract", g.call("expand_dims", cols, axis=0), g.call("expand_dims", rows, axis=1))
        bound = g.const(np.array(k, "int64"))
        keep = g.call("greater_equal" if node.attr("upper", 1) else "less_equal", offset, bound)
    return g.call("where", keep, x, g.call("zeros_like", x))


def _positions(g: GraphBuilder, node: NodeView, extents: Expr, axis: int) -> Expr:
    """0, 1, ..., n - 1 for the run-time extent n of `axis` (read from the shape vector `extents`)."""
    n = g.call("strided_slice", extents, begin=(axis,), end=(axis + 1,))
    return dyn_range(g, node, [g.const(np.array(0, "int64")), n, g.const(np.array(1, "int64"))])


@_reg("EyeLike")
def _eye_like(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    shape = g.static_shape(x)
    if len(shape) != 2:
        raise node.fail(f"expects a 2-D input, got shape {shape}")
    to = node.attr("dtype")
    if to is not None and to not in ONNX_DTYPES:
        raise node.fail(f"dtype {to} is not an ONNX element type AutoRelay holds")
    dtype = g.dtype(x) if to is None else ONNX_DTYPES[to]
    return g.const(np.eye(*shape, k=int(node.attr("k", 0)), dtype=dtype), dtype)


@_reg("OneHot")
def _one_hot(g: GraphBuilder, node: NodeView) -> Expr:
    ind, values = _x(node, 0), _x(node, 2)
    depth = int(np.asarray(g.value(_x(node, 1), "depth")).reshape(-1)[0])
    if depth < 1:
        raise node.fail(f"depth must be >= 1, got {depth}")
    if tuple(g.shape(values)) != (2,):
        raise node.fail(f"values must hold [off_value, on_value], got shape {g.shape(values)}")
    axis = normalize_axis(g, node.attr("axis", -1), g.ndim(ind) + 1)
    ind = wrap_negative(g, g.call("cast", ind, dtype="int64"), depth)  # ONNX allows float indices
    off, on = (g.call("strided_slice", values, begin=(i,), end=(i + 1,), strides=(1,)) for i in (0, 1))
    off, on = (g.call("reshape", v, newshape=()) for v in (off, on))
    return g.call("one_hot", ind, on, off, depth=depth, axis=axis, dtype=g.dtype(values))


@_reg("Hardmax")
def _hardmax(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    shape = g.static_shape(x)
    axis = normalize_axis(g, node.attr("axis", -1 if node.opset >= 13 else 1), len(shape))
    flat = node.opset < 13  # before opset 13: the trailing axes from `axis` on are one axis
    if flat:
        x = g.call("reshape", x, newshape=(int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
        axis = 1
    n = g.static_shape(x)[axis]
    best = g.call("argmax", x, axis=[axis], keepdims=False)
    one, zero = g.const(np.array(1, g.dtype(x))), g.const(np.array(0, g.dtype(x)))
    best = g.call("cast", best, dtype="int64")
    y = g.call("one_hot", best, one, zero, depth=n, axis=axis, dtype=g.dtype(x))
    return g.call("reshape", y, newshape=shape) if flat else y
