"""Dynamic ops: `dyn.reshape`, `dyn.strided_slice`, `dyn.pad`, `dyn.broadcast_to`, `dyn.full`, whose
shape-like inputs are tensors,
and `shape_of`, the run-time shape of a tensor whose type has `?` or symbolic extents (`dynamic_axes`
adds the ops with run-time axes, sizes or bounds through `register_dynamic`).

Why: an ONNX model may compute a Reshape's shape, a Slice's bounds or a Pad's widths at run time
(from a graph input, or from data). The static ops take those as attributes; these take them as
small 1-D integer tensors, so the output rank is known at type-checking time but the extents are
`?` (`AnyDim`) except where they are provable.

They have no tensor compute and are OPAQUE (never fused): the VM's specialising kernel
(`autorelay.runtime.vm.specializing_kernel`) reads the runtime values and replaces each call by its
static counterpart (`static_form`), then compiles that. The semantics are ONNX's:

* `dyn.reshape(data, shape)`: 0 copies the input extent at the same index (unless `allowzero`),
  one -1 is inferred; no other negative codes.
* `dyn.strided_slice(data, begin, end, strides)`: one entry per axis of data; negative indices
  count from the end, bounds clamp, negative strides walk backwards.
* `dyn.pad(data, pads, pad_value)`: `pads` is `[b_0, …, b_{n-1}, e_0, …, e_{n-1}]`; negative
  widths crop.
* `dyn.broadcast_to(data, shape)`: ONNX Expand, a two-way broadcast of data's shape with `shape`.
* `dyn.full(fill_value, shape)`: ONNX ConstantOfShape, a scalar repeated to a run-time shape.
* `shape_of(data)`: data's extents as a 1-D int64 tensor (ONNX `Shape` of a dynamic input); a
  specialisation knows them, so it becomes a constant there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Constant, Expr
from autorelay.ir.types import TensorType, Type
from autorelay.op.elemwise import INT
from autorelay.op.nn_spatial import MODES
from autorelay.op.registry import OpDef, OpPattern, call, get, register, rel_error
from autorelay.op.shape_utils import ANY, is_static_shape, tensor_arg


class DynamicValueError(AutoRelayError, ValueError):
    """A runtime shape-like value that does not fit its data (a bad reshape target, a zero step)."""


# op name -> indices of the arguments whose runtime *values* decide the output shape
VALUE_ARGS: dict[str, tuple[int, ...]] = {
    "dyn.reshape": (1,),
    "dyn.strided_slice": (1, 2, 3),
    "dyn.pad": (1,),
    "dyn.broadcast_to": (1,),
    "dyn.full": (1,),
    "shape_of": (),
}

# `fn(attrs, args, data_shape, values) -> Expr`: the static forms of the dyn ops other modules define
StaticForm = Callable[[Attrs, Sequence[Expr], Sequence[int], Sequence[np.ndarray]], Expr]
_MORE_FORMS: dict[str, StaticForm] = {}


def register_dynamic(name: str, value_args: tuple[int, ...], form: StaticForm) -> None:
    """Declare a dyn op defined elsewhere (`dynamic_axes`): which arguments' run-time values decide its
    output shape, and its static form; the VM's specialising kernel and `build` see it like these."""
    VALUE_ARGS[name] = value_args
    _MORE_FORMS[name] = form


def int_vector_arg(op: str, arg_types: list[Type], index: int, name: str, length: int | None) -> int:
    """Check that argument `index` is a 1-D integer tensor of static length; return that length."""
    t = tensor_arg(op, arg_types, index, name)
    if t.ndim != 1 or t.dtype not in INT:
        raise rel_error(op, f"argument {name} must be a 1-D integer tensor, got {t}")
    n = t.shape[0]
    if not isinstance(n, int):
        raise rel_error(op, f"argument {name} must have a static length (the output rank), got {t}")
    if length is not None and n != length:
        raise rel_error(op, f"argument {name} must have {length} entries for data of rank "
                            f"{length if op != 'dyn.pad' else length // 2}, got {t}")
    return n


