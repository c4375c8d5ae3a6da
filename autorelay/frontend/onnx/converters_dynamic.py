"""Reshape, Slice, Pad, Expand, ConstantOfShape with run-time shape-like inputs: the `dyn.*` ops.

Why a separate path: the static converters (`converters_shape`) turn a known shape, bounds or pads
into attributes, which keeps those models exactly as fast as before. When the value is computed at
run time (a graph input, or arithmetic on data), these helpers emit `dyn.reshape`,
`dyn.strided_slice`, `dyn.pad`, `dyn.broadcast_to` or `dyn.full` (`autorelay.op.dynamic`)
instead; the VM compiles a kernel per concrete shape for them. Slice's and Pad's `axes` inputs must
still be known at import time: the run-time values are scattered into full-rank int64 tensors here,
with the ONNX defaults for the axes not listed. Run-time axes of the Reduce ops, Squeeze and
Unsqueeze, Split's sizes and Range's bounds go to `dyn.reduce`, `dyn.squeeze`, `dyn.expand_dims`,
`dyn.split` and `dyn.arange` (`autorelay.op.dynamic_axes`) as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView
from autorelay.ir.expr import Call, Expr, Op, Tuple
from autorelay.ir.types import SymDim

_INT64_MAX = 2**63 - 1


def _int64_vector(g: GraphBuilder, node: NodeView, e: Expr, what: str) -> tuple[Expr, int]:
    """`e` as a 1-D int64 tensor of static length, and that length."""
    t = g.tensor_type(e)
    if t.dtype not in ("int32", "int64") or t.ndim != 1 or not isinstance(t.shape[0], int):
        raise node.fail(f"{what} must be a 1-D int32/int64 tensor of known length, got {t}")
    return (e if t.dtype == "int64" else g.call("cast", e, dtype="int64")), t.shape[0]


def _length(g: GraphBuilder, node: NodeView, e: Expr | None, what: str) -> int:
    """The number of entries of a 1-D input, known or run-time."""
    if e is None:
        raise node.fail(f"{what} is required")
    value = g.value_or_none(e)
    return np.asarray(value).size if value is not None else _int64_vector(g, node, e, what)[1]


def _full_rank(g: GraphBuilder, node: NodeView, e: Expr | None, positions: Sequence[int], rank: int,
               default: int, what: str, offset: int = 0, size: int | None = None) -> Expr:
    """A rank-long int64 tensor whose entry `positions[k]` is entry `offset + k` of `e` and whose
    other entries are `default` (a constant when `e` is known, IR ops when it is a run-time value).
    `e` must have `size` entries (default: one per position)."""
    size = len(positions) if size is None else size
    value = g.value_or_none(e) if e is not None else np.full(size, default)
    n = np.asarray(value).size if value is not None else _int64_vector(g, node, e, what)[1]
    if n != size:
        raise node.fail(f"{what} has {n} entries, expected {size}")
    if value is not None:
        full = np.full(rank, default, dtype="int64")
        flat = np.asarray(value).reshape(-1)
        for k, a in enumerate(positions):
            full[a] = flat[offset + k]
        return g.const(full)
    vec, _ = _int64_vector(g, node, e, what)
    if list(positions) == list(range(rank)) and n == rank:
        return vec
    where = {a: k for k, a in enumerate(positions)}
    parts = [g.call("strided_slice", vec, begin=(offset + where[a],), end=(offset + where[a] + 1,))
             if a in where else g.const(np.array([default], dtype="int64")) for a in range(rank)]
    return g.call("concatenate", g.tuple(parts), axis=0)


# An entry of a shape vector as the importer knows it: its value, the (tensor, axis) whose extent it
# is, or None for any other run-time value.
Entry = int | tuple[Expr, int] | None


def entry_sources(g: GraphBuilder, e: Expr) -> list[Entry] | None:
    """The entries of a 1-D integer vector (or a scalar) known at import time: an int where the
    value is static, (tensor, axis) where it is that tensor's extent read by `Shape` (through
    gathers, slices, concatenations, casts and reshapes of one element), None for any other
    run-time entry: what an exporter's shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat)
    leaves known. None when even the length is unknown."""
    value = g.value_or_none(e)
    if value is not None:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    t = g.tensor_type(e)
    unknown: list[Entry] | None = None
    if t.ndim == 0 or (t.ndim == 1 and isinstance(t.shape[0], int)):
        unknown = [None] * (t.shape[0] if t.ndim else 1)
    if not isinstance(e, Call) or not isinstance(e.op, Op):
        return unknown
    name, args = e.op.name, e.args
    if name == "concatenate" and isinstance(args[0], Tuple) and t.ndim == 1:
        joined: list[Entry] = []
        for f in args[0].fields:
            part = entry_sources(g, f)
            if part is None:
                return None
            joined += part
        return joined
    if name in ("expand_dims", "reshape", "squeeze", "cast") and t.ndim <= 1 and t.shape in ((), (1,)):
        return entry_sources(g, args[0])
    if name == "shape_of":
        return [(args[0], axis) for axis in range(g.ndim(args[0]))]
    if name == "strided_slice" and t.ndim == 1 and e.attrs["slice_mode"] == "end":  # Shape's start/end
        whole = entry_sources(g, args[0])
        a = e.attrs
        if whole is not None and (a["axes"] in (None, (0,))) and a["begin"] and a["end"]:
            step = a["strides"][0] if a["strides"] else 1
            return whole[a["begin"][0]:a["end"][0]:step]
    if name == "take" and (idx := g.value_or_none(args[1])) is not None:
        whole = entry_sources(g, args[0])
        if whole is not None and e.attrs["axis"] in (0, None) and idx.size == 1:
            i = int(np.asarray(idx).reshape(()))
            return [whole[i]] if -len(whole) <= i < len(whole) else None
    return unknown


def known_entries(g: GraphBuilder, e: Expr) -> list[Any] | None:
    """`entry_sources` with each extent as its value: an int where static, the symbolic extent
    itself (`SymDim`, `AnyDim`) where it is a dynamic axis's."""
    sources = entry_sources(g, e)
    return None if sources is None else [_extent(g, s) for s in sources]


