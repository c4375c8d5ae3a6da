"""Dynamic ops whose run-time *axes*, sizes or bounds decide the output shape: `dyn.reduce`,
`dyn.squeeze`, `dyn.expand_dims`, `dyn.split`, `dyn.arange`, `dyn.topk` and `dyn.resize2d`.

Why: ONNX (opset 13/18) passes the axes of ReduceSum/ReduceMean/…, Squeeze and Unsqueeze, Split's
sizes, Range's bounds and TopK's k as tensors, which a model may compute from data (a detector
keeps the best min(k, n) of the n boxes that passed its score threshold), and Resize its sizes (a
mask pasted at the size of its box). The static ops take them as attributes. These take them as
1-D integer tensors (scalars for `dyn.arange`), so the output rank is known when types are checked
(it follows from the static *length* of the axes tensor) while the extents are `?`. Like the ops
of `autorelay.op.dynamic` they are OPAQUE and have no compute: the VM's specialising kernel reads
the run-time values and replaces each call by its static form (a `sum` with `axis=…`, a
`squeeze`, a `reshape`, a `split`, a constant range, an `image.resize2d`), compiled per value.

Semantics are ONNX's: negative axes count from the end, repeated axes are an error, an empty axes
tensor reduces every axis unless `noop_with_empty_axes`; Squeeze's axes must have extent 1; TopK's
k may be 0 (empty outputs) but not more than the axis holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Constant, Expr, Tuple, Var
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.op.dynamic import DynamicValueError, int_vector_arg, register_dynamic
from autorelay.op.elemwise import INT
from autorelay.op.registry import OpDef, OpPattern, call, get, register, rel_error
from autorelay.op.shape_utils import ANY, tensor_arg

Values = Sequence[np.ndarray]  # the run-time values of a dyn op's shape-like arguments
REDUCERS = ("sum", "mean", "max", "min", "prod", "any", "all")


def concrete_axes(op: str, axes: Sequence[int], rank: int) -> list[int]:
    """Run-time axes normalised against `rank` (negative ones count from the end), checked distinct."""
    out = []
    for a in (int(v) for v in axes):
        if not -rank <= a < max(rank, 1):
            raise DynamicValueError(f"{op}: axis {a} is out of range for rank {rank}")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise DynamicValueError(f"{op}: axes {[int(v) for v in axes]} repeat an axis")
    return out


# ---- dyn.reduce -------------------------------------------------------------------------------


def _reduce_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.reduce", arg_types, 0, "data")
    axes = tensor_arg("dyn.reduce", arg_types, 1, "axes")
    if attrs["keepdims"] and not attrs["noop_with_empty_axes"] and axes.ndim == 1 and axes.dtype in INT:
        k = axes.shape[0]  # the output rank is the data's whatever the number of axes
    else:
        k = int_vector_arg("dyn.reduce", arg_types, 1, "axes", None)
    op = attrs["reducer"]
    if op not in REDUCERS:
        raise rel_error("dyn.reduce", f"reducer={op!r} is not one of {', '.join(REDUCERS)}")
    if op in ("any", "all") and data.dtype != "bool":
        raise rel_error("dyn.reduce", f"reducer={op!r} needs bool data, got {data}")
    if isinstance(k, int) and k > data.ndim:
        raise rel_error("dyn.reduce", f"{k} axes for data of rank {data.ndim}")
    if k == 0 and attrs["noop_with_empty_axes"]:
        return data
    if attrs["keepdims"]:  # an extent of 1 stays 1 whether reduced or not
        return TensorType(tuple(1 if d == 1 else ANY for d in data.shape), data.dtype)
    return TensorType((ANY,) * (data.ndim - k if k else 0), data.dtype)


def _reduce_static(attrs: Attrs, x: Expr, shape: Sequence[int], axes: Sequence[int]) -> Expr:
    """The static reduction of data of `shape` over the run-time `axes` (a constant for an empty
    max/min, which ONNX defines as the lowest/highest value of the type)."""
    rank = len(shape)
    norm = concrete_axes("dyn.reduce", axes, rank)
    if not norm and attrs["noop_with_empty_axes"]:
        return call("reshape", x, newshape=tuple(shape), allowzero=True)  # a copy: still one op
    norm = sorted(norm) or list(range(rank))
    keep = bool(attrs["keepdims"])
    op = attrs["reducer"]
    if op in ("max", "min") and any(shape[a] == 0 for a in norm):
        out = [1 if i in norm else d for i, d in enumerate(shape) if keep or i not in norm]
        return Constant(_empty_extreme(op, _dtype_of(x), out))
    return call(op, x, axis=tuple(norm), keepdims=keep)


def _dtype_of(x: Expr) -> np.dtype:
    """The dtype of a dyn op's data argument: a parameter of its primitive function or a constant."""
    if isinstance(x, Constant):
        return x.data.dtype
    t = x.type_annotation if isinstance(x, Var) else None
    if not isinstance(t, TensorType):
        raise DynamicValueError(f"dyn.reduce: data {x!r} has no tensor type annotation")
    return np.dtype(t.dtype)