# ---- dyn.reshape ------------------------------------------------------------------------------


def reshape_target(data_shape: Sequence[int], shape: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """The concrete output shape of an ONNX Reshape of `data_shape` to the runtime `shape`."""
    vals = [int(v) for v in shape]
    what = f"reshape of data {tuple(data_shape)} to {vals}"
    if any(v < -1 for v in vals) or vals.count(-1) > 1:
        raise DynamicValueError(f"dyn.reshape: {what}: entries must be >= -1 with at most one -1")
    out = []
    for i, v in enumerate(vals):
        if v == 0 and not allowzero:
            if i >= len(data_shape):
                raise DynamicValueError(f"dyn.reshape: {what}: 0 at index {i} copies no input extent")
            v = data_shape[i]
        out.append(v)
    total = int(np.prod(data_shape, dtype=np.int64))
    if -1 in out:
        rest = int(np.prod([v for v in out if v != -1], dtype=np.int64))
        if rest == 0 or total % rest:
            raise DynamicValueError(f"dyn.reshape: cannot infer -1 in {what}")
        out[out.index(-1)] = total // rest
    if int(np.prod(out, dtype=np.int64)) != total:
        raise DynamicValueError(f"dyn.reshape: {what}: element counts differ")
    return tuple(out)


def _reshape_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.reshape", arg_types, 0, "data")
    n = int_vector_arg("dyn.reshape", arg_types, 1, "shape", None)
    if n == 1 and is_static_shape(data.shape):  # one extent: it must hold every element
        return TensorType((int(np.prod(data.shape, dtype=np.int64)),), data.dtype)
    return TensorType((ANY,) * n, data.dtype)


def _reshape_ref(attrs: Attrs, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    return np.asarray(x).reshape(reshape_target(x.shape, shape.tolist(), attrs["allowzero"])).copy()


# ---- dyn.strided_slice ------------------------------------------------------------------------


def slice_bounds(data_shape: Sequence[int], begin: Sequence[int], end: Sequence[int],
                 strides: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """ONNX Slice bounds (one per axis) as the static `strided_slice`'s Python-slice bounds."""
    bs, es, ss = [], [], []
    for axis, (d, b, e, s) in enumerate(zip(data_shape, begin, end, strides)):
        b, e, s = int(b), int(e), int(s)
        if s == 0:
            raise DynamicValueError(f"dyn.strided_slice: step 0 on axis {axis} of data {tuple(data_shape)}")
        b, e = (b + d if b < 0 else b), (e + d if e < 0 else e)
        lo, hi = (0, d) if s > 0 else (-1, d - 1)
        b, e = min(max(b, lo), hi), min(max(e, lo), hi)
        if s < 0:  # -1 means "before index 0"; in Python slice terms that is -d-1
            b, e = (-d - 1 if b == -1 else b), (-d - 1 if e == -1 else e)
        bs.append(b)
        es.append(e)
        ss.append(s)
    return tuple(bs), tuple(es), tuple(ss)


def _slice_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.strided_slice", arg_types, 0, "data")
    for i, name in ((1, "begin"), (2, "end"), (3, "strides")):
        int_vector_arg("dyn.strided_slice", arg_types, i, name, data.ndim)
    return TensorType((ANY,) * data.ndim, data.dtype)


def _slice_ref(attrs: Attrs, x: np.ndarray, begin: np.ndarray, end: np.ndarray,
               strides: np.ndarray) -> np.ndarray:
    bs, es, ss = slice_bounds(x.shape, begin.tolist(), end.tolist(), strides.tolist())
    return np.asarray(x)[tuple(slice(*t) for t in zip(bs, es, ss))].copy()


# ---- dyn.pad ----------------------------------------------------------------------------------


def pad_widths(ndim: int, pads: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """ONNX `pads` ([all befores, all afters]) as (before, after) pairs; negative entries crop."""
    vals = [int(v) for v in pads]
    if len(vals) != 2 * ndim:
        raise DynamicValueError(f"dyn.pad: pads {vals} must have 2 entries per axis ({ndim} axes)")
    return tuple((vals[i], vals[i + ndim]) for i in range(ndim))


def _pad_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.pad", arg_types, 0, "data")
    int_vector_arg("dyn.pad", arg_types, 1, "pads", 2 * data.ndim)
    value = tensor_arg("dyn.pad", arg_types, 2, "pad_value")
    if value.shape != () or value.dtype != data.dtype:
        raise rel_error("dyn.pad", f"pad_value must be a {data.dtype} scalar, got {value}")
    if attrs["pad_mode"] not in MODES:
        raise rel_error("dyn.pad", f"pad_mode={attrs['pad_mode']!r} is not one of {', '.join(MODES)}")
    return TensorType((ANY,) * data.ndim, data.dtype)


def _pad_ref(attrs: Attrs, x: np.ndarray, pads: np.ndarray, value: np.ndarray) -> np.ndarray:
    width = pad_widths(x.ndim, pads.tolist())
    pos = tuple((max(b, 0), max(e, 0)) for b, e in width)
    out = get("nn.pad").reference(get("nn.pad").make_attrs({"pad_width": pos, "pad_mode": attrs["pad_mode"]}),
                                  x, value)
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(out.shape, width))
    return np.asarray(out)[crop].copy()


# ---- dyn.broadcast_to ---------------------------------------------------------------------------


def expand_target(data_shape: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """ONNX Expand's output shape: data's shape and the run-time `shape` broadcast both ways."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(data_shape), tuple(int(v) for v in shape)))
    except ValueError:
        raise DynamicValueError(f"dyn.broadcast_to: shape {[int(v) for v in shape]} does not broadcast "
                                f"with data {tuple(data_shape)}") from None


def _expand_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.broadcast_to", arg_types, 0, "data")
    n = int_vector_arg("dyn.broadcast_to", arg_types, 1, "shape", None)
    rank = max(n, data.ndim)
    dims = (1,) * (rank - data.ndim) + tuple(data.shape)
    # an extent of data other than 1 is the output's (the value must be 1 or equal to it)
    return TensorType(tuple(d if isinstance(d, int) and d != 1 else ANY for d in dims), data.dtype)


def _expand_ref(attrs: Attrs, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    return np.broadcast_to(x, expand_target(np.shape(x), shape.tolist())).copy()


# ---- dyn.full ----------------------------------------------------------------------------------


def _full_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    fill = tensor_arg("dyn.full", arg_types, 0, "fill_value")
    if fill.ndim != 0:
        raise rel_error("dyn.full", f"fill_value must be a scalar, got {fill}")
    n = int_vector_arg("dyn.full", arg_types, 1, "shape", None)
    return TensorType((ANY,) * n, fill.dtype)


def _full_target(shape: Sequence[int]) -> tuple[int, ...]:
    vals = tuple(int(v) for v in shape)
    if any(v < 0 for v in vals):
        raise DynamicValueError(f"dyn.full: shape {list(vals)} has a negative extent")
    return vals


def _full_ref(attrs: Attrs, fill: np.ndarray, shape: np.ndarray) -> np.ndarray:
    return np.full(_full_target(shape.tolist()), fill, dtype=np.asarray(fill).dtype)


# ---- shape_of ---------------------------------------------------------------------------------


def _shape_of_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    return TensorType((tensor_arg("shape_of", arg_types, 0, "data").ndim,), "int64")


def _shape_of_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    return np.array(np.shape(x), dtype="int64")


# ---- the static counterparts -----------------------------------------------------------------


def static_form(name: str, attrs: Attrs, args: Sequence[Expr], data_shape: Sequence[int],
                values: Sequence[np.ndarray]) -> Expr:
    """The static op(s) computing dyn op `name` on data of `data_shape` with the runtime `values`
    of its shape-like arguments (`VALUE_ARGS` order). `args` are the call's (rebuilt) arguments;
    only data and the pad value are used, the shape-like ones become attributes."""
    if name == "dyn.reshape":
        target = reshape_target(data_shape, values[0].tolist(), attrs["allowzero"])
        return call("reshape", args[0], newshape=target, allowzero=True)
    if name == "dyn.strided_slice":
        b, e, s = slice_bounds(data_shape, *(v.tolist() for v in values))
        return call("strided_slice", args[0], begin=b, end=e, strides=s)
    if name == "dyn.pad":
        width = pad_widths(len(data_shape), values[0].tolist())
        pos = tuple((max(b, 0), max(e, 0)) for b, e in width)
        x = args[0]
        if any(b or e for b, e in pos):
            x = call("nn.pad", x, args[2], pad_width=pos, pad_mode=attrs["pad_mode"])
        if any(b < 0 or e < 0 for b, e in width):
            shape = [d + b + e for d, (b, e) in zip(data_shape, pos)]
            begin = tuple(max(-b, 0) for b, _ in width)
            end = tuple(n - max(-e, 0) for n, (_, e) in zip(shape, width))
            x = call("strided_slice", x, begin=begin, end=end)
        if x is args[0]:  # nothing to pad: still a call, so the primitive function has a body op
            x = call("reshape", x, newshape=tuple(data_shape), allowzero=True)
        return x
    if name == "dyn.broadcast_to":
        target = expand_target(data_shape, values[0].tolist())
        if target == tuple(data_shape):
            return call("reshape", args[0], newshape=target, allowzero=True)  # a copy: still one op
        return call("broadcast_to", args[0], shape=target)
    if name == "dyn.full":
        return call("full", args[0], shape=_full_target(values[0].tolist()))
    if name == "shape_of":
        return Constant(np.array(data_shape, dtype="int64"))
    if name in _MORE_FORMS:
        return _MORE_FORMS[name](attrs, args, data_shape, values)
    raise KeyError(f"{name} is not a dynamic op")


register(OpDef(
    name="dyn.reshape", arg_names=("data", "shape"), type_rel=_reshape_rel, pattern=OpPattern.OPAQUE,
    attrs={"allowzero": False}, reference=_reshape_ref,
    normalize_attrs=lambda a: {**a, "allowzero": bool(a["allowzero"])},
    doc="reshape to a runtime 1-D int shape (ONNX semantics: 0 copies, one -1 is inferred)",
))
register(OpDef(
    name="dyn.strided_slice", arg_names=("data", "begin", "end", "strides"), type_rel=_slice_rel,
    pattern=OpPattern.OPAQUE, reference=_slice_ref,
    doc="ONNX Slice with runtime per-axis begin/end/strides (negative indices, clamping, negative steps)",
))
register(OpDef(
    name="dyn.pad", arg_names=("data", "pads", "pad_value"), type_rel=_pad_rel, pattern=OpPattern.OPAQUE,
    attrs={"pad_mode": "constant"}, reference=_pad_ref,
    doc="pad with runtime ONNX pads ([befores, afters]; negative widths crop)",
))
register(OpDef(
    name="dyn.broadcast_to", arg_names=("data", "shape"), type_rel=_expand_rel, pattern=OpPattern.OPAQUE,
    reference=_expand_ref, doc="ONNX Expand to a run-time 1-D int shape (broadcast both ways)",
))
register(OpDef(
    name="dyn.full", arg_names=("fill_value", "shape"), type_rel=_full_rel, pattern=OpPattern.OPAQUE,
    reference=_full_ref, doc="ONNX ConstantOfShape: a scalar repeated to a run-time 1-D int shape",
))
register(OpDef(
    name="shape_of", arg_names=("data",), type_rel=_shape_of_rel, pattern=OpPattern.OPAQUE,
    reference=_shape_of_ref, doc="the extents of data as a 1-D int64 tensor (run-time for ? extents)",
))


__all__ = ["VALUE_ARGS", "DynamicValueError", "StaticForm", "expand_target", "pad_widths", "register_dynamic",
           "reshape_target", "slice_bounds", "static_form"]