def _extent(g: GraphBuilder, entry: Entry) -> Any:
    return g.shape(entry[0])[entry[1]] if isinstance(entry, tuple) else entry


def copy_zeros(target: Sequence[Any], extents: Sequence[Any], allowzero: bool) -> list[Any]:
    """A Reshape target with ONNX's 0 entries (unless `allowzero`) replaced by the input's extent
    at the same position."""
    return [extents[i] if v == 0 and not allowzero and i < len(extents) else v for i, v in enumerate(target)]


def dyn_reshape(g: GraphBuilder, node: NodeView, x: Expr, shape: Expr, allowzero: bool) -> Expr:
    """Reshape to a run-time shape: the output rank is the shape tensor's (static) length. When its
    entries are known but for one (a dynamic batch beside static sizes), it is a static reshape
    with -1 for that one: its value is the only one the element count allows. An entry that is
    the input's own dynamic extent at the same position (a head split of a (batch, seq, d) value,
    reshaped to (batch, seq, heads, d / heads)) is Relay's 0, a copy of that extent. Either way the
    result keeps the extents the ops after it need."""
    known = known_entries(g, shape)
    if known is not None:
        extents = g.shape(x)
        # allowzero only matters where an entry is 0 (an empty axis); without one, 0 may copy
        literal_zero = allowzero and any(isinstance(v, int) and v == 0 for v in known)
        target = copy_zeros(known, extents, allowzero)
        if not literal_zero:  # the input's own named extent in place: copied (0); two `?` may differ
            target = [0 if isinstance(v, SymDim) and i < len(extents) and v == extents[i] else v
                      for i, v in enumerate(target)]
        inferred = [i for i, v in enumerate(target) if not isinstance(v, int) or v == -1]
        if len(inferred) <= 1 and all(not isinstance(v, int) or v >= -1 for v in target):
            newshape = tuple(-1 if i in inferred else v for i, v in enumerate(target))
            return g.call("reshape", x, newshape=newshape, allowzero=literal_zero)
    vec, _ = _int64_vector(g, node, shape, "shape")
    return g.call("dyn.reshape", x, vec, allowzero=allowzero)


def dyn_expand(g: GraphBuilder, node: NodeView, x: Expr, shape: Expr) -> Expr:
    """Expand to a run-time shape: the output rank is max(data's rank, the shape's length). When
    the shape's entries are static or named extents (`dyn_full`), the data is broadcast against
    zeros of that shape (the same two-way broadcast), keeping the names."""
    zeros = _filled(g, shape, g.const(np.array(0, g.dtype(x))))
    if zeros is not None:
        return g.call("logical_or" if g.dtype(x) == "bool" else "add", x, zeros)
    vec, _ = _int64_vector(g, node, shape, "shape")
    return g.call("dyn.broadcast_to", x, vec)


def dyn_full(g: GraphBuilder, node: NodeView, fill: Expr, shape: Expr) -> Expr:
    """ConstantOfShape of a run-time shape: the output rank is the shape's (static) length. When
    every entry is static or a tensor's named extent (a recurrent layer's zero state, (layers,
    batch, hidden)), the fill is broadcast against a line along each such extent instead, so the
    result keeps those names."""
    filled = _filled(g, shape, fill)
    if filled is not None:
        return filled
    vec, _ = _int64_vector(g, node, shape, "shape")
    full = g.call("dyn.full", fill, vec)
    known = known_entries(g, shape)
    if known is None or sum(not isinstance(v, int) for v in known) != 1 or 0 in known:
        return full
    # one run-time entry (a detector's (rois, channels, 7, 7)): the static ones typed again
    return g.call("reshape", full, newshape=tuple(v if isinstance(v, int) else -1 for v in known))


