"""Selection, casting and constant filling: `where`, `cast`, `cast_like`, `reinterpret`, `clip`,
`zeros`/`ones`/`full`/`full_like`. Broadcasting to a shape (`broadcast_to`) and the
shape-polymorphic ops that gradient rules rely on live in `broadcast_like`.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import DTYPES, TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.elemwise import NUMERIC, check_dtype, scalar_like, sum_to
from autorelay.op.registry import REQUIRED, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import broadcast_shapes, fmt_shape, tensor_arg
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


_TE = {
    "where": lambda ins, a, t: tc.bcast_map(_where, ins, t, "where"),
    "cast": _cast_compute,
    "cast_like": _cast_compute,
    "reinterpret": lambda ins, a, t: tc.bcast_map(lambda x: E.reinterpret(x, a["dtype"]), ins, t,
                                                  "reinterpret"),
    "clip": lambda ins, a, t: tc.bcast_map(lambda x: E.minimum(E.maximum(x, E.const(a["a_min"], x.dtype)),
                                                               E.const(a["a_max"], x.dtype)), ins, t, "clip"),
    "zeros": _fill(lambda ins, dt: E.const(0, dt)),
    "ones": _fill(lambda ins, dt: E.const(1, dt)),
    "full": _fill(lambda ins, dt: _scalar_read(ins[0], dt)),
    "full_like": _fill(lambda ins, dt: _scalar_read(ins[1], dt)),
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


# ---- reinterpret ----------------------------------------------------------------------------


def _reinterpret_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("reinterpret", arg_types, 0, "data")
    dtype = _check_dtype_attr("reinterpret", attrs["dtype"])
    why = E.reinterpret_mismatch(t.dtype, dtype)
    if why:
        raise rel_error("reinterpret", why)
    return TensorType(t.shape, dtype)


register(
    OpDef(
        name="reinterpret",
        compute=_TE.get("reinterpret"),
        arg_names=("data",),
        type_rel=_reinterpret_rel,
        pattern=OpPattern.ELEMWISE,
        attrs={"dtype": REQUIRED},
        reference=lambda attrs, x: np.array(x, order="C").view(attrs["dtype"]),
        doc="read each element's bits as another element type of the same width (ONNX BitCast, "
            "NumPy's view): no value conversion",
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


def static_shape_attr(op: str, shape: object) -> tuple[int, ...]:
    """A `shape=` attribute as a tuple of non-negative ints, or an error naming the op."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)  # type: ignore[arg-type]
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise rel_error(op, f"shape={dims} must be a list of non-negative integers")
    return dims


def _make_constant_op(name: str, value: float) -> None:
    def type_rel(arg_types: list[Type], attrs: Attrs) -> Type:
        return TensorType(static_shape_attr(name, attrs["shape"]), _check_dtype_attr(name, attrs["dtype"]))

    register(
        OpDef(
            name=name,
            compute=_TE.get(name),
            arg_names=(),
            type_rel=type_rel,
            pattern=OpPattern.ELEMWISE,
            attrs={"shape": REQUIRED, "dtype": "float32"},
            reference=lambda attrs: np.full(static_shape_attr(name, attrs["shape"]), value, attrs["dtype"]),
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
    return TensorType(static_shape_attr("full", attrs["shape"]), _check_dtype_attr("full", dtype))


def _full_ref(attrs: Attrs, fill: np.ndarray) -> np.ndarray:
    fill = np.asarray(fill)
    shape = static_shape_attr("full", attrs["shape"])
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


__all__ = ["static_shape_attr"]