def _empty_extreme(op: str, dt: np.dtype, shape: Sequence[int]) -> np.ndarray:
    info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
    if dt.kind == "f":
        fill = -np.inf if op == "max" else np.inf
    else:
        fill = info.min if op == "max" else info.max
    return np.full(tuple(shape), fill, dtype=dt)


def _reduce_ref(attrs: Attrs, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    norm = concrete_axes("dyn.reduce", axes.tolist(), x.ndim)
    if not norm and attrs["noop_with_empty_axes"]:
        return x.copy()
    norm = sorted(norm) or list(range(x.ndim))
    keep, op = bool(attrs["keepdims"]), attrs["reducer"]
    if op in ("max", "min") and any(x.shape[a] == 0 for a in norm):
        out = [1 if i in norm else d for i, d in enumerate(x.shape) if keep or i not in norm]
        return _empty_extreme(op, x.dtype, out)
    static = get(op)
    return np.asarray(static.reference(static.make_attrs({"axis": tuple(norm), "keepdims": keep}), x))


def _reduce_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int], values: Values) -> Expr:
    return _reduce_static(attrs, args[0], shape, values[0].tolist())


# ---- dyn.squeeze / dyn.expand_dims ----------------------------------------------------------------


def _squeeze_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.squeeze", arg_types, 0, "data")
    k = int_vector_arg("dyn.squeeze", arg_types, 1, "axes", None)
    if k > data.ndim:
        raise rel_error("dyn.squeeze", f"{k} axes for data of rank {data.ndim}")
    return TensorType((ANY,) * (data.ndim - k), data.dtype)


def squeeze_axes(shape: Sequence[int], axes: Sequence[int]) -> list[int]:
    norm = sorted(concrete_axes("dyn.squeeze", axes, len(shape)))
    bad = [a for a in norm if shape[a] != 1]
    if bad:
        raise DynamicValueError(f"dyn.squeeze: axes {bad} of data {tuple(shape)} do not have extent 1")
    return norm


def _squeeze_ref(attrs: Attrs, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    return np.squeeze(np.asarray(x), axis=tuple(squeeze_axes(np.shape(x), axes.tolist()))).copy()


def _squeeze_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int], values: Values) -> Expr:
    return call("squeeze", args[0], axis=tuple(squeeze_axes(shape, values[0].tolist())))


def unsqueezed_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    """ONNX Unsqueeze: `axes` index the output, whose rank is len(shape) + len(axes)."""
    rank = len(shape) + len(axes)
    norm = set(concrete_axes("dyn.expand_dims", axes, rank))
    rest = iter(shape)
    return tuple(1 if i in norm else int(next(rest)) for i in range(rank))


def _expand_dims_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.expand_dims", arg_types, 0, "data")
    k = int_vector_arg("dyn.expand_dims", arg_types, 1, "axes", None)
    return TensorType((ANY,) * (data.ndim + k), data.dtype)


def _expand_dims_ref(attrs: Attrs, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    return np.asarray(x).reshape(unsqueezed_shape(np.shape(x), axes.tolist())).copy()


def _expand_dims_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int],
                      values: Values) -> Expr:
    return call("reshape", args[0], newshape=unsqueezed_shape(shape, values[0].tolist()), allowzero=True)


# ---- dyn.split ----------------------------------------------------------------------------------


def split_bounds(shape: Sequence[int], axis: int, sizes: Sequence[int]) -> tuple[int, ...]:
    """The static split's indices for run-time `sizes` along `axis` (they must cover the extent)."""
    vals = [int(v) for v in sizes]
    if any(v < 0 for v in vals) or sum(vals) != shape[axis]:
        raise DynamicValueError(f"dyn.split: sizes {vals} must be >= 0 and sum to axis {axis}'s extent "
                                f"{shape[axis]} (data {tuple(shape)})")
    return tuple(int(b) for b in np.cumsum(vals)[:-1])