def _filled(g: GraphBuilder, shape: Expr, fill: Expr) -> Expr | None:
    """`fill` (a scalar constant) in the shape the vector `shape` holds, when each entry is static
    or a tensor's named extent: a static `full` broadcast against a line of zeros along each named
    extent, so the result keeps the names; else None."""
    sources = entry_sources(g, shape)
    if sources is None:
        return None
    entries = [s if _named(g, s) else _extent(g, s) for s in sources]
    if not all((isinstance(e, int) and e >= 0) or _named(g, e) for e in entries):
        return None
    rank, dtype = len(entries), g.dtype(fill)
    out = g.call("full", fill, shape=tuple(e if isinstance(e, int) else 1 for e in entries), dtype=dtype)
    for axis, e in enumerate(entries):
        if not isinstance(e, int):
            line = g.call("zeros_like", g.call("cast", _line_along(g, *e), dtype=dtype))
            if axis:
                line = g.call("expand_dims", line, axis=0, num_newaxis=axis)
            if axis < rank - 1:
                line = g.call("expand_dims", line, axis=axis + 1, num_newaxis=rank - 1 - axis)
            out = g.call("logical_or" if dtype == "bool" else "add", out, line)
    return out


def _named(g: GraphBuilder, entry: Entry) -> bool:
    """Whether the entry is a tensor's extent that its type names (`SymDim`)."""
    return isinstance(entry, tuple) and isinstance(_extent(g, entry), SymDim)


def _line_along(g: GraphBuilder, x: Expr, axis: int) -> Expr:
    """A vector along `axis` of `x` (the first entry of every other axis): its extent is x's."""
    others = [d for d in range(g.ndim(x)) if d != axis]
    line = x
    for d in others:
        line = g.call("strided_slice", line, begin=(0,), end=(1,), axes=(d,))
    return g.call("squeeze", line, axis=others) if others else line


def dyn_slice(g: GraphBuilder, node: NodeView, x: Expr) -> Expr:
    """Slice (opset >= 10) with run-time starts/ends/steps; `axes` must be known at import time."""
    rank = g.ndim(x)
    starts, ends, steps = node.input(1), node.input(2), node.input(4)
    n = _length(g, node, starts, "starts")
    axes_in = node.input(3)  # a run-time axes raises OnnxStaticValueError (bindable with constants=)
    axes = list(range(n)) if axes_in is None else g.ints(axes_in, "axes (with run-time starts/ends/steps)")
    axes = [a + rank if a < 0 else a for a in axes]
    if len(axes) != n or any(not 0 <= a < rank for a in axes) or len(set(axes)) != n:
        raise node.fail(f"axes {axes} must be {n} distinct axes of the rank-{rank} input")
    begin = _full_rank(g, node, starts, axes, rank, 0, "starts")
    end = _full_rank(g, node, ends, axes, rank, _INT64_MAX, "ends")
    stride = _full_rank(g, node, steps, axes, rank, 1, "steps")
    return g.call("dyn.strided_slice", x, begin, end, stride)


def dyn_pad(g: GraphBuilder, node: NodeView, x: Expr, mode: str) -> Expr:
    """Pad (opset >= 11) with run-time pads (negative entries crop); `axes` must be static."""
    rank = g.ndim(x)
    if mode not in ("constant", "reflect", "edge"):  # wrap is a gather per axis: pads must be static
        g.ints(node.input(1), f"pads (mode={mode!r})")
    axes_in = node.input(3) if node.opset >= 18 else None
    given = list(range(rank)) if axes_in is None else g.ints(axes_in, "axes (with run-time pads)")
    axes = [a + rank if a < 0 else a for a in given]
    pads = node.input(1)
    n = _length(g, node, pads, "pads")
    if n != 2 * len(axes):
        raise node.fail(f"pads has {n} entries, expected 2 per padded axis ({len(axes)} axes)")
    if axes == list(range(rank)):
        full = _int64_vector(g, node, pads, "pads")[0]
    else:
        befores = _full_rank(g, node, pads, axes, rank, 0, "pads", size=n)
        afters = _full_rank(g, node, pads, axes, rank, 0, "pads", offset=len(axes), size=n)
        full = g.call("concatenate", g.tuple([befores, afters]), axis=0)
    cv = node.input(2)
    known = g.value_or_none(cv)
    if cv is None:
        fill: Expr = g.scalar(0, x)
    elif known is not None:
        fill = g.const(np.asarray(known).reshape(()), g.dtype(x))
    else:
        fill = g.call("reshape", cv, newshape=())
    return g.call("dyn.pad", x, full, fill, pad_mode=mode)


