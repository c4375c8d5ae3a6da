"""Row buckets: a function whose rows are independent runs padded to one of a few row counts.

A specialising kernel compiles a function again for every extent it meets (`specializing_kernel`).
Where the extent is a count that changes with the data, every new input compiles again: a Faster
R-CNN's box head sees a new number of proposals per image, and each new image compiled about 120
kernels (10 s, where ONNX Runtime runs the whole model in 1 s).

Many such functions compute each row of their result from the same row of their inputs alone: a
dense layer over the RoIs, a box decoding, a softmax over classes. Such a function gives the same
first n rows when its row inputs are padded with zero rows, so n rows run as `bucket(n)` rows (four
sizes per octave: at most a quarter more rows), and the result is the first n rows of that. Once
a few inputs have been seen, a new one compiles little. Padding rather than splitting the rows
into pieces: a dense layer over 478 RoIs in pieces of 256, 128, 64, ... would read its 51 MB of
weights once per piece.

Which functions qualify is read off their computes, not off a list of ops (`independent_rows`):
the function is lowered at two probe extents, and must satisfy:
* the parameters carrying rows are those whose leading extent is dynamic and as long as the first
  such argument's; the analysis holds for the other extents as they are in the call (it is kept
  per shape), and every other parameter is taken as it is;
* every stage and output whose leading extent follows the probe reads the row-carrying tensors
  only at its own row (after simplification under the loop bounds), and uses its row variable
  nowhere else (no iota, no padding test, no reduction over rows);
* every other stage reads no row-carrying tensor, and has the same shape at both probes;
* zero rows cannot fault: no tensor is read at an index computed from data (a gather could read
  out of bounds), no integer is divided by anything but a constant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.ir.expr import Function
from autorelay.ir.types import TensorType
from autorelay.lower import NoCompute, lower
from autorelay.te import expr as E
from autorelay.te.expr import is_int
from autorelay.te.tensor import ComputeDef, Tensor, topo_order
from autorelay.te.traverse import children, distinct_nodes
from autorelay.tir.simplify import simplify

PROBES = (61, 67)  # two extents no static dimension is likely to share (both are checked anyway)


def row_params(fn: Function, args: Sequence[np.ndarray]) -> tuple[int, ...] | None:
    """The parameters that carry rows in this call: those whose type's leading extent is dynamic
    and whose argument has as many rows as the first such (None when there is none)."""
    lead = [i for i, p in enumerate(fn.params) if isinstance(p.type_annotation, TensorType)
            and p.type_annotation.shape and not isinstance(p.type_annotation.shape[0], int)
            and args[i].ndim]
    if not lead:
        return None
    n = args[lead[0]].shape[0]
    return tuple(i for i in lead if args[i].shape[0] == n)


def independent_rows(fn: Function, args: Sequence[np.ndarray], rows: Sequence[int],
                     specialize: Callable[[Function, Sequence[np.ndarray]], Function]) -> bool:
    """Whether the rows of `fn`'s result depend only on the same rows of its parameters `rows`,
    for arguments shaped as `args` but for their number of rows (the module docstring's rules).
    `specialize(fn, arrays)` builds the static function for arguments of these shapes."""
    computes = []
    for n in PROBES:
        probe = [np.zeros((n, *a.shape[1:]) if i in rows else a.shape, a.dtype) for i, a in enumerate(args)]
        try:
            lowered = lower(specialize(fn, probe))
        except (NoCompute, AutoRelayError):  # a probe that cannot be built or lowered: not so
            return False
        row_inputs = {k for k, s in enumerate(lowered.sources) if s.kind == "param" and s.index in rows}
        computes.append((lowered.cdef, row_inputs))
    return _rows_follow(computes)


def _rows_follow(computes: list[tuple[ComputeDef, set[int]]]) -> bool:
    """Whether the two probes' computes keep rows independent (the module docstring's rules)."""
    (first, row_inputs), (second, _) = computes
    stages, others = topo_order(first.outputs), topo_order(second.outputs)
    if len(stages) != len(others) or len(first.inputs) != len(second.inputs):
        return False
    row_tensors: set[int] = {id(first.inputs[k]) for k in row_inputs}
    for a, b in zip(stages, others, strict=True):
        follows = bool(a.shape) and (a.shape[0], b.shape[0]) == PROBES and a.shape[1:] == b.shape[1:]
        if not follows and a.shape != b.shape:
            return False
        if a.op is None:  # an input: its rows follow the probe exactly when it is a row parameter
            if follows != (id(a) in row_tensors):
                return False
            continue
        if follows:
            if not _reads_own_row(a, row_tensors):
                return False
            row_tensors.add(id(a))
        elif any(id(t) in row_tensors for t in a.op.inputs()):
            return False
    return all(id(t) in row_tensors for t in first.outputs)


def _reads_own_row(t: Tensor, row_tensors: set[int]) -> bool:
    """Whether stage `t` reads the row tensors only at its own row, uses its row variable for
    nothing else, and cannot fault on zero rows."""
    axes = (*t.op.axes, *t.op.reduce_axes)
    bounds = {ax.var: (0, ax.extent - 1) for ax in axes}
    row = t.op.axes[0].var
    # simplified under the loop bounds: a padding test that always holds on rows, a clamp that
    # never clamps, a zero-divisor guard on a constant, go
    stack: list[E.Expr] = [simplify(t.op.body, bounds)]
    while stack:
        node = stack.pop()
        if isinstance(node, E.Load):
            return False
        if isinstance(node, E.Var) and node is row:
            return False  # the row variable used as a value, or to index a tensor without rows
        if isinstance(node, E.Read):
            if any(isinstance(n, E.Read) for i in node.indices for n in distinct_nodes(i)):
                return False  # an index read from data: a zero row could make it out of bounds
            indices = list(node.indices)
            if id(node.tensor) in row_tensors:
                if indices[0] is not row:
                    return False
                indices = indices[1:]
            stack.extend(indices)
            continue
        if isinstance(node, E.Bin) and node.op in _DIVISIONS and is_int(node.dtype) \
                and not isinstance(node.b, E.Const):
            return False  # a zero row could divide by zero
        stack.extend(children(node))
    return True


_DIVISIONS = ("div", "floordiv", "mod")


def bucket(n: int) -> int:
    """The row count n rows run as: n rounded up to a multiple of an eighth of the power of two at
    or above it (exact below 8; four sizes per octave, at most a quarter more rows)."""
    step = 1 << max(n.bit_length() - 3, 0)
    return -(-n // step) * step
