"""Reductions (`sum`, `mean`, `max`, `argmax`, `variance` …), scans (`cumsum`) and sorting
(`argsort`, `topk`).

All reductions share Relay's axis convention: `axis=None` reduces every axis, an int one axis, a
list several; `keepdims` keeps reduced axes as extent 1; `exclude` reduces every axis *not* listed.
`argmax`/`argmin` over several axes return the index into those axes flattened in row-major order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, TupleGetItem
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.op import te_compute as tc
from autorelay.op.elemwise import ANY_DTYPE, BOOL, INT, NUMERIC, check_dtype, scalar_like, sum_to
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import ANY, fmt_shape, normalize_axes, normalize_axis, prod, tensor_arg
from autorelay.te import expr as E

# ---- tensor computes (looked up by name when each OpDef below is registered) --------------------


def _reduce_compute(combiner: str, floats_only: bool = False, mean: bool = False, boolean: bool = False):
    def compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
        x = inputs[0]
        if floats_only and not E.is_float(x.dtype):
            raise tc.Unsupported(f"dtype {x.dtype}: the compute is for floats")
        axes = reduced_axes("reduce", attrs, x.ndim)
        keep = bool(attrs["keepdims"])
        if boolean:  # all/any: min/max of the truth values as int8
            xi = tc.map_tensor(x, lambda v: E.cast(v, "int8"), "as_int8")
            as_int8 = TensorType(tc.out_shape(out_type), "int8")
            red = tc.reduction(xi, combiner, axes, keep, as_int8, name="reduce")
            return tc.map_tensor(red, lambda v: E.compare("ne", v, E.const(0, "int8")), "as_bool")
        red = tc.reduction(x, combiner, axes, keep, out_type, name="reduce")
        if not mean:
            return red
        n = 1
        for a in axes:
            n *= x.shape[a]
        return tc.map_tensor(red, lambda v: v * E.const(1.0 / n, x.dtype), "mean")

    return compute


def _variance_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x, m = inputs
    if not E.is_float(x.dtype):
        raise tc.Unsupported(f"dtype {x.dtype}: the compute is for floats")
    axes = reduced_axes("variance", attrs, x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    keep = bool(attrs["keepdims"])
    # m has the kept-dims shape: read it at the reduced element's position with reduced axes at 0
    red = tc.reduction(x, "sum", axes, keep, out_type, name="variance_sum",
                       body=lambda v, i: _sq(v - _mean_at(m, x.ndim, axes, keep, i)))
    div = n - 1 if attrs["unbiased"] else n
    return tc.map_tensor(red, lambda v: v * E.const(1.0 / max(div, 1), x.dtype), "variance")


def _sq(v: E.Expr) -> E.Expr:
    return v * v


def _mean_at(m: object, ndim: int, axes: list[int], keep: bool, out_idx: tuple) -> E.Expr:
    it = iter(out_idx)
    full = []
    for d in range(ndim):
        if d in axes:
            if keep:
                next(it)
            full.append(0)
        else:
            full.append(next(it))
    return tc.bcast_read(m, full)  # type: ignore[arg-type]


_TE = {
    "sum": _reduce_compute("sum"),
    "max": _reduce_compute("max"),
    "min": _reduce_compute("min"),
    "mean": _reduce_compute("sum", floats_only=True, mean=True),
    "all": _reduce_compute("min", boolean=True),
    "any": _reduce_compute("max", boolean=True),
    "variance": _variance_compute,
}

REDUCE_ATTRS = {"axis": None, "keepdims": False, "exclude": False}


def reduced_axes(op: str, attrs: Attrs, ndim: int) -> list[int]:
    return normalize_axes(op, attrs["axis"], ndim, exclude=bool(attrs["exclude"]))


def reduce_shape(op: str, t: TensorType, attrs: Attrs) -> tuple:
    axes = reduced_axes(op, attrs, t.ndim)
    if attrs["keepdims"]:
        return tuple(1 if i in axes else d for i, d in enumerate(t.shape))
    return tuple(d for i, d in enumerate(t.shape) if i not in axes)


def expand_reduced(g: Expr, axes: list[int], keepdims: bool) -> Expr:
    """Re-insert reduced axes (as extent 1) into a reduction's output gradient."""
    if keepdims:
        return g
    for a in sorted(axes):
        g = call("expand_dims", g, axis=a)
    return g


def _count(x: Expr, axes: list[int]) -> Expr:
    """The number of reduced elements, as a scalar of x's dtype; static when the shape is."""
    n = prod(x.checked_type.shape[a] for a in axes)
    if n is not None:
        return scalar_like(x, float(n))
    # Shape-polymorphic fallback: count at run time (kept dims so it broadcasts against x).
    return call("sum", call("ones_like", x), axis=axes, keepdims=True)


