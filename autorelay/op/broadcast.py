"""Selection, casting, constant-filling and broadcasting helpers: `where`, `cast`, `clip`,
`zeros`/`ones`/`full`, `broadcast_to`, and the shape-polymorphic ops that gradient rules rely on
(`collapse_sum_like`, `broadcast_to_like`, `reshape_like`): they take their target shape from a
second argument, so a gradient can be written once without knowing any concrete shape.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import DTYPES, TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.elemwise import NUMERIC, check_dtype, scalar_like, sum_to
from autorelay.op.registry import REQUIRED, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import broadcast_shapes, fmt_shape, prod, tensor_arg
from autorelay.te import expr as E

# ---- tensor computes (looked up by name when each OpDef below is registered) --------------------


def _where(c: E.Expr, x: E.Expr, y: E.Expr) -> E.Expr:
    return E.select(c if c.dtype == "bool" else E.compare("ne", c, E.const(0, c.dtype)), x, y)


def _cast_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    dtype = tc.out_dtype(out_type)
    return tc.bcast_map(lambda x: E.cast(x, dtype), inputs[:1], out_type, "cast")


def _fill(value_of: object) -> object:
    """zeros/ones/full(_like): a constant-valued tensor of the output type."""

    def compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
        dtype = tc.out_dtype(out_type)
        return tc.compute0(tc.out_shape(out_type), lambda *i: value_of(inputs, dtype), "fill")  # type: ignore[operator]

    return compute


def _scalar_read(t: object, dtype: str) -> E.Expr:
    return E.cast(t[()] if t.ndim == 0 else t[(0,) * t.ndim], dtype)  # type: ignore[attr-defined]


def _collapse_sum_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x = inputs[0]
    shape = tc.out_shape(out_type)
    lead = x.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1]
    tmp = TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)
    red = tc.reduction(x, "sum", axes, False, tmp, name="collapse_sum")
    return tc.reshape(red, out_type, "collapse_sum_like")


_TE = {
    "where": lambda ins, a, t: tc.bcast_map(_where, ins, t, "where"),
    "cast": _cast_compute,
    "cast_like": _cast_compute,
    "clip": lambda ins, a, t: tc.bcast_map(lambda x: E.minimum(E.maximum(x, E.const(a["a_min"], x.dtype)),
                                                               E.const(a["a_max"], x.dtype)), ins, t, "clip"),
    "zeros": _fill(lambda ins, dt: E.const(0, dt)),
    "ones": _fill(lambda ins, dt: E.const(1, dt)),
    "full": _fill(lambda ins, dt: _scalar_read(ins[0], dt)),
    "full_like": _fill(lambda ins, dt: _scalar_read(ins[1], dt)),
    "broadcast_to": lambda ins, a, t: tc.bcast_map(lambda x: x, ins[:1], t, "broadcast_to"),
    "broadcast_to_like": lambda ins, a, t: tc.bcast_map(lambda x: x, ins[:1], t, "broadcast_to"),
    "reshape_like": lambda ins, a, t: tc.reshape(ins[0], t, "reshape_like"),
    "collapse_sum_like": _collapse_sum_compute,
}


def _check_dtype_attr(op: str, dtype: object) -> str:
    if dtype not in DTYPES:
        raise rel_error(op, f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    return str(dtype)


# ---- where ----------------------------------------------------------------------------------


def _where_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    cond = tensor_arg("where", arg_types, 0, "condition")
    x = tensor_arg("where", arg_types, 1, "x")
    y = tensor_arg("where", arg_types, 2, "y")
    # Relay treats a non-bool condition as "nonzero is true", so any dtype is accepted.
    if x.dtype != y.dtype:
        raise rel_error("where", f"x has dtype {x.dtype} but y has dtype {y.dtype}")
    xy = broadcast_shapes("where", x.shape, y.shape, ("x", "y"))
    return TensorType(broadcast_shapes("where", cond.shape, xy, ("condition", "broadcast(x, y)")), x.dtype)


def _where_grad(c: Call, g: Expr) -> list[Expr]:
    cond, x, y = c.args
    zeros = call("zeros_like", g)
    return [
        call("zeros_like", cond),
        sum_to(call("where", cond, g, zeros), x),
        sum_to(call("where", cond, zeros, g), y),
    ]


register(
    OpDef(
        name="where",
        compute=_TE.get("where"),
        arg_names=("condition", "x", "y"),
        type_rel=_where_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda attrs, c, x, y: np.asarray(np.where(np.asarray(c) != 0, x, y)).astype(
            np.asarray(x).dtype
        ),
        gradient=_where_grad,
        doc="x where condition is true (nonzero), else y; all three broadcast together",
    )
)


# ---- cast / cast_like -----------------------------------------------------------------------


def _cast_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("cast", arg_types, 0, "data")
    return TensorType(t.shape, _check_dtype_attr("cast", attrs["dtype"]))


def _cast_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    # Float -> int conversion truncates toward zero, as C and LLVM's fptosi do.
    return np.asarray(x).astype(attrs["dtype"])


register(
    OpDef(
        name="cast",
        compute=_TE.get("cast"),
        arg_names=("data",),
        type_rel=_cast_rel,
        pattern=OpPattern.ELEMWISE,
        attrs={"dtype": REQUIRED},
        reference=_cast_ref,
        gradient=lambda c, g: [call("cast", g, dtype=c.args[0].checked_type.dtype)],
        doc="convert the element type",
    )
)


def _cast_like_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("cast_like", arg_types, 0, "data")
    like = tensor_arg("cast_like", arg_types, 1, "dtype_like")
    return TensorType(t.shape, like.dtype)


register(
    OpDef(
        name="cast_like",
        compute=_TE.get("cast_like"),
        arg_names=("data", "dtype_like"),
        type_rel=_cast_like_rel,
        pattern=OpPattern.ELEMWISE,
        reference=lambda attrs, x, like: np.asarray(x).astype(np.asarray(like).dtype),
        gradient=lambda c, g: [call("cast_like", g, c.args[0]), call("zeros_like", c.args[1])],
        doc="convert the element type to that of a second tensor",
    )
)


# ---- clip -----------------------------------------------------------------------------------


def _clip_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("clip", arg_types, 0, "data")
    check_dtype("clip", t, NUMERIC, "data")
    if attrs["a_min"] > attrs["a_max"]:
        raise rel_error("clip", f"a_min={attrs['a_min']} is greater than a_max={attrs['a_max']}")
    return t


def _clip_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return np.asarray(np.minimum(np.maximum(x, attrs["a_min"]), attrs["a_max"])).astype(x.dtype)


def _clip_grad(c: Call, g: Expr) -> list[Expr]:
    x = c.args[0]
    inside = call(
        "logical_and",
        call("greater_equal", x, scalar_like(x, c.attrs["a_min"])),
        call("less_equal", x, scalar_like(x, c.attrs["a_max"])),
    )
    return [call("where", inside, g, call("zeros_like", g))]


register(
    OpDef(
        name="clip",
        compute=_TE.get("clip"),
        arg_names=("data",),
        type_rel=_clip_rel,
        pattern=OpPattern.ELEMWISE,
        attrs={"a_min": REQUIRED, "a_max": REQUIRED},
        reference=_clip_ref,
        gradient=_clip_grad,
        doc="clamp into [a_min, a_max]; the gradient passes where the input is inside",
    )
)


# ---- zeros / ones / full / full_like --------------------------------------------------------


def _static_shape_attr(op: str, shape: object) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)  # type: ignore[arg-type]
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise rel_error(op, f"shape={dims} must be a list of non-negative integers")
    return dims


def _make_constant_op(name: str, value: float) -> None:
    def type_rel(arg_types: list[Type], attrs: Attrs) -> Type:
        return TensorType(_static_shape_attr(name, attrs["shape"]), _check_dtype_attr(name, attrs["dtype"]))

    register(
        OpDef(
            name=name,
            compute=_TE.get(name),
            arg_names=(),
            type_rel=type_rel,
            pattern=OpPattern.ELEMWISE,
            attrs={"shape": REQUIRED, "dtype": "float32"},
            reference=lambda attrs: np.full(_static_shape_attr(name, attrs["shape"]), value, attrs["dtype"]),
            gradient=lambda c, g: [],
            doc=f"a tensor filled with {value}",
        )
    )


_make_constant_op("zeros", 0)
_make_constant_op("ones", 1)


def _full_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    fill = tensor_arg("full", arg_types, 0, "fill_value")
    if fill.ndim != 0:
        raise rel_error("full", f"fill_value must be a scalar, got shape {fmt_shape(fill.shape)}")
    dtype = attrs["dtype"] or fill.dtype
    return TensorType(_static_shape_attr("full", attrs["shape"]), _check_dtype_attr("full", dtype))


def _full_ref(attrs: Attrs, fill: np.ndarray) -> np.ndarray:
    fill = np.asarray(fill)
    shape = _static_shape_attr("full", attrs["shape"])
    return np.full(shape, fill, dtype=attrs["dtype"] or fill.dtype)


register(
    OpDef(
        name="full",
        compute=_TE.get("full"),
        arg_names=("fill_value",),
        type_rel=_full_rel,
        pattern=OpPattern.ELEMWISE,
        attrs={"shape": REQUIRED, "dtype": ""},
        reference=_full_ref,
        gradient=lambda c, g: [call("cast_like", call("sum", g), c.args[0])],
        doc="a tensor of `shape` filled with a scalar; dtype defaults to the scalar's",
    )
)


def _full_like_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("full_like", arg_types, 0, "data")
    fill = tensor_arg("full_like", arg_types, 1, "fill_value")
    if fill.ndim != 0:
        raise rel_error("full_like", f"fill_value must be a scalar, got shape {fmt_shape(fill.shape)}")
    return data


register(
    OpDef(
        name="full_like",
        compute=_TE.get("full_like"),
        arg_names=("data", "fill_value"),
        type_rel=_full_like_rel,
        pattern=OpPattern.ELEMWISE,
        reference=lambda attrs, x, f: np.full(np.shape(x), f, dtype=np.asarray(x).dtype),
        gradient=lambda c, g: [
            call("zeros_like", c.args[0]),
            call("cast_like", call("sum", g), c.args[1]),
        ],
        doc="a tensor of data's type filled with a scalar",
    )
)


# ---- broadcast_to / broadcast_to_like -------------------------------------------------------


def _broadcast_target(op: str, data: TensorType, target: tuple, target_name: str) -> TensorType:
    if len(target) < data.ndim:
        raise rel_error(
            op, f"cannot broadcast data of shape {fmt_shape(data.shape)} to the lower-rank "
            f"{target_name} {fmt_shape(target)}",
        )
    out = broadcast_shapes(op, data.shape, target, ("data", target_name))
    for o, t in zip(out, target):
        if isinstance(t, int) and isinstance(o, int) and o != t:
            raise rel_error(
                op,
                f"cannot broadcast data of shape {fmt_shape(data.shape)} "
                f"to {target_name} {fmt_shape(target)}",
            )
    # The target decides the result shape; it may be more symbolic than `out` (e.g. `?`).
    return TensorType(tuple(target), data.dtype)


def _broadcast_to_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("broadcast_to", arg_types, 0, "data")
    shape = _static_shape_attr("broadcast_to", attrs["shape"])
    return _broadcast_target("broadcast_to", data, shape, "shape")


register(
    OpDef(
        name="broadcast_to",
        compute=_TE.get("broadcast_to"),
        arg_names=("data",),
        type_rel=_broadcast_to_rel,
        pattern=OpPattern.BROADCAST,
        attrs={"shape": REQUIRED},
        reference=lambda attrs, x: np.array(np.broadcast_to(x, tuple(attrs["shape"]))),
        gradient=lambda c, g: [sum_to(g, c.args[0])],
        doc="NumPy broadcast_to",
    )
)


def _broadcast_to_like_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("broadcast_to_like", arg_types, 0, "data")
    like = tensor_arg("broadcast_to_like", arg_types, 1, "broadcast_type")
    return _broadcast_target("broadcast_to_like", data, like.shape, "broadcast_type shape")


register(
    OpDef(
        name="broadcast_to_like",
        compute=_TE.get("broadcast_to_like"),
        arg_names=("data", "broadcast_type"),
        type_rel=_broadcast_to_like_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda attrs, x, like: np.array(np.broadcast_to(x, np.shape(like))),
        gradient=lambda c, g: [sum_to(g, c.args[0]), call("zeros_like", c.args[1])],
        doc="broadcast data to the shape of a second tensor",
    )
)


# ---- collapse_sum_like ----------------------------------------------------------------------


def _collapse_sum_like_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("collapse_sum_like", arg_types, 0, "data")
    like = tensor_arg("collapse_sum_like", arg_types, 1, "collapse_type")
    bad = like.ndim > data.ndim
    if not bad:
        out = broadcast_shapes("collapse_sum_like", like.shape, data.shape, ("collapse_type", "data"))
        bad = any(isinstance(o, int) and isinstance(d, int) and o != d for o, d in zip(out, data.shape))
    if bad:
        raise rel_error(
            "collapse_sum_like",
            f"collapse_type shape {fmt_shape(like.shape)} does not broadcast to data shape "
            f"{fmt_shape(data.shape)}, so data cannot be summed down to it",
        )
    return TensorType(like.shape, data.dtype)


def collapse_sum(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `x` over the axes along which `shape` was broadcast to produce x's shape."""
    x = np.asarray(x)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1
    )
    return np.asarray(np.sum(x, axis=axes, dtype=x.dtype)).reshape(shape)


