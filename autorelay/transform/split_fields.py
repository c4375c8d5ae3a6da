"""Split fields as slices: how the fields of a `split` fuse into the kernels that read them.

A `split` returns a tuple, so FuseOps makes it the root of a group of its own with one output per
field: a kernel (or, in the graph executor, one per field) that copies every field to memory for
the readers to load back. An LSTM cell splits its gate pre-activations in four and reads each
quarter in one elementwise chain, so every time step paid a kernel whose only work was that copy.

`slice_split_fields` rewrites, in one function body before grouping, each `split` whose every use
takes one field (`split(x).k`) into one `strided_slice` of `x` per field. A slice is an injective
op with one output, so under Relay's rules each field fuses into the chain that reads it. The
cheap ops that produce `x` (the gate bias, an activation) would now have several readers, and a
value with several readers never fuses; those whose every reader is a field (or another such op)
are therefore copied once per field, and each copy fuses with its field. The fields of one split
are disjoint and the lowering computes an inlined stage only where it is read, so the copies
recompute nothing: each kernel computes its own slice of the chain, and neither the chain's
value nor the fields are written to memory.

The rewrite is a fusion decision (`FusionPlan.slice_fields`, on by default), and it applies only
where injective ops fuse with each other: with no such rule the copies would each run alone,
computing the whole value. A split whose extent is not static, or whose tuple is used whole
(returned, passed to a function), is left as it is.
"""

from __future__ import annotations

from itertools import accumulate, pairwise

from autorelay.ir.expr import Call, Expr, Function, Tuple, TupleGetItem
from autorelay.ir.visitor import ExprMutator
from autorelay.op import registry
from autorelay.op.registry import OpPattern
from autorelay.transform.fusion_graph import op_pattern, readers_of, region_order
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.util import op_name


def split_bounds(split: Call) -> list[tuple[int, int]] | None:
    """The [begin, end) of each field of `split` along its axis, read off its checked type (as the
    split's compute places its fields); None when a field's extent there is not static."""
    fields = split.checked_type.fields if split.has_checked_type else ()  # type: ignore[attr-defined]
    if not fields:
        return None
    axis = split.attrs["axis"] % len(fields[0].shape)
    sizes = [f.shape[axis] for f in fields]
    if not all(isinstance(d, int) for d in sizes):
        return None
    return list(pairwise([0, *accumulate(sizes)]))


def slice_split_fields(body: Expr, plan: FusionPlan) -> Expr:
    """`body` with every split whose uses each take one field rewritten as one slice per field, and
    the cheap producers only those fields read copied once per field (module docstring); `body`
    itself when the plan does not slice fields or nothing qualifies."""
    if not (plan.slice_fields and plan.allows(OpPattern.INJECTIVE, OpPattern.INJECTIVE)):
        return body
    order = region_order(body)
    readers = readers_of(order)
    splits = {id(n): (n, bounds) for n in order if (bounds := _field_bounds(n, readers, body)) is not None}
    if not splits:
        return body
    # the cheap ops whose every reader is a split or another such op (reverse order: readers first)
    per_field: set[int] = set()
    for n in reversed(order):
        p = op_pattern(n)
        users = readers.get(id(n), ())
        if n is body or p is None or p > OpPattern.INJECTIVE or not users:
            continue
        if all(id(u) in per_field or id(u) in splits for u in users):
            per_field.add(id(n))
    return _FieldSlicer(splits, per_field).visit(body)


def _field_bounds(n: Expr, readers: dict[int, list[Expr]], body: Expr) -> list[tuple[int, int]] | None:
    """`split_bounds(n)` when `n` is a split inside `body` whose every use takes one field; else None."""
    if op_name(n) != "split" or n is body or not readers.get(id(n)):
        return None
    if not all(isinstance(u, TupleGetItem) for u in readers[id(n)]):
        return None
    assert isinstance(n, Call)
    return split_bounds(n)


class _FieldSlicer(ExprMutator):
    """Replaces `split(x).k` by a slice of `x`, giving each field its own copy of the ops in
    `per_field` (by id) that it reads; keeps checked types (FuseOps reads them)."""

    def __init__(self, splits: dict[int, tuple[Call, list[tuple[int, int]]]], per_field: set[int]) -> None:
        super().__init__()
        self.splits = splits
        self.per_field = per_field
        self.slices: dict[tuple[int, int], Expr] = {}

    def visit(self, expr: Expr) -> Expr:
        new = super().visit(expr)
        if new is not expr and expr.has_checked_type and not new.has_checked_type:
            new.set_checked_type(expr.checked_type)
        return new

    def visit_function(self, f: Function) -> Expr:
        return f  # nested functions are regions of their own

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        if id(t.tuple_value) not in self.splits:
            return super().visit_tuple_getitem(t)
        split, bounds = self.splits[id(t.tuple_value)]
        key = (id(split), t.index)
        if key not in self.slices:
            begin, end = bounds[t.index]
            data = self._copy(split.args[0], {})
            sliced = registry.call("strided_slice", data, begin=[begin], end=[end],
                                   axes=[split.attrs["axis"]])
            sliced.set_checked_type(t.checked_type if t.has_checked_type
                                    else split.checked_type.fields[t.index])  # type: ignore[attr-defined]
            self.slices[key] = sliced
        return self.slices[key]

    def _copy(self, e: Expr, copies: dict[int, Expr]) -> Expr:
        """`e` for one field: a fresh copy of each op in `per_field` (shared within the field), and
        of a tuple that such an op reads (a concatenate's): a tuple read by two copies would be a
        value with two readers, which FuseOps passes to each as a tuple-typed parameter."""
        if id(e) in copies:
            return copies[id(e)]
        if isinstance(e, Tuple):
            new: Expr = Tuple(tuple(self._copy(f, copies) for f in e.fields))
        elif id(e) in self.per_field:
            assert isinstance(e, Call)
            new = Call(e.op, tuple(self._copy(a, copies) for a in e.args), e.attrs, e.type_args)
        else:
            return self.visit(e)
        if e.has_checked_type:
            new.set_checked_type(e.checked_type)
        copies[id(e)] = new
        return new


__all__ = ["slice_split_fields", "split_bounds"]