# ---- value reductions -----------------------------------------------------------------------

GradRule = Callable[[Call, Expr], list[Expr]]


def _sum_grad(c: Call, g: Expr) -> list[Expr]:
    x = c.args[0]
    axes = reduced_axes(c.op.name, c.attrs, x.checked_type.ndim)  # type: ignore[union-attr]
    return [call("broadcast_to_like", expand_reduced(g, axes, c.attrs["keepdims"]), x)]


def _mean_grad(c: Call, g: Expr) -> list[Expr]:
    x = c.args[0]
    axes = reduced_axes("mean", c.attrs, x.checked_type.ndim)
    [gx] = _sum_grad(c, g)
    return [call("divide", gx, _count(x, axes))]


def _extremum_grad(c: Call, g: Expr) -> list[Expr]:
    # The gradient flows to every element equal to the extremum (Relay's convention on ties).
    x = c.args[0]
    axes = reduced_axes(c.op.name, c.attrs, x.checked_type.ndim)  # type: ignore[union-attr]
    keep = c.attrs["keepdims"]
    out_b = call("broadcast_to_like", expand_reduced(c, axes, keep), x)
    g_b = call("broadcast_to_like", expand_reduced(g, axes, keep), x)
    return [call("where", call("equal", x, out_b), g_b, call("zeros_like", g_b))]


def _prod_grad(c: Call, g: Expr) -> list[Expr]:
    # d prod / d x_i = prod / x_i (undefined at zeros, like Relay's rule).
    x = c.args[0]
    axes = reduced_axes("prod", c.attrs, x.checked_type.ndim)
    keep = c.attrs["keepdims"]
    gy = call("multiply", expand_reduced(g, axes, keep), expand_reduced(c, axes, keep))
    return [call("divide", call("broadcast_to_like", gy, x), x)]