def _split_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.split", arg_types, 0, "data")
    k = int_vector_arg("dyn.split", arg_types, 1, "sizes", None)
    axis = attrs["axis"]
    if not 0 <= axis < data.ndim:
        raise rel_error("dyn.split", f"axis={axis} is out of range for data {data} (normalise it first)")
    if k < 1:
        raise rel_error("dyn.split", "sizes must have at least one entry")
    piece = TensorType(tuple(ANY if i == axis else d for i, d in enumerate(data.shape)), data.dtype)
    return TupleType((piece,) * k)


def _split_ref(attrs: Attrs, x: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    bounds = split_bounds(np.shape(x), attrs["axis"], sizes.tolist())
    return [p.copy() for p in np.split(np.asarray(x), list(bounds), axis=attrs["axis"])]


def _split_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int], values: Values) -> Expr:
    bounds = split_bounds(shape, attrs["axis"], values[0].tolist())
    return call("split", args[0], indices_or_sections=bounds, axis=attrs["axis"])


# ---- dyn.arange ---------------------------------------------------------------------------------


def _arange_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    ts = [tensor_arg("dyn.arange", arg_types, i, n) for i, n in enumerate(("start", "limit", "delta"))]
    if any(t.ndim != 0 for t in ts) or len({t.dtype for t in ts}) != 1:
        raise rel_error("dyn.arange", f"start, limit and delta must be scalars of one dtype, got {ts}")
    return TensorType((ANY,), ts[0].dtype)


def arange_value(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """ONNX Range: max(ceil((limit - start) / delta), 0) values start, start + delta, …"""
    if float(delta) == 0:
        raise DynamicValueError("dyn.arange: delta is 0")
    dtype = np.asarray(start).dtype
    n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return (np.asarray(start) + np.arange(n) * np.asarray(delta)).astype(dtype)


def _arange_ref(attrs: Attrs, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return arange_value(start, limit, delta)


def _arange_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int], values: Values) -> Expr:
    return Constant(arange_value(*values))


# ---- dyn.topk -----------------------------------------------------------------------------------


def _topk_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.topk", arg_types, 0, "data")
    int_vector_arg("dyn.topk", arg_types, 1, "k", 1)
    axis = attrs["axis"]
    if not 0 <= axis < data.ndim:
        raise rel_error("dyn.topk", f"axis={axis} is out of range for data {data} (normalise it first)")
    shape = tuple(ANY if i == axis else d for i, d in enumerate(data.shape))
    return TupleType((TensorType(shape, data.dtype), TensorType(shape, attrs["dtype"])))


def topk_count(shape: Sequence[int], axis: int, k: np.ndarray) -> int:
    """The run-time k, checked against the extent it selects from."""
    count = int(np.asarray(k).reshape(-1)[0])
    if not 0 <= count <= shape[axis]:
        raise DynamicValueError(f"dyn.topk: k={count} must be in [0, {shape[axis]}], the extent of axis "
                                f"{axis} of data {tuple(shape)}")
    return count


def _topk_ref(attrs: Attrs, x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count = topk_count(np.shape(x), attrs["axis"], k)
    static = get("topk").reference
    if count == 0:
        empty = np.take(np.asarray(x), [], axis=attrs["axis"])
        return empty, empty.astype(attrs["dtype"])
    return static(Attrs({**dict(attrs), "k": count, "ret_type": "both"}), x)  # type: ignore[misc]


def empty_topk(make: Callable[..., Expr], x: Expr, shape: Sequence, axis: int,
               dtype: str) -> tuple[Expr, Expr]:
    """TopK's values and indices for k = 0: `x` sliced to nothing along `axis` and that cast to
    `dtype`, built with `make` (`registry.call`, or an importer's typed call). The static `topk`
    cannot say it: it reads k < 1 as "all"."""
    end = tuple(0 if i == axis else d for i, d in enumerate(shape))
    empty = make("strided_slice", x, begin=(0,) * len(shape), end=end, strides=(1,) * len(shape))
    return empty, make("cast", empty, dtype=dtype)


def _topk_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int], values: Values) -> Expr:
    count, axis = topk_count(shape, attrs["axis"], values[0]), attrs["axis"]
    if count == 0:
        return Tuple(empty_topk(call, args[0], shape, axis, attrs["dtype"]))
    return call("topk", args[0], k=count, axis=axis, ret_type="both", is_ascend=attrs["is_ascend"],
                dtype=attrs["dtype"])


# ---- dyn.resize2d -------------------------------------------------------------------------------

_RESIZE_ATTRS = {"method": "linear", "coordinate_transformation_mode": "half_pixel", "rounding_method": "",
                 "cubic_alpha": -0.5}


