"""Sequence ops whose sequences the import can lay out: SequenceConstruct, SequenceEmpty,
SequenceAt, SequenceLength, SequenceInsert, SequenceErase, SplitToSequence, ConcatFromSequence and
SequenceMap; and the optionals made inside the graph (Optional, OptionalHasElement,
OptionalGetElement).

A sequence made inside the graph has a length the import knows (its ops' positions fold to
constants), so it is held as an IR tuple of its tensors: each op above rearranges the fields at
import time, SequenceMap converts its body once per element, and the tensors' own ops (a split,
a concatenation) are the only kernels. A graph output that is a sequence is that tuple. What such a
tuple cannot hold is a sequence whose length is known only at run time: a graph input of sequence
type, or one a Loop grows from iteration to iteration; those are refused with the reason.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, normalize_axis, registrar, required_input
from autorelay.frontend.onnx.converters_shape import split_pieces
from autorelay.ir.expr import Expr
from autorelay.ir.types import TupleType

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def elements(g: GraphBuilder, node: NodeView, i: int = 0) -> list[Expr]:
    """The tensors of the sequence that is input `i`."""
    seq = _x(node, i)
    t = g.type_of(seq)
    if not isinstance(t, TupleType):
        raise node.fail(f"input {i} must be a sequence, got {t}")
    return [g.item(seq, k) for k in range(len(t.fields))]


def _position(g: GraphBuilder, node: NodeView, i: int, length: int, default: int, end_ok: bool) -> int:
    """Input `i` as a position in a sequence of `length` (negative counts from the back; `end_ok`:
    the position just past the last, where an insertion appends), or `default` when absent."""
    if node.input(i) is None:
        return default
    value = g.ints(node.input(i), "position")
    if len(value) != 1:
        raise node.fail(f"position must be a scalar, got {value}")
    pos = value[0] + length if value[0] < 0 else value[0]
    if not 0 <= pos < length + int(end_ok):
        raise node.fail(f"position {value[0]} is out of range for a sequence of {length} tensors")
    return pos


@_reg("SequenceConstruct")
def _construct(g: GraphBuilder, node: NodeView) -> Expr:
    parts = [e for e in node.inputs if e is not None]
    dtypes = {g.dtype(p) for p in parts}
    if len(dtypes) > 1:
        raise node.fail(f"a sequence holds one element type, got {sorted(dtypes)}")
    return g.tuple(parts)


@_reg("SequenceEmpty")
def _empty(g: GraphBuilder, node: NodeView) -> Expr:
    return g.tuple([])


@_reg("SequenceLength")
def _length(g: GraphBuilder, node: NodeView) -> Expr:
    return g.const(np.int64(len(elements(g, node))))


@_reg("SequenceAt")
def _at(g: GraphBuilder, node: NodeView) -> Expr:
    items = elements(g, node)
    return items[_position(g, node, 1, len(items), 0, end_ok=False)]


@_reg("SequenceInsert")
def _insert(g: GraphBuilder, node: NodeView) -> Expr:
    items, tensor = elements(g, node), _x(node, 1)
    if items and g.dtype(items[0]) != g.dtype(tensor):
        raise node.fail(f"the tensor is {g.dtype(tensor)} but the sequence holds {g.dtype(items[0])}")
    pos = _position(g, node, 2, len(items), len(items), end_ok=True)
    return g.tuple(items[:pos] + [tensor] + items[pos:])


@_reg("SequenceErase")
def _erase(g: GraphBuilder, node: NodeView) -> Expr:
    items = elements(g, node)
    if not items:
        raise node.fail("cannot erase from an empty sequence")
    pos = _position(g, node, 1, len(items), len(items) - 1, end_ok=False)
    return g.tuple(items[:pos] + items[pos + 1:])


@_reg("SplitToSequence")
def _split_to_sequence(g: GraphBuilder, node: NodeView) -> Expr:
    """Without `split`: pieces of 1 along the axis (dropped unless keepdims); a scalar `split`:
    pieces of that size, the last one smaller if need be; a 1-d `split`: the sizes."""
    x = _x(node)
    ndim = g.ndim(x)
    axis = normalize_axis(g, node.attr("axis", 0), ndim)
    extent = g.static_shape(x, "the input")[axis]
    given = node.input(1)
    if given is None:
        sizes = [1] * extent
    else:
        split = g.value(given, "split")
        if split.ndim == 0:
            size = int(split)
            if size < 1:
                raise node.fail(f"split must be positive, got {size}")
            sizes = [min(size, extent - k) for k in range(0, extent, size)]
        else:
            sizes = [int(s) for s in split]
        if sum(sizes) != extent or min(sizes, default=1) < 0:
            raise node.fail(f"split sizes {sizes} must sum to axis {axis} extent {extent}")
    items = split_pieces(g, x, sizes, axis)
    if given is None and not node.attr("keepdims", 1):
        items = [g.call("squeeze", p, axis=[axis]) for p in items]
    return g.tuple(items)


@_reg("ConcatFromSequence")
def _concat_from_sequence(g: GraphBuilder, node: NodeView) -> Expr:
    items = elements(g, node)
    if not items:
        raise node.fail("cannot concatenate an empty sequence (its tensors' shape is unknown)")
    if node.attr("axis") is None:
        raise node.fail("attribute axis is required")
    stack = bool(node.attr("new_axis", 0))
    ndim = g.ndim(items[0]) + int(stack)
    axis = normalize_axis(g, node.attr("axis"), ndim)
    if stack:
        items = [g.call("expand_dims", e, axis=axis, num_newaxis=1) for e in items]
    return items[0] if len(items) == 1 else g.call("concatenate", g.tuple(items), axis=axis)


@_reg("SequenceMap")
def _sequence_map(g: GraphBuilder, node: NodeView) -> list[Expr]:
    """The body converted once per element of the first sequence: each sequence input binds its
    element at that position, each tensor input binds itself; output j is the sequence of the
    body's output j."""
    body = node.attr("body")
    length = len(elements(g, node))
    inputs = [elements(g, node, i) if isinstance(g.type_of(_x(node, i)), TupleType) else _x(node, i)
              for i in range(len(node.inputs))]
    for i, v in enumerate(inputs):
        if isinstance(v, list) and len(v) != length:
            raise node.fail(f"input {i} holds {len(v)} tensors but the first sequence {length}")
    names = [vi.name for vi in body.input]
    if len(names) != len(inputs):
        raise node.fail(f"the body takes {len(names)} inputs but the node gives {len(inputs)}")
    outs: list[list[Expr]] = [[] for _ in body.output]
    for k in range(length):
        bound = {name: v[k] if isinstance(v, list) else v for name, v in zip(names, inputs)}
        for j, e in enumerate(g.subgraph(body, bound)):
            outs[j].append(e)
    return [g.tuple(o) for o in outs]


# ---- optionals -----------------------------------------------------------------------------
# An optional made inside the graph either holds its value or is empty, which the import knows:
# a present optional is its value, an empty one a marker (`GraphBuilder.empty_optionals`), and
# OptionalHasElement is a constant.


@_reg("Optional")
def _optional(g: GraphBuilder, node: NodeView) -> Expr:
    if node.input(0) is not None:
        return _x(node)
    empty = g.tuple([])
    g.empty_optionals.add(id(empty))
    return empty


@_reg("OptionalHasElement")
def _optional_has_element(g: GraphBuilder, node: NodeView) -> Expr:
    value = node.input(0)
    return g.const(np.bool_(value is not None and id(value) not in g.empty_optionals))


@_reg("OptionalGetElement")
def _optional_get_element(g: GraphBuilder, node: NodeView) -> Expr:
    value = _x(node)
    if id(value) in g.empty_optionals:
        raise node.fail("the optional is empty: it has no element to get")
    return value