def _make_reduce(name: str, fn: Callable, dtypes: tuple[str, ...], grad: GradRule | None) -> None:
    def type_rel(arg_types: list[Type], attrs: Attrs) -> Type:
        t = tensor_arg(name, arg_types, 0, "data")
        check_dtype(name, t, dtypes, "data")
        return TensorType(reduce_shape(name, t, attrs), t.dtype)

    def reference(attrs: Attrs, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        axes = tuple(reduced_axes(name, attrs, x.ndim))
        if any(x.shape[a] == 0 for a in axes) and name in ("max", "min"):
            raise ValueError(f"{name}: cannot reduce over an empty axis (shape {x.shape})")
        out = fn(x, axis=axes, keepdims=bool(attrs["keepdims"]))
        return np.asarray(out).astype(x.dtype)

    register(
        OpDef(
            name=name,
            compute=_TE.get(name),
            arg_names=("data",),
            type_rel=type_rel,
            pattern=OpPattern.COMM_REDUCE,
            attrs=dict(REDUCE_ATTRS),
            reference=reference,
            gradient=grad,
            doc=f"{name} over axes",
        )
    )


def _int_mean(x: np.ndarray, axis: tuple, keepdims: bool) -> np.ndarray:
    # Integer mean stays integer: the sum divided by the count, truncated toward zero (Relay
    # divides the integer sum by the count), computed exactly in int64.
    if x.dtype.kind in "iu":
        n = max(int(np.prod([x.shape[a] for a in axis])) if axis else 1, 1)
        s = np.sum(x, axis=axis, keepdims=keepdims, dtype=np.int64)
        return (np.sign(s) * (np.abs(s) // n)).astype(x.dtype)
    return np.mean(x, axis=axis, keepdims=keepdims)


_make_reduce("sum", np.sum, NUMERIC, _sum_grad)
_make_reduce("mean", _int_mean, NUMERIC, _mean_grad)
_make_reduce("max", np.max, NUMERIC, _extremum_grad)
_make_reduce("min", np.min, NUMERIC, _extremum_grad)
_make_reduce("prod", np.prod, NUMERIC, _prod_grad)
_make_reduce("all", np.all, BOOL, None)
_make_reduce("any", np.any, BOOL, None)


# ---- argmax / argmin ------------------------------------------------------------------------


def _arg_reduce_ref(name: str, fn: Callable) -> Callable:
    def reference(attrs: Attrs, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        axes = reduced_axes(name, attrs, x.ndim)
        if any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"{name}: cannot reduce over an empty axis (shape {x.shape})")
        rest = [i for i in range(x.ndim) if i not in axes]
        moved = np.transpose(x, rest + axes)
        flat = moved.reshape(moved.shape[: len(rest)] + (-1,))
        if attrs["select_last_index"]:
            n = flat.shape[-1]
            idx = n - 1 - fn(flat[..., ::-1], axis=-1)
        else:
            idx = fn(flat, axis=-1)
        if attrs["keepdims"]:
            idx = np.expand_dims(idx, tuple(axes))
        return np.asarray(idx, dtype="int32")

    return reference


def _make_arg_reduce(name: str, fn: Callable) -> None:
    def type_rel(arg_types: list[Type], attrs: Attrs) -> Type:
        t = tensor_arg(name, arg_types, 0, "data")
        check_dtype(name, t, NUMERIC, "data")
        return TensorType(reduce_shape(name, t, attrs), "int32")

    register(
        OpDef(
            name=name,
            compute=_TE.get(name),
            arg_names=("data",),
            type_rel=type_rel,
            pattern=OpPattern.COMM_REDUCE,
            attrs={**REDUCE_ATTRS, "select_last_index": False},
            reference=_arg_reduce_ref(name, fn),
            doc=f"{name} over axes (int32 indices; first occurrence unless select_last_index)",
        )
    )


_make_arg_reduce("argmax", np.argmax)
_make_arg_reduce("argmin", np.argmin)


# ---- variance -------------------------------------------------------------------------------


def _variance_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("variance", arg_types, 0, "data")
    mean = tensor_arg("variance", arg_types, 1, "mean")
    check_dtype("variance", data, ("float16", "float32", "float64"), "data")
    if mean.dtype != data.dtype:
        raise rel_error("variance", f"mean has dtype {mean.dtype} but data has dtype {data.dtype}")
    keep = attrs.replace(keepdims=True)
    expected = reduce_shape("variance", data, keep)
    if mean.ndim != data.ndim or any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(mean.shape, expected)
    ):
        raise rel_error(
            "variance",
            f"mean of shape {fmt_shape(mean.shape)} must have the reduced shape {fmt_shape(expected)} "
            f"of data {fmt_shape(data.shape)} with kept dims",
        )
    return TensorType(reduce_shape("variance", data, attrs), data.dtype)


def _variance_ref(attrs: Attrs, x: np.ndarray, m: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    axes = tuple(reduced_axes("variance", attrs, x.ndim))
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    sq = np.sum((x - m) ** 2, axis=axes, keepdims=bool(attrs["keepdims"]))
    return np.asarray(sq / (n - 1 if attrs["unbiased"] else n)).astype(x.dtype)


def _variance_grad(c: Call, g: Expr) -> list[Expr]:
    x, m = c.args
    axes = reduced_axes("variance", c.attrs, x.checked_type.ndim)
    n = _count(x, axes)
    if c.attrs["unbiased"]:
        n = call("subtract", n, scalar_like(x, 1.0))
    diff = call("subtract", x, m)
    g_b = call("broadcast_to_like", expand_reduced(g, axes, c.attrs["keepdims"]), x)
    gx = call("divide", call("multiply", call("multiply", g_b, scalar_like(x, 2.0)), diff), n)
    return [gx, sum_to(call("negative", gx), m)]


register(
    OpDef(
        name="variance",
        compute=_TE.get("variance"),
        arg_names=("data", "mean"),
        type_rel=_variance_rel,
        pattern=OpPattern.COMM_REDUCE,
        attrs={**REDUCE_ATTRS, "unbiased": False},
        reference=_variance_ref,
        gradient=_variance_grad,
        doc="mean squared deviation from a given mean (kept-dims shape), as Relay's `variance`",
    )
)


# ---- cumsum ---------------------------------------------------------------------------------


def _cumsum_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("cumsum", arg_types, 0, "data")
    check_dtype("cumsum", t, ANY_DTYPE, "data")
    dtype = attrs["dtype"] or t.dtype
    if attrs["axis"] is None:
        n = prod(t.shape)
        return TensorType((n if n is not None else ANY,), dtype)
    normalize_axis("cumsum", attrs["axis"], t.ndim)
    return TensorType(t.shape, dtype)


def _cumsum_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    dtype = attrs["dtype"] or x.dtype
    axis = attrs["axis"]
    if axis is None:
        x, axis = x.reshape(-1), 0
    out = np.cumsum(x, axis=axis, dtype=dtype)
    if attrs["exclusive"]:
        out = out - x.astype(dtype)
    return np.asarray(out, dtype=dtype)


def _cumsum_grad(c: Call, g: Expr) -> list[Expr]:
    # The adjoint of an inclusive prefix sum is a suffix sum: reverse, prefix-sum, reverse.
    x = c.args[0]
    axis = 0 if c.attrs["axis"] is None else c.attrs["axis"]
    rev = call("reverse", g, axis=axis)
    gx = call("reverse", call("cumsum", rev, axis=axis, exclusive=c.attrs["exclusive"]), axis=axis)
    return [call("reshape_like", call("cast_like", gx, x), x)]


register(
    OpDef(
        name="cumsum",
        compute=_TE.get("cumsum"),
        arg_names=("data",),
        type_rel=_cumsum_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"axis": None, "dtype": None, "exclusive": False},
        normalize_attrs=lambda a: {**a, "exclusive": bool(a["exclusive"])},
        reference=_cumsum_ref,
        gradient=_cumsum_grad,
        doc="prefix sum along axis (flattened when axis is None); exclusive omits the element itself",
    )
)


# ---- argsort / topk -------------------------------------------------------------------------


def sort_indices(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Stable sort order: equal elements keep their original order in both directions."""
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


def _argsort_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("argsort", arg_types, 0, "data")
    normalize_axis("argsort", attrs["axis"], t.ndim)
    check_dtype("argsort", TensorType((), attrs["dtype"]), INT, "dtype attribute")
    return TensorType(t.shape, attrs["dtype"])


register(
    OpDef(
        name="argsort",
        compute=_TE.get("argsort"),
        arg_names=("data",),
        type_rel=_argsort_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"axis": -1, "is_ascend": True, "dtype": "int32"},
        reference=lambda attrs, x: sort_indices(np.asarray(x), attrs["axis"], attrs["is_ascend"]).astype(
            attrs["dtype"]
        ),
        doc="indices that sort data along axis (stable)",
    )
)


def _topk_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("topk", arg_types, 0, "data")
    axis = normalize_axis("topk", attrs["axis"], t.ndim)
    k = attrs["k"]
    n = t.shape[axis]
    if isinstance(n, int) and k > n:
        raise rel_error("topk", f"k={k} exceeds extent {n} of axis {axis} of data {fmt_shape(t.shape)}")
    kk = n if k is None or k < 1 else k
    shape = t.shape[:axis] + (kk,) + t.shape[axis + 1 :]
    values, indices = TensorType(shape, t.dtype), TensorType(shape, attrs["dtype"])
    ret = attrs["ret_type"]
    if ret == "both":
        return TupleType((values, indices))
    if ret == "values":
        return values
    if ret == "indices":
        return indices
    raise rel_error("topk", f"ret_type must be 'both', 'values' or 'indices', got {ret!r}")


def _topk_ref(attrs: Attrs, x: np.ndarray):
    x = np.asarray(x)
    axis = attrs["axis"] % x.ndim
    k = attrs["k"]
    k = x.shape[axis] if k is None or k < 1 else k
    idx = np.take(sort_indices(x, axis, attrs["is_ascend"]), np.arange(k), axis=axis)
    values = np.take_along_axis(x, idx, axis=axis)
    indices = idx.astype(attrs["dtype"])
    return {"both": (values, indices), "values": values, "indices": indices}[attrs["ret_type"]]


def _topk_grad(c: Call, g: Expr) -> list[Expr]:
    # Scatter the values' gradient back through one_hot(indices): sum_k g[.., k, ..] * [idx_k == j].
    x = c.args[0]
    xt = x.checked_type
    axis = c.attrs["axis"] % xt.ndim
    n = xt.shape[axis]
    if c.attrs["ret_type"] == "indices":
        return [call("zeros_like", x)]
    if not isinstance(n, int):
        raise rel_error("topk", f"gradient needs a static axis {axis}; data is {fmt_shape(xt.shape)}")
    both = call("topk", x, **{**dict(c.attrs), "ret_type": "both"})
    indices = TupleGetItem(both, 1)
    g_values = TupleGetItem(g, 0) if c.attrs["ret_type"] == "both" else g
    hot = call(
        "one_hot", indices, scalar_like(x, 1.0), scalar_like(x, 0.0), depth=n, axis=axis + 1, dtype=xt.dtype
    )
    scattered = call("multiply", call("expand_dims", g_values, axis=axis + 1), hot)
    return [call("sum", scattered, axis=axis)]


register(
    OpDef(
        name="topk",
        compute=_TE.get("topk"),
        arg_names=("data",),
        type_rel=_topk_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"k": 1, "axis": -1, "ret_type": "both", "is_ascend": False, "dtype": "int32"},
        reference=_topk_ref,
        gradient=_topk_grad,
        doc="the k largest (or smallest) elements along axis and their indices; k < 1 means all",
    )
)

__all__ = ["REDUCE_ATTRS", "expand_reduced", "reduce_shape", "reduced_axes", "sort_indices"]