def _resize_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("dyn.resize2d", arg_types, 0, "data")
    int_vector_arg("dyn.resize2d", arg_types, 1, "sizes", 4)
    if data.ndim != 4:
        raise rel_error("dyn.resize2d", f"data must be NCHW, got {data}")
    return TensorType((*data.shape[:2], ANY, ANY), data.dtype)


def resize_size(shape: Sequence[int], sizes: np.ndarray) -> tuple[int, int]:
    """The run-time output (height, width), checked: positive, and the batch and channels kept."""
    n, c, h, w = (int(v) for v in np.asarray(sizes).reshape(-1))
    if (n, c) != tuple(shape[:2]) or h < 1 or w < 1:
        raise DynamicValueError(f"dyn.resize2d: sizes ({n}, {c}, {h}, {w}) must keep the batch and "
                                f"channels of data {tuple(shape)} and give a positive height and width")
    return h, w


def _resize_attrs(attrs: dict, size: tuple[int, int]) -> Attrs:
    """image.resize2d's attributes for this size (checked by image.resize2d's rules)."""
    return get("image.resize2d").make_attrs({**attrs, "size": size})


def _resize_ref(attrs: Attrs, x: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    static = get("image.resize2d")
    return static.reference(_resize_attrs(dict(attrs), resize_size(np.shape(x), sizes)), x)  # type: ignore[misc]


def _resize_form(attrs: Attrs, args: Sequence[Expr], shape: Sequence[int], values: Values) -> Expr:
    return call("image.resize2d", args[0], size=resize_size(shape, values[0]), **dict(attrs))


register(OpDef(
    name="dyn.reduce", arg_names=("data", "axes"), type_rel=_reduce_rel, pattern=OpPattern.OPAQUE,
    attrs={"reducer": "sum", "keepdims": True, "noop_with_empty_axes": False}, reference=_reduce_ref,
    normalize_attrs=lambda a: {**a, "keepdims": bool(a["keepdims"]),
                               "noop_with_empty_axes": bool(a["noop_with_empty_axes"])},
    doc="ONNX ReduceSum/Mean/Max/Min/Prod (any/all for bool) over run-time 1-D int axes",
))
register(OpDef(
    name="dyn.squeeze", arg_names=("data", "axes"), type_rel=_squeeze_rel, pattern=OpPattern.OPAQUE,
    reference=_squeeze_ref, doc="ONNX Squeeze of run-time axes (each of extent 1)",
))
register(OpDef(
    name="dyn.expand_dims", arg_names=("data", "axes"), type_rel=_expand_dims_rel, pattern=OpPattern.OPAQUE,
    reference=_expand_dims_ref, doc="ONNX Unsqueeze at run-time axes (indices of the output)",
))
register(OpDef(
    name="dyn.split", arg_names=("data", "sizes"), type_rel=_split_rel, pattern=OpPattern.OPAQUE,
    attrs={"axis": 0}, reference=_split_ref, doc="ONNX Split into run-time sizes along a static axis",
))
register(OpDef(
    name="dyn.arange", arg_names=("start", "limit", "delta"), type_rel=_arange_rel, pattern=OpPattern.OPAQUE,
    reference=_arange_ref, doc="ONNX Range of run-time scalar bounds (its length depends on them)",
))
register(OpDef(
    name="dyn.topk", arg_names=("data", "k"), type_rel=_topk_rel, pattern=OpPattern.OPAQUE,
    attrs={"axis": -1, "is_ascend": False, "dtype": "int64"}, reference=_topk_ref,
    doc="ONNX TopK of a run-time k (a 1-element int tensor): values and indices along a static axis",
))
register(OpDef(
    name="dyn.resize2d", arg_names=("data", "sizes"), type_rel=_resize_rel, pattern=OpPattern.OPAQUE,
    attrs=_RESIZE_ATTRS, reference=_resize_ref,
    normalize_attrs=lambda a: {k: _resize_attrs(a, (1, 1))[k] for k in _RESIZE_ATTRS},
    doc="NCHW resize to run-time sizes (N, C, H, W; N and C kept), as image.resize2d (nearest or linear)",
))
register_dynamic("dyn.reduce", (1,), _reduce_form)
register_dynamic("dyn.resize2d", (1,), _resize_form)
register_dynamic("dyn.squeeze", (1,), _squeeze_form)
register_dynamic("dyn.expand_dims", (1,), _expand_dims_form)
register_dynamic("dyn.split", (1,), _split_form)
register_dynamic("dyn.arange", (0, 1, 2), _arange_form)
register_dynamic("dyn.topk", (1,), _topk_form)

__all__ = ["REDUCERS", "arange_value", "concrete_axes", "empty_topk", "split_bounds", "squeeze_axes",
           "topk_count", "unsqueezed_shape"]