# ---- run-time axes, split sizes and range bounds (`autorelay.op.dynamic_axes`) ----------------------


def is_runtime(g: GraphBuilder, e: Expr | None) -> bool:
    """Whether an optional input is present but not known at import time."""
    return e is not None and g.value_or_none(e) is None


def dyn_reduce(g: GraphBuilder, node: NodeView, x: Expr, axes: Expr, op: str, keep: bool) -> Expr:
    """A reduction (`sum`, `mean`, `max`, `min`, `prod`, `any`, `all`) over run-time `axes`; the
    VM specialises it per axes value. ONNX's `noop_with_empty_axes` is decided then too."""
    noop = bool(node.attr("noop_with_empty_axes", 0))
    t = g.tensor_type(axes)
    if keep and not noop and t.ndim == 1 and t.dtype in ("int32", "int64"):  # any length: rank kept
        vec = axes if t.dtype == "int64" else g.call("cast", axes, dtype="int64")
    else:
        vec, _ = _int64_vector(g, node, axes, "axes (with keepdims=0 or noop_with_empty_axes=1)")
    return g.call("dyn.reduce", x, vec, reducer=op, keepdims=keep, noop_with_empty_axes=noop)


def dyn_squeeze(g: GraphBuilder, node: NodeView, x: Expr, axes: Expr) -> Expr:
    """Squeeze (opset >= 13) of run-time axes: the output rank is the input's less their count."""
    vec, _ = _int64_vector(g, node, axes, "axes")
    return g.call("dyn.squeeze", x, vec)


def dyn_unsqueeze(g: GraphBuilder, node: NodeView, x: Expr, axes: Expr) -> Expr:
    """Unsqueeze (opset >= 13) at run-time axes: the output rank is the input's plus their count."""
    vec, _ = _int64_vector(g, node, axes, "axes")
    return g.call("dyn.expand_dims", x, vec)


def dyn_split(g: GraphBuilder, node: NodeView, x: Expr, sizes: Expr, axis: int) -> list[Expr]:
    """Split (opset >= 13) into run-time sizes: one output per entry, so their count is static."""
    vec, n = _int64_vector(g, node, sizes, "split")
    if n != node.num_outputs:
        raise node.fail(f"split has {n} entries for {node.num_outputs} outputs")
    tup = g.call("dyn.split", x, vec, axis=axis)
    return [g.item(tup, i) for i in range(n)]


def dyn_range(g: GraphBuilder, node: NodeView, bounds: Sequence[Expr]) -> Expr:
    """Range with run-time start/limit/delta: a vector whose length the VM learns from the values.
    `0, 1, ..., n - 1` for an extent n that a tensor's type names (the position ids of a sequence
    of dynamic length) is instead counted along that tensor's axis, so its length keeps that name
    and the ops after it (an embedding added to the tokens') keep their symbolic shapes."""
    dtypes = {g.dtype(b) for b in bounds}
    if len(dtypes) != 1:
        raise node.fail(f"start, limit and delta must have one dtype, got {sorted(dtypes)}")
    if (positions := _positions_along(g, bounds)) is not None:
        return positions
    scalars = []
    for b, what in zip(bounds, ("start", "limit", "delta")):
        if any(d != 1 for d in g.shape(b)):
            raise node.fail(f"{what} must be a scalar, got {g.type_of(b)}")
        known = g.value_or_none(b)
        if known is not None:
            scalars.append(g.const(np.asarray(known).reshape(()), g.dtype(b)))
        else:
            scalars.append(g.call("reshape", b, newshape=()) if g.ndim(b) else b)
    return g.call("dyn.arange", *scalars)


def _positions_along(g: GraphBuilder, bounds: Sequence[Expr]) -> Expr | None:
    """`0 .. n - 1` (in the bounds' dtype) counted along the axis of the tensor whose named
    dynamic extent (`SymDim`) `n` is, when start is 0, delta is 1 and the limit is that extent
    (`entry_sources`); else None."""
    start, step = (g.value_or_none(b) for b in (bounds[0], bounds[2]))
    if start is None or step is None or np.asarray(start).size != 1 or np.asarray(step).size != 1:
        return None
    if int(np.asarray(start).reshape(())) != 0 or int(np.asarray(step).reshape(())) != 1:
        return None
    limit = entry_sources(g, bounds[1])
    if limit is None or len(limit) != 1 or not _named(g, limit[0]):
        return None
    ones = g.call("ones_like", g.call("cast", _line_along(g, *limit[0]), dtype=g.dtype(bounds[1])))
    return g.call("subtract", g.call("cumsum", ones, axis=0), g.call("ones_like", ones))