register(
    OpDef(
        name="collapse_sum_like",
        compute=_TE.get("collapse_sum_like"),
        arg_names=("data", "collapse_type"),
        type_rel=_collapse_sum_like_rel,
        pattern=OpPattern.COMM_REDUCE,
        reference=lambda attrs, x, like: collapse_sum(x, np.shape(like)),
        gradient=lambda c, g: [call("broadcast_to_like", g, c.args[0]), call("zeros_like", c.args[1])],
        doc="sum a broadcast result back to the shape of a second tensor (gradients of broadcasts)",
    )
)


# ---- reshape_like ---------------------------------------------------------------------------


def _span(n: int, begin: int, end: int | None) -> tuple[int, int]:
    """Relay's [begin, end) axis range of reshape_like: negative values count from the end."""
    b = begin + n if begin < 0 else begin
    e = n if end is None else (end + n if end < 0 else end)
    return b, e


def reshape_like_shape(data: tuple, like: tuple, attrs: Attrs) -> tuple:
    """data.shape[:lhs_begin] + like.shape[rhs_begin:rhs_end] + data.shape[lhs_end:]."""
    lb, le = _span(len(data), attrs["lhs_begin"], attrs["lhs_end"])
    rb, re_ = _span(len(like), attrs["rhs_begin"], attrs["rhs_end"])
    if not (0 <= lb <= le <= len(data) and 0 <= rb <= re_ <= len(like)):
        raise rel_error("reshape_like", f"axis ranges [{lb}, {le}) of data {fmt_shape(data)} and "
                        f"[{rb}, {re_}) of shape_like {fmt_shape(like)} are out of bounds")
    a, b = prod(data[lb:le]), prod(like[rb:re_])
    # With symbolic extents on either side the sizes can only be compared at run time.
    if a is not None and b is not None and a != b:
        raise rel_error(
            "reshape_like",
            f"data of shape {fmt_shape(data)} ({a} elements) cannot be reshaped like "
            f"shape_like {fmt_shape(like)} ({b} elements)",
        )
    return tuple(data[:lb]) + tuple(like[rb:re_]) + tuple(data[le:])


def _reshape_like_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("reshape_like", arg_types, 0, "data")
    like = tensor_arg("reshape_like", arg_types, 1, "shape_like")
    return TensorType(reshape_like_shape(data.shape, like.shape, attrs), data.dtype)


register(
    OpDef(
        name="reshape_like",
        compute=_TE.get("reshape_like"),
        arg_names=("data", "shape_like"),
        type_rel=_reshape_like_rel,
        pattern=OpPattern.INJECTIVE,
        attrs={"lhs_begin": 0, "lhs_end": None, "rhs_begin": 0, "rhs_end": None},
        reference=lambda attrs, x, like: np.reshape(x, reshape_like_shape(x.shape, np.shape(like), attrs)),
        gradient=lambda c, g: [call("reshape_like", g, c.args[0]), call("zeros_like", c.args[1])],
        doc="reshape data (or its axes [lhs_begin, lhs_end)) to the shape of a second tensor's axes",
    )
)

__all__ = ["collapse_sum", "reshape_like_shape"]
