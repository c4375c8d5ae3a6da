"""Reductions (`sum`, `mean`, `max`, `prod`, `all`, `argmax`, `variance` …); the scan and sorting
ops (`cumsum`, `argsort`, `topk`) live in `reduce_sort`.

All reductions share Relay's axis convention: `axis=None` reduces every axis, an int one axis, a
list several; `keepdims` keeps reduced axes as extent 1; `exclude` reduces every axis *not* listed.
`argmax`/`argmin` over several axes return the index into those axes flattened in row-major order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr
from autorelay.ir.types import TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.elemwise import BOOL, NUMERIC, check_dtype, scalar_like, sum_to
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import fmt_shape, normalize_axes, prod, tensor_arg
from autorelay.te import expr as E
from autorelay.te import tensor as te

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


def _arg_compute(combiner: str):
    """argmax/argmin without a two-value (value, index) reduction, which the schedule layer lacks:
    first the extremum `m`, then the smallest (largest with `select_last_index`) flat index over
    the reduced axes whose element equals `m`. Two passes over the data, but exact on ties. A NaN
    makes `m` NaN (float max and min propagate it, as NumPy's do), and then the index is the first
    NaN's, as NumPy's argmax and argmin answer."""

    def compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
        x = inputs[0]
        axes = reduced_axes("arg_reduce", attrs, x.ndim)
        keep = bool(attrs["keepdims"])
        shape = tc.out_shape(out_type)
        best = tc.reduction(x, combiner, axes, keep, TensorType(shape, x.dtype), name="arg_best")
        raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
        last = bool(attrs["select_last_index"])
        size = 1
        for a in axes:
            size *= x.shape[a]

        def fn(*idx: E.Expr) -> E.Expr:
            it, src = iter(idx), []
            for d in range(x.ndim):
                if d in raxes:
                    if keep:
                        next(it)
                    src.append(raxes[d].var)
                else:
                    src.append(next(it))
            flat = E.cast(tc.row_major([raxes[a].var for a in axes], [x.shape[a] for a in axes]), "int32")
            value, extremum = x[tuple(src)], best[tuple(idx)] if shape else best[()]
            hit = E.compare("eq", value, extremum)
            if E.is_float(x.dtype):  # a NaN is the extremum (it propagates), and the first NaN its index
                nan_pair = E.binary("and", E.compare("ne", value, value), E.compare("ne", extremum, extremum))
                hit = E.binary("or", hit, nan_pair)
            if last:
                return te.max(E.select(hit, flat, E.const(-1, "int32")), list(raxes.values()))
            return te.min(E.select(hit, flat, E.const(size, "int32")), list(raxes.values()))

        if not shape:
            acc = te.compute((1,), lambda i0: fn(), name="arg_index_acc", tag="reduce")
            return te.compute((), lambda: acc[0], name="arg_index")
        return te.compute(shape, fn, name="arg_index", tag="reduce")

    return compute


_TE = {
    "argmax": _arg_compute("max"),
    "argmin": _arg_compute("min"),
    "prod": _reduce_compute("prod"),
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


__all__ = ["REDUCE_ATTRS", "expand_reduced", "reduce_shape", "reduced_axes"]
