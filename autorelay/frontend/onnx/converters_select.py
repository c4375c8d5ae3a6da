"""Selection and contraction converters: TopK, GatherElements, GatherND, ScatterElements (and
opset 9's Scatter), ScatterND, NonZero, Compress and Unique.

GatherND reads whole slices at index tuples: each tuple (negative entries wrapped) becomes one
row-major offset into the indexed leading axes, flattened into one axis, and a `take` along that
axis reads the slices; with batch axes, each batch's offset is shifted by its position. ScatterND
is the same flattening around `scatter_elements` along that axis, each slice's offset broadcast
over the slice.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import (
    GraphBuilder,
    NodeView,
    extent_scalar,
    normalize_axis,
    registrar,
    required_input,
    tuple_offsets,
    wrap_negative,
)
from autorelay.ir.expr import Call, Expr, Op
from autorelay.op.dynamic_axes import empty_topk

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


@_reg("TopK")
def _topk(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    axis = normalize_axis(g, node.attr("axis", -1), g.ndim(x))
    largest = bool(node.attr("largest", 1))
    if node.opset >= 10 and g.value_or_none(_x(node, 1)) is None:  # k computed at run time
        k = _x(node, 1)
        if g.dtype(k) not in ("int32", "int64") or any(d != 1 for d in g.shape(k)):
            raise node.fail(f"k must be a 1-element integer tensor, got {g.type_of(k)}")
        k = g.call("cast", g.call("reshape", k, newshape=(1,)), dtype="int64")
        out = g.call("dyn.topk", x, k, axis=axis, is_ascend=not largest, dtype="int64")
        return [g.item(out, 0), g.item(out, 1)]
    k = int(node.attr("k")) if node.opset < 10 else g.ints(_x(node, 1), "k")[0]
    if k < 0:
        raise node.fail(f"k must be >= 0, got {k}")
    if k == 0:  # empty outputs (the topk op reads k < 1 as "all")
        return list(empty_topk(g.call, x, g.shape(x), axis, "int64"))
    out = g.call("topk", x, k=k, axis=axis, ret_type="both", is_ascend=not largest, dtype="int64")
    return [g.item(out, 0), g.item(out, 1)]


@_reg("GatherElements")
def _gather_elements(g: GraphBuilder, node: NodeView) -> Expr:
    x, ind = _x(node, 0), _x(node, 1)
    axis = normalize_axis(g, node.attr("axis", 0), g.ndim(x))
    n = g.shape(x)[axis]
    v = g.value_or_none(ind)
    if v is not None and isinstance(n, int):
        if np.any((v < -n) | (v >= n)):
            raise node.fail(f"indices out of range [-{n}, {n}) for axis {axis}")
        ind = g.const(np.where(v < 0, v + n, v), str(v.dtype))
    elif isinstance(n, int):  # runtime indices: negative ones count from the end
        ind = wrap_negative(g, ind, n)
    return g.call("gather", x, ind, axis=axis)


@_reg("GatherND")
def _gather_nd(g: GraphBuilder, node: NodeView) -> Expr:
    x, ind = _x(node, 0), _x(node, 1)
    shape, ishape = g.shape(x), g.shape(ind)
    b = int(node.attr("batch_dims", 0))
    dynamic = not all(isinstance(d, int) for d in shape)  # a dynamic first axis: a batch
    if dynamic and (b or not all(isinstance(d, int) for d in shape[1:])):
        raise node.fail(f"data of shape {tuple(map(str, shape))} (batch_dims={b}) needs static extents "
                        "after its first axis, and no batch axes")
    if ishape and not all(isinstance(d, int) for d in (*ishape[:b], ishape[-1])):
        # the tuples' count may be dynamic (the coordinates NonZero found: x[mask])
        raise node.fail(f"indices of shape {tuple(map(str, ishape))} need a static tuple length and "
                        "batch axes")
    k = ishape[-1] if ishape else 0
    if not ishape or b < 0 or b >= len(ishape) or b + k > len(shape) or tuple(ishape[:b]) != tuple(shape[:b]):
        raise node.fail(f"indices of shape {ishape} (batch_dims={b}) do not index data of shape {shape}")
    indexed = shape[b : b + k]
    if dynamic:  # negative indices wrap by the run-time extents
        wrap_by = g.call("strided_slice", g.call("shape_of", x), begin=(0,), end=(k,))
        offset = tuple_offsets(g, ind, indexed, wrap_by)
        return g.call("take", g.call("reshape", x, newshape=(-1, *shape[k:])), offset, axis=0)
    offset = tuple_offsets(g, ind, indexed)
    span = int(np.prod(indexed))
    if b:  # each batch's slices start after those of the batches before it
        batch = np.arange(int(np.prod(shape[:b])), dtype="int64")
        batch = batch.reshape(shape[:b] + (1,) * (len(ishape) - 1 - b))
        offset = g.call("add", offset, g.const(batch * span))
    rows = g.call("reshape", x, newshape=(int(np.prod(shape[:b])) * span, *shape[b + k :]))
    return g.call("take", rows, offset, axis=0)


def _reduction(node: NodeView) -> str:
    how = node.attr("reduction", "none")
    if how not in ("none", "add", "mul", "max", "min"):
        raise node.fail(f"reduction must be none, add, mul, max or min, got {how!r}")
    return "update" if how == "none" else how


@_reg("ScatterElements", "Scatter")
def _scatter_elements(g: GraphBuilder, node: NodeView) -> Expr:
    x, ind, upd = _x(node, 0), _x(node, 1), _x(node, 2)
    axis = normalize_axis(g, node.attr("axis", 0), g.ndim(x))
    rows = _row_indices(g, ind, axis)
    if rows is not None and _reduction(node) == "update":
        return _scatter_rows(g, x, rows, upd, axis)
    return g.call("scatter_elements", x, ind, upd, axis=axis, reduction=_reduction(node))


def _row_indices(g: GraphBuilder, ind: Expr, axis: int) -> Expr | None:
    """The 1-d indices when `ind` is a broadcast of them along every axis but `axis` (PyTorch's
    `index_put_` of whole rows exports so: a detector's RoI pooler writes each level's features
    into its rows of the result), else None."""
    broadcasts = ("broadcast_to", "dyn.broadcast_to")
    if not (isinstance(ind, Call) and isinstance(ind.op, Op) and ind.op.name in broadcasts):
        return None
    src = ind.args[0]
    shape = g.shape(src)
    if len(shape) != g.ndim(ind) or any(d != 1 for a, d in enumerate(shape) if a != axis):
        return None
    return g.call("cast", g.call("reshape", src, newshape=(-1,)), dtype="int64")


def _scatter_rows(g: GraphBuilder, x: Expr, rows: Expr, upd: Expr, axis: int) -> Expr:
    """ScatterElements of whole rows along `axis`. Which update row lands on each row of `x` (the
    last one to, or none) comes from a scatter of the k row numbers into n entries; then one
    gather from the update rows followed by x's own rows picks every output row. The element-wise
    scatter compares every element with every update along the axis (n x k x a row's size); this
    compares n x k numbers once."""
    n, k = extent_scalar(g, x, axis), extent_scalar(g, rows, 0)
    none = g.call("dyn.full", _i64(g, -1), g.call("reshape", n, newshape=(1,)))
    source = g.call("scatter_elements", none, rows, g.call("dyn.arange", _i64(g, 0), k, _i64(g, 1)), axis=0)
    own = g.call("add", g.call("dyn.arange", _i64(g, 0), n, _i64(g, 1)), k)  # x's rows after the k updates
    pick = g.call("where", g.call("greater_equal", source, _i64(g, 0)), source, own)
    return g.call("take", g.call("concatenate", g.tuple([upd, x]), axis=axis), pick, axis=axis)


@_reg("ScatterND")
def _scatter_nd(g: GraphBuilder, node: NodeView) -> Expr:
    x, ind, upd = _x(node, 0), _x(node, 1), _x(node, 2)
    shape, ishape = g.shape(x), g.shape(ind)
    k = ishape[-1] if ishape else None
    if not isinstance(k, int) or not 1 <= k <= len(shape):
        raise node.fail(f"indices of shape {ishape} do not index data of shape {shape}")
    rest, inner = shape[k:], shape[1:k]
    if not all(isinstance(d, int) for d in (*rest, *inner)):  # only the first axis may be dynamic
        raise node.fail(f"data of shape {shape} needs static extents after its first axis")
    expected, ushape = (*ishape[:-1], *rest), g.shape(upd)
    if len(ushape) != len(expected) or any(isinstance(u, int) and isinstance(e, int) and u != e
                                           for u, e in zip(ushape, expected)):
        raise node.fail(f"updates of shape {ushape} do not fit indices {ishape} into data {shape} "
                        f"(expected {expected})")
    wrap_by = None  # a dynamic first axis: negative indices are wrapped by the run-time extents
    if not isinstance(shape[0], int):
        wrap_by = g.call("strided_slice", g.call("shape_of", x), begin=(0,), end=(k,))
    offset = tuple_offsets(g, ind, shape[:k], wrap_by)
    rows_of_updates = g.call("reshape", upd, newshape=(-1, *rest))
    offset = g.call("reshape", offset, newshape=(-1,) + (1,) * len(rest))
    offset = g.call("broadcast_to_like", offset, g.call("cast", rows_of_updates, dtype="int64"))
    rows = g.call("reshape", x, newshape=(-1, *rest))
    out = g.call("scatter_elements", rows, offset, rows_of_updates, axis=0, reduction=_reduction(node))
    return g.call("reshape", out, newshape=tuple(d if isinstance(d, int) else -1 for d in shape))


__all__ = ["TABLE"]


@_reg("NonZero")
def _nonzero(g: GraphBuilder, node: NodeView) -> Expr:
    """NonZero: the (rank, count) int64 coordinates of the non-zero elements, in row-major order:
    the positions of `nonzero_positions` in the flattened input, divided by the row-major strides,
    for every candidate, and only then cut to the count. The first axis may have a run-time
    extent (a detector's boxes that passed a threshold); the strides need the others static."""
    x = _x(node)
    if g.ndim(x) == 0:
        raise node.fail("a scalar input (rank 0) is not supported; NonZero needs rank >= 1")
    shape = g.shape(x)
    if not all(isinstance(d, int) for d in shape[1:]):
        raise node.fail(f"the input has shape {tuple(map(str, shape))}; only its first axis may be "
                        "dynamic (pass shape={name: …} to from_onnx)")
    inner = int(np.prod(shape[1:]))
    if inner == 0 or shape[0] == 0:
        return g.const(np.zeros((len(shape), 0), "int64"))
    positions, count = nonzero_positions(g, g.call("reshape", x, newshape=(-1,)))
    strides = np.cumprod((1, *shape[:0:-1]))[::-1]
    coords = []
    for axis, (stride, extent) in enumerate(zip(strides, shape)):
        c = positions if stride == 1 else g.call("divide", positions, _i64(g, stride))
        if axis:
            c = g.call("floor_mod", c, _i64(g, extent))
        coords.append(c)
    return keep_first(g, g.call("stack", g.tuple(coords), axis=0), count, axis=1)


def nonzero_positions(g: GraphBuilder, flat: Expr) -> tuple[Expr, Expr]:
    """(positions, count) for the 1-d `flat`: the first `count` entries of the int64 `positions`
    are where its non-zero elements are, in order (the rest are its last index); `count`, a
    1-element int64 tensor, is data.

    Why this form: only the VM can run a data-dependent shape, and this keeps every kernel compiled
    until `keep_first` cuts the result (the VM compiles that one slice per count). `cs`, the running
    count of non-zeros, is non-decreasing, so the k-th non-zero is at the first index where `cs`
    reaches k + 1: a binary search run for every k at once, in rounds of gathers. A static length
    n takes log2(n) + 1 rounds; a run-time one takes enough for any length below 2^31 (once the
    search has converged, a round changes nothing)."""
    (size,) = g.shape(flat)
    nonzero = g.call("cast", g.call("not_equal", flat, g.scalar(0, flat)), dtype="int64")
    cs = g.call("cumsum", nonzero, axis=0)
    if isinstance(size, int):
        target = g.const(np.arange(1, size + 1, dtype="int64"))
        lo, hi = _i64(g, np.zeros(size)), _i64(g, np.full(size, size - 1))
        rounds = int(np.ceil(np.log2(size))) + 1
        count = g.call("strided_slice", cs, begin=(size - 1,), end=(size,))
    else:
        target = g.call("cumsum", g.call("ones_like", cs), axis=0)  # 1 .. n
        last = g.call("subtract", extent_scalar(g, cs, 0), _i64(g, 1))
        lo, hi = g.call("zeros_like", cs), g.call("add", g.call("zeros_like", cs), last)
        rounds, count = _RUN_TIME_ROUNDS, g.call("sum", nonzero, axis=[0], keepdims=True)
    for _ in range(rounds):  # lo == hi == the answer after these rounds
        mid = g.call("divide", g.call("add", lo, hi), _i64(g, 2))  # non-negative: truncation is floor
        right = g.call("less", g.call("take", cs, mid, axis=0, mode="clip"), target)
        lo, hi = g.call("where", right, g.call("add", mid, _i64(g, 1)), lo), g.call("where", right, hi, mid)
    return g.call("minimum", lo, hi), count  # past the count, the search ends at lo = n > hi = n - 1


# rounds of the binary search over a run-time length: enough for any length below 2^31
_RUN_TIME_ROUNDS = 32


def keep_first(g: GraphBuilder, x: Expr, count: Expr, axis: int) -> Expr:
    """The first `count` (a 1-element int64 tensor) entries of `x` along `axis`; the result keeps
    its rank, with that one extent dynamic. The other extents stay static where they all are;
    where some are not, every extent of the result is `?`."""
    shape = g.shape(x)
    begin, strides = _i64(g, [0] * len(shape)), _i64(g, [1] * len(shape))
    if not all(isinstance(d, int) for d in shape):  # x's run-time extents, count at `axis`
        at_axis = g.const(np.arange(len(shape)) == axis)
        end = g.call("where", at_axis, count, g.call("shape_of", x))
        kept = g.call("dyn.strided_slice", x, begin, end, strides)
        if not all(isinstance(n, int) for d, n in enumerate(shape) if d != axis):
            return kept
    else:
        # no empty constants: concatenate has no kernel for them
        head = [_i64(g, shape[:axis])] if axis else []
        tail = [_i64(g, shape[axis + 1:])] if axis + 1 < len(shape) else []
        end = g.call("concatenate", g.tuple([*head, count, *tail]), axis=0)
        kept = g.call("dyn.strided_slice", x, begin, end, strides)
    # the extents off `axis` are static again (the slice's type says `?` for all)
    return g.call("reshape", kept, newshape=tuple(-1 if d == axis else n for d, n in enumerate(shape)))


def _i64(g: GraphBuilder, v: object) -> Expr:
    return g.const(np.asarray(v, "int64"))


@_reg("Compress")
def _compress(g: GraphBuilder, node: NodeView) -> Expr:
    """Compress: the slices along `axis` (of the flattened input when there is none) whose entry in
    the 1-d `condition` is true. A condition shorter than the axis keeps none of the slices past
    its end. A constant condition is a constant `take`; a run-time one takes `nonzero_positions`."""
    x, cond = _x(node, 0), _x(node, 1)
    axis = node.attr("axis")
    if axis is None:
        x = g.call("reshape", x, newshape=(-1,))
        axis = 0
    axis = normalize_axis(g, axis, g.ndim(x))
    if g.ndim(cond) != 1:
        raise node.fail(f"condition must be 1-d, got shape {g.shape(cond)}")
    n, (m,) = g.shape(x)[axis], g.static_shape(cond, "condition")
    if isinstance(n, int) and m > n:
        raise node.fail(f"condition of length {m} is longer than axis {axis} of the input ({n})")
    known = g.value_or_none(cond)
    if known is not None or m == 0:
        picked = np.flatnonzero(known) if m else np.zeros(0, "int64")
        return g.call("take", x, _i64(g, picked), axis=axis)
    if not isinstance(n, int):
        raise node.fail(f"a run-time condition needs a static axis {axis}; the input is {g.shape(x)}")
    positions, count = nonzero_positions(g, cond)
    return keep_first(g, g.call("take", x, positions, axis=axis), count, axis)


@_reg("Unique")
def _unique(g: GraphBuilder, node: NodeView) -> list[Expr]:
    """Unique: the distinct elements (or slices along `axis`), the index of each one's first
    occurrence, each element's (slice's) position among them, and the counts.

    A stable ascending sort puts equal rows next to each other: `argsort` (on NumPy) of an element,
    or of a slice's entries from its last to its first (each sort stable, so the order is
    lexicographic). A group starts where a row differs from the one before it;
    `nonzero_positions` of those starts gives each group's place in the sorted order, and the
    stable sort makes the row there the group's first occurrence. With sorted=0 the groups are put
    in the order of their first occurrences (a second argsort of those indices). The number of
    groups is data, so the results are cut to it (`keep_first`) and the model runs on the VM."""
    x = _x(node)
    shape = g.static_shape(x, "the input")
    axis = node.attr("axis")
    if int(np.prod(shape)) == 0:
        raise node.fail(f"an empty input (shape {shape}) is not supported")
    if axis is None:
        rows, m, width, moved = g.call("reshape", x, newshape=(-1, 1)), int(np.prod(shape)), 1, None
    else:
        axis = normalize_axis(g, axis, len(shape))
        moved = (axis, *(d for d in range(len(shape)) if d != axis))
        m, width = shape[axis], int(np.prod(shape)) // shape[axis]
        if width > _UNIQUE_MAX_WIDTH:
            raise node.fail(f"slices of {width} elements along axis {axis}: at most {_UNIQUE_MAX_WIDTH} "
                            "(each is one sort)")
        rows = g.call("reshape", g.call("transpose", x, axes=moved), newshape=(m, width))
    order = _i64(g, np.arange(m))
    for col in reversed(range(width)):  # lexicographic: stable sorts from the last entry to the first
        keys = g.call("take", g.call("reshape", g.call("strided_slice", rows, begin=(col,), end=(col + 1,),
                                                       axes=(1,)), newshape=(m,)), order, axis=0)
        order = g.call("take", order, g.call("argsort", keys, axis=0, is_ascend=True, dtype="int64"), axis=0)
    ordered = g.call("take", rows, order, axis=0)
    first = g.const(np.ones(1, bool))
    if m > 1:
        differs = g.call("not_equal", g.call("strided_slice", ordered, begin=(1,), end=(m,), axes=(0,)),
                         g.call("strided_slice", ordered, begin=(0,), end=(m - 1,), axes=(0,)))
        changed = g.call("max", g.call("cast", differs, dtype="int8"), axis=[1])  # any entry differs
        first = g.call("concatenate", g.tuple([first, g.call("cast", changed, dtype="bool")]), axis=0)
    starts, count = nonzero_positions(g, first)  # static length m; the first `count` are the groups
    group = g.call("subtract", g.call("cumsum", g.call("cast", first, dtype="int64"), axis=0), _i64(g, 1))
    first_index = g.call("take", order, starts, axis=0)
    k = _i64(g, np.arange(m))
    last_group = g.call("subtract", count, _i64(g, 1))
    following = g.call("take", starts, _i64(g, np.minimum(np.arange(m) + 1, m - 1)), axis=0)
    counts = g.call("subtract", g.call("where", g.call("less", k, last_group), following, _i64(g, m)), starts)
    inverse = g.call("scatter_elements", g.call("zeros_like", order), order, group, axis=0)
    values = g.call("take", ordered, starts, axis=0)
    if not node.attr("sorted", 1):  # groups in the order their values first occur
        key = g.call("where", g.call("less", k, count), first_index, _i64(g, m + np.arange(m)))
        perm = g.call("argsort", key, axis=0, is_ascend=True, dtype="int64")
        rank = g.call("argsort", perm, axis=0, is_ascend=True, dtype="int64")
        values, first_index, counts = (g.call("take", v, perm, axis=0) for v in (values, first_index, counts))
        inverse = g.call("take", rank, inverse, axis=0)
    values = keep_first(g, values, count, 0)
    if moved is None:
        values = g.call("reshape", values, newshape=(-1,))
    else:  # rows back to slices, the axis back in its place
        values = g.call("reshape", values, newshape=(-1, *(shape[d] for d in moved[1:])))
        values = g.call("transpose", values, axes=tuple(int(i) for i in np.argsort(moved)))
    return [values, keep_first(g, first_index, count, 0), inverse, keep_first(g, counts, count, 0)]


# Unique along an axis sorts its slices with one stable sort per entry of a slice
_UNIQUE_MAX_WIDTH = 64
