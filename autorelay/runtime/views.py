"""Primitive functions whose result is a contiguous piece of their input, run as views, not kernels.

`reshape`, `expand_dims`, `squeeze` and `nn.batch_flatten` keep a row-major tensor's bytes as
they are, and `take` of one constant index along an axis with only extent-1 axes before it (a
KV cache's `past[i]`) is a contiguous block of them. ONNX Runtime and PyTorch make reshapes free;
as kernels they copied every element (a decoder step with a KV cache reshapes, picks and stacks
megabytes per layer). The graph executor gives such a call's result an ``alias`` slot: a NumPy
view of its input's buffer at an element offset, whose storage then stays reserved until the
alias's last reader (`graph_plan.plan_memory`).

The converse also holds: a `concatenate` along an axis with only extent-1 axes before it lays its
pieces one after another, each a contiguous block (`torch.stack` of a decoder's per-layer caches).
Its pieces' producers can write straight into the result (`concat_offsets`), so the
concatenation copies nothing.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Op, Tuple
from autorelay.ir.types import TensorType

VIEW_OPS = frozenset({"reshape", "expand_dims", "squeeze", "nn.batch_flatten"})


def _static_shape(e: Expr) -> tuple[int, ...] | None:
    t = e.checked_type if e.has_checked_type else None
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
        return tuple(int(d) for d in t.shape)
    return None


def _take_offset(c: Call) -> int | None:
    """Element offset of `take(x, const scalar, axis)` in `x` when the result is one contiguous block
    of it (only extent-1 axes before `axis`); None otherwise. The index is resolved by the op's own
    `mode` rule (clip, wrap, or in range for fast)."""
    x, ind = c.args
    shape = _static_shape(x)
    if shape is None or not isinstance(ind, Constant) or np.ndim(ind.data) != 0 or c.attrs["axis"] is None:
        return None
    axis = int(c.attrs["axis"]) % len(shape)
    n = shape[axis]
    if n == 0 or any(d != 1 for d in shape[:axis]):
        return None
    i = int(np.asarray(ind.data))
    mode = c.attrs["mode"]
    pos = i % n if mode == "wrap" else min(max(i, 0), n - 1) if mode == "clip" else i
    if not 0 <= pos < n:
        return None
    return pos * int(np.prod(shape[axis + 1:], dtype=np.int64))


def view_offset(fn: Function) -> int | None:
    """The element offset of `fn`'s result inside its one parameter when `fn` is a chain of
    shape-only ops and constant-index `take`s that stays contiguous (same dtype); None otherwise."""
    if len(fn.params) != 1:
        return None
    chain: list[Call] = []
    e: Expr = fn.body
    while isinstance(e, Call) and isinstance(e.op, Op):
        if e.op.name not in VIEW_OPS and e.op.name != "take":
            return None
        chain.append(e)
        e = e.args[0]
    p = fn.params[0]
    if e is not p or not chain:
        return None
    src = p.type_annotation or (p.checked_type if p.has_checked_type else None)
    out = fn.body.checked_type if fn.body.has_checked_type else fn.ret_type
    if not (isinstance(src, TensorType) and isinstance(out, TensorType) and src.dtype == out.dtype):
        return None
    offset = 0
    for c in chain:  # a take reads a contiguous block of its (contiguous) input: offsets add up
        if c.op.name == "take":  # type: ignore[union-attr]
            step = _take_offset(c)
            if step is None:
                return None
            offset += step
    return offset


def concat_offsets(fn: Function) -> list[int] | None:
    """Per piece of `fn`'s concatenation, in the order of its flattened parameters, the element
    offset of the piece in the result; None unless the pieces are contiguous blocks of the result
    (only extent-1 axes before the axis) and each is a whole parameter: a tensor parameter seen
    through a chain of `VIEW_OPS`, used once, or the fields of a single tuple parameter (an unfused
    `concatenate`)."""
    body = fn.body
    if not (isinstance(body, Call) and isinstance(body.op, Op) and body.op.name == "concatenate"):
        return None
    shape = _static_shape(body)
    if shape is None:
        return None
    axis = int(body.attrs["axis"]) % len(shape)
    if any(d != 1 for d in shape[:axis]):
        return None
    tup = body.args[0]
    if len(fn.params) == 1 and tup is fn.params[0]:
        t = tup.checked_type if tup.has_checked_type else tup.type_annotation
        fields = list(getattr(t, "fields", ()))
        if not all(isinstance(f, TensorType) and f.is_static for f in fields):
            return None
        return _running_starts([tuple(int(d) for d in f.shape) for f in fields])
    if not isinstance(tup, Tuple) or len(tup.fields) != len(fn.params):
        return None
    order, sizes = [], []
    for field in tup.fields:
        e = field
        while isinstance(e, Call) and isinstance(e.op, Op) and e.op.name in VIEW_OPS:
            e = e.args[0]
        piece = _static_shape(field)
        pos = next((i for i, p in enumerate(fn.params) if p is e), None)
        if pos is None or pos in order or piece is None:
            return None
        order.append(pos)
        sizes.append(piece)
    starts = _running_starts(sizes)
    return [starts[order.index(i)] for i in range(len(fn.params))]


def _running_starts(shapes: list[tuple[int, ...]]) -> list[int]:
    """Where each of a row of contiguous blocks of these shapes starts (in elements)."""
    starts, n = [], 0
    for s in shapes:
        starts.append(n)
        n += int(np.prod(s, dtype=np.int64))
    return starts


def is_view_function(fn: Function) -> bool:
    """Whether the executor runs `fn` as a view (no kernel): see `view_offset`."""
    return view_offset(fn) is not None


__all__ = ["VIEW_OPS", "concat_offsets", "is_view_function", "view_offset"]
