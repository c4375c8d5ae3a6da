"""Shape and data-movement converters: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split,
Slice, Gather, Pad, Expand, Shape, Constant, ConstantOfShape, Range.

Inputs that ONNX passes as tensors but the IR needs as attributes (shapes, axes, pads, starts…)
become attributes when they are known at import time: constants, integer initializers, or values
folded from `Shape`. Where they are run-time values, Reshape's `shape`, Slice's `starts`/`ends`/
`steps`, Pad's `pads`, Expand's and ConstantOfShape's `shape` become the inputs of the dynamic ops
`dyn.reshape`, `dyn.strided_slice`, `dyn.pad`, `dyn.broadcast_to` and `dyn.full`, and
Squeeze's/Unsqueeze's `axes`, Split's `split` sizes and Range's bounds those of `dyn.squeeze`,
`dyn.expand_dims`, `dyn.split` and `dyn.arange` (`converters_dynamic`; the VM compiles them per
concrete value). Still needed at import time: Slice's and Pad's `axes`, and Split's axis extent
when the sizes are not given. `Shape` of a tensor with dynamic extents is
the run-time op `shape_of`, so shapes computed from data feed them.
Which inputs moved from attributes to tensors differs by opset; each converter handles both forms.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, normalize_axis, registrar, required_input
from autorelay.frontend.onnx.converters_dynamic import (
    copy_zeros,
    dyn_expand,
    dyn_full,
    dyn_pad,
    dyn_range,
    dyn_reshape,
    dyn_slice,
    dyn_split,
    dyn_squeeze,
    dyn_unsqueeze,
    is_runtime,
    known_entries,
)
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)
_INT_MAX = 2**63 - 1


def _axes(g: GraphBuilder, node: NodeView, since: int, index: int = 1) -> list[int] | None:
    """`axes` as an attribute before opset `since`, as input `index` from then on."""
    if node.opset >= since:
        return None if node.input(index) is None else g.ints(node.input(index), "axes")
    return None if node.attr("axes") is None else list(node.attr("axes"))


@_reg("Reshape")
def _reshape(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    allowzero = bool(node.attr("allowzero", 0))
    if node.opset < 5:
        target = list(node.attr("shape", []))
    elif g.value_or_none(_x(node, 1)) is None:
        return dyn_reshape(g, node, x, _x(node, 1), allowzero)
    else:
        target = g.ints(_x(node, 1), "shape")
    if allowzero and 0 in target and -1 in target:
        raise node.fail(f"shape {target} has both 0 (with allowzero=1) and -1")
    shape = g.shape(x)
    if all(isinstance(d, int) for d in shape) and len(target) >= 1:
        # resolve 0 and -1 now: later passes and the printer see the plain static shape
        out = copy_zeros(target, shape, allowzero)
        if out.count(-1) == 1:
            rest = int(np.prod([v for v in out if v != -1]))
            total = int(np.prod(shape))
            if rest == 0 or total % rest:
                raise node.fail(f"cannot reshape {shape} to {target}")
            out[out.index(-1)] = total // rest
        target = out
    return g.call("reshape", x, newshape=tuple(target), allowzero=allowzero)


@_reg("Flatten")
def _flatten(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    shape = g.shape(x)
    ndim = len(shape)
    axis = node.attr("axis", 1)
    axis = axis + ndim if axis < 0 else axis
    if not 0 <= axis <= ndim:
        raise node.fail(f"axis={node.attr('axis')} is out of range for rank {ndim}")
    head, tail = shape[:axis], shape[axis:]
    if all(isinstance(d, int) for d in tail) and not all(isinstance(d, int) for d in head):
        # a dynamic batch: keep it symbolic, the tail is static
        return g.call("reshape", x, newshape=(-1, int(np.prod(tail))))
    if all(isinstance(d, int) for d in shape):
        return g.call("reshape", x, newshape=(int(np.prod(head)), int(np.prod(tail))))
    # run-time extents in the tail: the two products are computed from the run-time shape
    extents = g.call("shape_of", x)
    sizes = [g.call("prod", g.call("strided_slice", extents, begin=(lo,), end=(hi,)), axis=[0], keepdims=True)
             if hi > lo else g.const(np.ones(1, "int64")) for lo, hi in ((0, axis), (axis, ndim))]
    return g.call("dyn.reshape", x, g.call("concatenate", g.tuple(sizes), axis=0))


@_reg("Transpose")
def _transpose(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    perm = node.attr("perm")
    return g.call("transpose", x, axes=None if perm is None else tuple(perm))


@_reg("Squeeze")
def _squeeze(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    if node.opset >= 13 and is_runtime(g, node.input(1)):
        return dyn_squeeze(g, node, x, _x(node, 1))
    axes = _axes(g, node, 13)
    if axes is None:
        s = g.static_shape(x)
        axes = [i for i, d in enumerate(s) if d == 1]
    ndim = g.ndim(x)
    return g.call("squeeze", x, axis=sorted({normalize_axis(g, a, ndim, "axes") for a in axes}))


@_reg("Unsqueeze")
def _unsqueeze(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    if node.opset >= 13 and is_runtime(g, node.input(1)):
        return dyn_unsqueeze(g, node, x, _x(node, 1))
    axes = _axes(g, node, 13)
    if not axes:
        raise node.fail("axes is required")
    out_rank = g.ndim(x) + len(axes)
    norm = sorted({normalize_axis(g, a, out_rank, "axes") for a in axes})
    if len(norm) != len(axes):
        raise node.fail(f"axes {axes} has duplicates")
    for a in norm:  # ascending, so each index is already final
        x = g.call("expand_dims", x, axis=a)
    return x


@_reg("Concat")
def _concat(g: GraphBuilder, node: NodeView) -> Expr:
    parts = [e for e in node.inputs if e is not None]
    if node.attr("axis") is None:
        raise node.fail("attribute axis is required")
    # ONNX lets empty tensors join; drop them (the IR's concatenate needs equal ranks anyway)
    ndim = g.ndim(parts[0])
    axis = normalize_axis(g, node.attr("axis"), ndim)
    if len(parts) == 1:
        return parts[0]
    return g.call("concatenate", g.tuple(parts), axis=axis)


@_reg("Split")
def _split(g: GraphBuilder, node: NodeView) -> list[Expr]:
    x = _x(node)
    ndim = g.ndim(x)
    axis = normalize_axis(g, node.attr("axis", 0), ndim)
    if node.opset >= 13 and is_runtime(g, node.input(1)):
        return dyn_split(g, node, x, _x(node, 1), axis)
    extent = g.shape(x)[axis]
    if not isinstance(extent, int):  # the other axes may be dynamic
        raise node.fail(f"axis {axis} of the input has dynamic extent {extent}; Split needs it static "
                        "(or run-time split sizes)")
    n = node.num_outputs
    if node.opset >= 13:
        sizes = g.ints(node.input(1), "split") if node.input(1) is not None else None
    else:
        sizes = node.attr("split")
    if sizes is None:
        num = node.attr("num_outputs", n)
        if node.opset >= 18 and num != n:
            raise node.fail(f"num_outputs={num} but the node has {n} outputs")
        chunk = -(-extent // num)  # the last chunk may be smaller (opset 18)
        sizes = [min(chunk, extent - i * chunk) for i in range(num)]
    if sum(sizes) != extent or len(sizes) != n:
        raise node.fail(
            f"split sizes {list(sizes)} must sum to axis {axis} extent {extent} with one per output ({n})"
        )
    return split_pieces(g, x, sizes, axis)


def split_pieces(g: GraphBuilder, x: Expr, sizes: list[int], axis: int) -> list[Expr]:
    """`x` cut along `axis` into pieces of `sizes` (which sum to its extent there), one `split`;
    `x` itself when there are not two pieces."""
    if len(sizes) <= 1:
        return [x]
    bounds = tuple(int(b) for b in np.cumsum(sizes)[:-1])
    tup = g.call("split", x, indices_or_sections=bounds, axis=axis)
    return [g.item(tup, i) for i in range(len(sizes))]


@_reg("Slice")
def _slice(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    ndim = g.ndim(x)
    if node.opset < 10:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = node.attr("axes")
        steps = None
    elif any(node.input(i) is not None and g.value_or_none(node.input(i)) is None for i in (1, 2, 4)):
        return dyn_slice(g, node, x)
    else:
        starts, ends = g.ints(_x(node, 1), "starts"), g.ints(_x(node, 2), "ends")
        axes = g.ints(node.input(3), "axes") if node.input(3) is not None else None
        steps = g.ints(node.input(4), "steps") if node.input(4) is not None else None
    axes = list(range(len(starts))) if axes is None else [normalize_axis(g, a, ndim, "axes") for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.fail(f"starts {starts}, ends {ends}, axes {axes}, steps {steps} must have equal lengths")
    shape = g.shape(x)
    begin, end = [], []
    for b, e, a, s in zip(starts, ends, axes, steps):
        if s == 0:
            raise node.fail(f"step 0 on axis {a}")
        d = shape[a]
        if isinstance(d, int):  # clamp as ONNX does, then write Python-slice bounds
            lo, hi = (0, d) if s > 0 else (-1, d - 1)
            b = min(max(b + d if b < 0 else b, lo), hi)
            e = min(max(e + d if e < 0 else e, lo), hi)
            if s < 0 and e == -1:
                e = -d - 1  # "before index 0" in Python slice terms
        begin.append(int(b))
        end.append(int(e))
    return g.call(
        "strided_slice", x, begin=tuple(begin), end=tuple(end), strides=tuple(steps), axes=tuple(axes)
    )


@_reg("Gather")
def _gather(g: GraphBuilder, node: NodeView) -> Expr:
    x, ind = _x(node, 0), _x(node, 1)
    axis = normalize_axis(g, node.attr("axis", 0), g.ndim(x))
    v = g.value_or_none(ind)
    if v is not None and (known := _static_extents(g, x, v)) is not None:
        return known
    if v is not None:
        n = g.shape(x)[axis]
        if isinstance(n, int):
            if np.any((v < -n) | (v >= n)):
                raise node.fail(f"indices {v.tolist()} out of range for axis {axis} of extent {n}")
            return g.call("take", x, g.const(np.where(v < 0, v + n, v), str(v.dtype)), axis=axis, mode="clip")
    return g.call("take", x, ind, axis=axis, mode="wrap")


def _static_extents(g: GraphBuilder, x: Expr, v: np.ndarray) -> Expr | None:
    """Gather at constant positions of a shape vector (`shape_of(t)`, or shape arithmetic on it):
    a constant when the entries picked are known at import time (a sequence length beside a
    dynamic batch), so what is computed from them (a causal mask's size, a reshape) stays static
    too; None otherwise."""
    if g.ndim(x) != 1 or g.dtype(x) not in ("int32", "int64") or (whole := known_entries(g, x)) is None:
        return None
    n = len(whole)
    if np.any((v < -n) | (v >= n)):
        return None  # the general path reports it
    picked = [whole[int(i)] for i in np.where(v < 0, v + n, v).reshape(-1)]
    if not all(isinstance(d, int) for d in picked):
        return None
    return g.const(np.array(picked, g.dtype(x)).reshape(v.shape))


@_reg("Expand")
def _expand(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    if g.value_or_none(_x(node, 1)) is None or not all(isinstance(d, int) for d in g.shape(x)):
        return dyn_expand(g, node, x, _x(node, 1))  # a two-way broadcast the VM specialises
    target = g.ints(_x(node, 1), "shape")
    s = g.static_shape(x)
    try:
        out = tuple(np.broadcast_shapes(s, tuple(target)))
    except ValueError:
        raise node.fail(f"shape {target} does not broadcast with input shape {s}") from None
    return x if out == s else g.call("broadcast_to", x, shape=out)


@_reg("Shape")
def _shape(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    s = g.shape(x)
    start, end = node.attr("start", 0), node.attr("end", len(s))
    if all(isinstance(d, int) for d in s[slice(start, end)]):  # the extents asked for are static
        return g.const(np.array(s[slice(start, end)], dtype="int64"))
    b, e, _ = slice(start, end).indices(len(s))
    out = g.call("shape_of", x)  # `?` or symbolic extents: known at run time (the VM specialises)
    return out if (b, e) == (0, len(s)) else g.call("strided_slice", out, begin=(b,), end=(max(e, b),))


@_reg("Constant")
def _constant(g: GraphBuilder, node: NodeView) -> Expr:
    for key, dtype in (
        ("value_float", "float32"),
        ("value_floats", "float32"),
        ("value_int", "int64"),
        ("value_ints", "int64"),
    ):
        if key in node.attrs:
            return g.const(np.array(node.attrs[key], dtype=dtype))
    if "value" in node.attrs:
        return g.const(node.attrs["value"])
    raise node.fail(f"unsupported Constant form (attributes {sorted(node.attrs)})")


@_reg("ConstantOfShape")
def _constant_of_shape(g: GraphBuilder, node: NodeView) -> Expr:
    fill = node.attr("value")
    fill = np.zeros(1, dtype="float32") if fill is None else np.asarray(fill).reshape(-1)
    if g.value_or_none(_x(node)) is None:
        return dyn_full(g, node, g.const(fill[0], str(fill.dtype)), _x(node))
    shape = g.ints(_x(node), "shape")
    return g.const(np.full(shape, fill[0], dtype=fill.dtype))


@_reg("Range")
def _range(g: GraphBuilder, node: NodeView) -> Expr:
    if any(is_runtime(g, _x(node, i)) for i in range(3)):
        return dyn_range(g, node, [_x(node, i) for i in range(3)])
    start, limit, delta = (g.value(_x(node, i), what) for i, what in enumerate(("start", "limit", "delta")))
    dtype = np.asarray(start).dtype
    n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return g.const((np.asarray(start) + np.arange(n) * np.asarray(delta)).astype(dtype))


@_reg("Pad")
def _pad(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    ndim = g.ndim(x)
    mode = node.attr("mode", "constant")
    if node.opset < 11:
        pads = list(node.attr("pads", node.attr("paddings", [])))
        value = float(node.attr("value", 0.0))
        fill = g.scalar(value, x)
    elif g.value_or_none(_x(node, 1)) is None:
        return dyn_pad(g, node, x, mode)
    else:
        pads = g.ints(_x(node, 1), "pads")
        cv = node.input(2)
        fill = (
            g.scalar(0, x)
            if cv is None
            else g.const(np.asarray(g.value(cv, "constant_value")).reshape(()), g.dtype(x))
        )
    axes = (
        g.ints(node.input(3), "axes") if node.opset >= 18 and node.input(3) is not None else list(range(ndim))
    )
    axes = [normalize_axis(g, a, ndim, "axes") for a in axes]
    if len(pads) != 2 * len(axes):
        raise node.fail(f"pads {pads} must have 2 entries per padded axis ({len(axes)} axes)")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise node.fail(f"mode={mode!r} is not supported (constant, reflect, edge, wrap)")
    width = [[0, 0] for _ in range(ndim)]
    for k, a in enumerate(axes):
        width[a] = [pads[k], pads[k + len(axes)]]
    pos = tuple((max(b, 0), max(e, 0)) for b, e in width)
    if mode == "wrap" and any(b or e for b, e in pos):
        x = _wrap_pad(g, x, pos)
    elif any(b or e for b, e in pos):
        x = g.call("nn.pad", x, fill, pad_width=pos, pad_mode=mode)
    if any(b < 0 or e < 0 for b, e in width):  # negative pads crop
        shape = g.static_shape(x)
        begin = [max(-b, 0) for b, _ in width]
        end = [d - max(-e, 0) for d, (_, e) in zip(shape, width)]
        x = g.call("strided_slice", x, begin=tuple(begin), end=tuple(end))
    return x


def _wrap_pad(g: GraphBuilder, x: Expr, width: tuple[tuple[int, int], ...]) -> Expr:
    """Circular padding: each axis gets its own tail in front and its head behind (may repeat)."""
    for axis, (b, e) in enumerate(width):
        if not (b or e):
            continue
        n = g.static_shape(x)[axis]
        index = np.arange(-b, n + e) % n  # positions in the padded axis, read from x
        x = g.call("take", x, g.const(index.astype("int64")), axis=axis, mode="clip")
    return x
