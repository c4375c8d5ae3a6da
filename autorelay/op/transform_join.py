"""Ops that join, split or repeat tensors: `concatenate`, `split`, `stack` (tuple-typed
arguments or results), `tile`, `repeat`.

`concatenate` keeps symbolic extents: `(n, t, 100)` twice on axis -1 is `(n, t, 200)`; a
symbolic extent on the joined axis itself makes the result `?` there.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, Tuple, TupleGetItem
from autorelay.ir.types import Dim, TensorType, TupleType, Type
from autorelay.op import te_compute as tc
from autorelay.op.registry import REQUIRED, call, rel_error
from autorelay.op.shape_utils import (
    ANY,
    dim_known_different,
    fmt_shape,
    merge_dims,
    normalize_axis,
    tensor_arg,
    tuple_arg,
)
from autorelay.op.transform import COMPUTES, as_tuple, mul_dims, reg
from autorelay.te import expr as E
from autorelay.te import tensor as te

# ---- tensor computes (registered through transform.COMPUTES by `reg`) ---------------------------


def _clamp(v: E.Expr, n: int) -> E.Expr:
    """Both arms of a select are evaluated, so every read must stay in bounds."""
    return E.maximum(E.minimum(v, n - 1), 0)


def _concatenate_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    axis = attrs["axis"] % inputs[0].ndim
    offsets, off = [], 0
    for t in inputs:
        offsets.append(off)
        off += t.shape[axis]

    def body(*i: E.Expr) -> E.Expr:
        def read(k: int) -> E.Expr:
            t = inputs[k]
            n = t.shape[axis]
            return t[tuple(_clamp(v - offsets[k], n) if d == axis else v for d, v in enumerate(i))]

        out = read(len(inputs) - 1)
        for k in range(len(inputs) - 2, -1, -1):
            out = E.select(i[axis] < offsets[k + 1], read(k), out)
        return out

    return tc.compute0(tc.out_shape(out_type), body, "concatenate", tag="injective")


def _stack_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    axis = normalize_axis("stack", attrs["axis"], inputs[0].ndim, extra=1)

    def body(*i: E.Expr) -> E.Expr:
        rest = i[:axis] + i[axis + 1 :]
        out = inputs[-1][rest]
        for k in range(len(inputs) - 2, -1, -1):
            out = E.select(E.compare("eq", i[axis], E.const(k)), inputs[k][rest], out)
        return out

    return tc.compute0(tc.out_shape(out_type), body, "stack", tag="injective")


def _split_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    outs, off = [], 0
    for k, field in enumerate(out_type.fields):  # type: ignore[attr-defined]
        shape = tc.out_shape(field)
        start = off
        outs.append(te.compute(shape, lambda *i, s=start: x[tuple(v + s if d == axis else v
                                                                  for d, v in enumerate(i))],
                               name=f"split{k}", tag="injective"))
        off += shape[axis]
    return outs


def _tile_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x = inputs[0]
    shape = tc.out_shape(out_type)
    lead = len(shape) - x.ndim
    return tc.index_map(x, out_type, lambda *i: [v % x.shape[d] for d, v in enumerate(i[lead:])], "tile")


def _repeat_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x = inputs[0]
    axis = normalize_axis("repeat", attrs["axis"], x.ndim)
    r = attrs["repeats"]
    return tc.index_map(x, out_type, lambda *i: [v // r if d == axis else v for d, v in enumerate(i)],
                        "repeat")


COMPUTES.update({"concatenate": _concatenate_compute, "stack": _stack_compute, "split": _split_compute,
                 "tile": _tile_compute, "repeat": _repeat_compute})


# ---- concatenate / split / stack -------------------------------------------------------------


def _same_shapes(op: str, fields: list[TensorType], skip: int | None) -> list[Dim]:
    """Merge the extents of all fields (except axis `skip`), which must agree."""
    first = fields[0]
    merged = list(first.shape)
    for k, f in enumerate(fields[1:], start=1):
        if f.ndim != first.ndim or f.dtype != first.dtype:
            raise rel_error(op, f"data.{k} is {f} but data.0 is {first}: ranks and dtypes must match")
        for i, (a, b) in enumerate(zip(merged, f.shape)):
            if i == skip:
                continue
            if dim_known_different(a, b):
                raise rel_error(
                    op, f"data.{k} of shape {fmt_shape(f.shape)} does not match data.0 of shape "
                    f"{fmt_shape(first.shape)} on axis {i}"
                )
            merged[i] = merge_dims(a, b)
    return merged


def _concatenate_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    fields = tuple_arg("concatenate", arg_types, 0, "data")
    if not fields:
        raise rel_error("concatenate", "needs at least one tensor")
    axis = normalize_axis("concatenate", attrs["axis"], fields[0].ndim)
    shape = _same_shapes("concatenate", fields, axis)
    parts = [f.shape[axis] for f in fields]
    shape[axis] = sum(parts) if all(isinstance(p, int) for p in parts) else ANY  # type: ignore[arg-type]
    return TensorType(tuple(shape), fields[0].dtype)


def _concatenate_grad(c: Call, g: Expr) -> list[Expr]:
    fields = c.args[0].checked_type.fields
    axis = normalize_axis("concatenate", c.attrs["axis"], fields[0].ndim)
    sizes = [f.shape[axis] for f in fields]
    if not all(isinstance(s, int) for s in sizes):
        raise rel_error("concatenate", f"gradient needs static extents on axis {axis}, got {sizes}")
    pieces = call("split", g, indices_or_sections=[int(i) for i in np.cumsum(sizes)[:-1]], axis=axis)
    return [Tuple(tuple(TupleGetItem(pieces, i) for i in range(len(fields))))]


def _concatenate_ref(attrs: Attrs, xs: list[np.ndarray]) -> np.ndarray:
    """np.concatenate, without the pieces that have no elements when others have some: a piece
    typed with a `?` extent may be empty with any extents (an ONNX Loop's stack grown from nothing)."""
    full = [x for x in xs if np.size(x)]
    return np.concatenate(full if full and len(full) < len(xs) else xs, axis=attrs["axis"])


reg("concatenate", ("data",), _concatenate_rel, _concatenate_ref, grad=_concatenate_grad,
     attrs={"axis": 0}, doc="join a tuple of tensors along an existing axis")


def _split_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("split", arg_types, 0, "data")
    axis = normalize_axis("split", attrs["axis"], t.ndim)
    d = t.shape[axis]
    spec = attrs["indices_or_sections"]
    if isinstance(spec, int):
        if spec <= 0:
            raise rel_error("split", f"indices_or_sections={spec} must be positive")
        if isinstance(d, int) and d % spec:
            raise rel_error("split", f"axis {axis} of data {fmt_shape(t.shape)} does not split into {spec} "
                            "equal sections")
        sizes: list[Dim] = [d // spec if isinstance(d, int) else ANY] * spec
    else:
        bounds = [0, *spec]
        if any(b > a for a, b in zip(bounds[1:], bounds[:-1])):
            raise rel_error("split", f"indices_or_sections={tuple(spec)} must be increasing")
        if isinstance(d, int):
            bounds = [min(b, d) for b in bounds] + [d]
            sizes = [b - a for a, b in pairwise(bounds)]
        else:
            sizes = [b - a for a, b in pairwise(bounds)] + [ANY]
    return TupleType(tuple(TensorType(t.shape[:axis] + (s,) + t.shape[axis + 1 :], t.dtype) for s in sizes))


def _split_ref(attrs: Attrs, x: np.ndarray) -> tuple:
    spec = attrs["indices_or_sections"]
    return tuple(p.copy() for p in np.split(x, spec if isinstance(spec, int) else list(spec), attrs["axis"]))


def _split_grad(c: Call, g: Expr) -> list[Expr]:
    n = len(c.checked_type.fields)
    return [call("concatenate", Tuple(tuple(TupleGetItem(g, i) for i in range(n))), axis=c.attrs["axis"])]


reg("split", ("data",), _split_rel, _split_ref, grad=_split_grad,
     attrs={"indices_or_sections": REQUIRED, "axis": 0},
     doc="split into equal sections (an int) or at indices (a list); returns a tuple")


def _stack_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    fields = tuple_arg("stack", arg_types, 0, "data")
    if not fields:
        raise rel_error("stack", "needs at least one tensor")
    axis = normalize_axis("stack", attrs["axis"], fields[0].ndim, extra=1)
    shape = _same_shapes("stack", fields, None)
    return TensorType(tuple(shape[:axis]) + (len(fields),) + tuple(shape[axis:]), fields[0].dtype)


def _stack_grad(c: Call, g: Expr) -> list[Expr]:
    fields = c.args[0].checked_type.fields
    axis = normalize_axis("stack", c.attrs["axis"], fields[0].ndim, extra=1)
    pieces = call("split", g, indices_or_sections=len(fields), axis=axis)
    return [Tuple(tuple(call("squeeze", TupleGetItem(pieces, i), axis=[axis]) for i in range(len(fields))))]


reg("stack", ("data",), _stack_rel, lambda attrs, xs: np.stack(xs, axis=attrs["axis"]), grad=_stack_grad,
     attrs={"axis": 0}, doc="join a tuple of equal-shaped tensors along a new axis")


# ---- tile / repeat --------------------------------------------------------------------------


def _tile_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("tile", arg_types, 0, "data")
    reps = as_tuple(attrs["reps"])
    if any(r < 0 for r in reps):
        raise rel_error("tile", f"reps={reps} must be non-negative")
    n = max(len(reps), t.ndim)
    shape = (1,) * (n - t.ndim) + t.shape
    reps = (1,) * (n - len(reps)) + reps
    return TensorType(tuple(mul_dims(d, r) for d, r in zip(shape, reps)), t.dtype)


def _tile_grad(c: Call, g: Expr) -> list[Expr]:
    # View g as (r0, d0, r1, d1, ...) with -4 splits and sum the repetition axes.
    x = c.args[0]
    reps = as_tuple(c.attrs["reps"])
    n = max(len(reps), x.checked_type.ndim)
    reps = (1,) * (n - len(reps)) + reps
    newshape = [v for r in reps for v in (-4, r, -1)]
    summed = call("sum", call("reshape", g, newshape=newshape), axis=list(range(0, 2 * n, 2)))
    return [call("reshape_like", summed, x)]


reg("tile", ("data",), _tile_rel, lambda attrs, x: np.tile(x, as_tuple(attrs["reps"])), grad=_tile_grad,
     attrs={"reps": REQUIRED}, doc="NumPy tile")


def _repeat_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("repeat", arg_types, 0, "data")
    axis = normalize_axis("repeat", attrs["axis"], t.ndim)
    if attrs["repeats"] < 0:
        raise rel_error("repeat", f"repeats={attrs['repeats']} must be non-negative")
    shape = list(t.shape)
    shape[axis] = mul_dims(shape[axis], attrs["repeats"])
    return TensorType(tuple(shape), t.dtype)


def _repeat_grad(c: Call, g: Expr) -> list[Expr]:
    axis = normalize_axis("repeat", c.attrs["axis"], c.args[0].checked_type.ndim)
    newshape = [0] * axis + [-4, -1, c.attrs["repeats"], -2]
    return [call("sum", call("reshape", g, newshape=newshape), axis=axis + 1)]


reg("repeat", ("data",), _repeat_rel, lambda attrs, x: np.repeat(x, attrs["repeats"], attrs["axis"]),
     grad=_repeat_grad, attrs={"repeats": REQUIRED, "axis": REQUIRED}, doc="repeat each element along axis")


