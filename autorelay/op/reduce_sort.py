"""Scans and sorting along an axis: `cumsum`, `argsort`, `topk`.

Unlike the reductions in `reduce`, these keep (or reorder) the reduced axis, so their results are
order-dependent and opaque to fusion. `cumsum` has a tensor compute (a blocked scan,
`prefix_scan`); `argsort` and `topk` have none, so a build runs them through their NumPy
references (reported as a fallback). Sorting is stable in both directions, so ties keep their
original order, as Relay's `argsort` does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, TupleGetItem
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.op.elemwise import ANY_DTYPE, INT, check_dtype, scalar_like
from autorelay.op.registry import OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import ANY, fmt_shape, normalize_axis, prod, tensor_arg

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


# Positions per block of a blocked scan: each output sums at most this many inputs of its block,
# and its block's carry is the exclusive scan of one total per block (blocked again if long).
SCAN_BLOCK = 32


def _cumsum_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    """A prefix sum along the axis (of the flattened data when axis is None), as `prefix_scan`."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E

    x = inputs[0]
    shape, dtype = tc.out_shape(out_type), tc.out_dtype(out_type)
    if dtype == "bool":
        raise tc.Unsupported("a bool prefix sum has no compute")
    if attrs["axis"] is None:
        def read(idx: tuple) -> E.Expr:
            return E.cast(x[tuple(tc.unflatten(idx[0], x.shape))] if x.ndim else x[()], dtype)
        axis = 0
    else:
        def read(idx: tuple) -> E.Expr:
            return E.cast(x[idx], dtype)
        axis = normalize_axis("cumsum", attrs["axis"], x.ndim)
    return prefix_scan(tuple(shape), axis, read, dtype, attrs["exclusive"], "cumsum")


def prefix_scan(shape: tuple[int, ...], axis: int, read: Callable[[tuple], object], dtype: str,
                exclusive: bool, name: str) -> object:
    """Sums along `axis` of `read(index)` up to each position (before it when `exclusive`).

    Why blocked: the tensor language has no sequential loop, so a position sums its prefix as a
    masked reduction, and over the whole axis that is quadratic (a detector's NonZero scans
    hundreds of thousands of anchor scores: hours). In blocks of `SCAN_BLOCK`, a position sums
    only its own block's prefix, plus a carry: the exclusive scan of the block totals, which is
    itself blocked when long. About (SCAN_BLOCK + 2) reads per position, whatever the length;
    float sums are grouped by block, so they may differ from a sequential sum by rounding."""
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    n, b, zero = shape[axis], SCAN_BLOCK, E.const(0, dtype)

    def at(idx: tuple, pos: E.Expr) -> tuple:
        return tuple(pos if d == axis else i for d, i in enumerate(idx))

    if n <= 2 * b:  # short: each position sums its prefix directly
        k = te.reduce_axis(n, "k")

        def direct(*idx: E.Expr) -> E.Expr:
            keep = k.var < idx[axis] if exclusive else k.var <= idx[axis]
            return te.sum(E.select(keep, read(at(idx, k.var)), zero), k)

        return te.compute(shape, direct, name=name, tag="reduce")
    k, kb = te.reduce_axis(b, "k"), te.reduce_axis(b, "kb")

    def in_block(*idx: E.Expr) -> E.Expr:  # the prefix within the position's block
        i = idx[axis]
        keep = k.var < i % b if exclusive else k.var <= i % b
        return te.sum(E.select(keep, read(at(idx, E.minimum(i // b * b + k.var, n - 1))), zero), k)

    def block_total(*idx: E.Expr) -> E.Expr:
        pos = idx[axis] * b + kb.var
        return te.sum(E.select(pos < n, read(at(idx, E.minimum(pos, n - 1))), zero), kb)

    local = te.compute(shape, in_block, name=f"{name}_local", tag="reduce")
    totals = te.compute(at(shape, -(-n // b)), block_total, name=f"{name}_blocks", tag="reduce")
    carry = prefix_scan(totals.shape, axis, lambda idx: totals[idx], dtype, True, f"{name}_carry")
    return te.compute(shape, lambda *idx: local[idx] + carry[at(idx, idx[axis] // b)], name=name)


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
        arg_names=("data",),
        type_rel=_cumsum_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"axis": None, "dtype": None, "exclusive": False},
        normalize_attrs=lambda a: {**a, "exclusive": bool(a["exclusive"])},
        reference=_cumsum_ref,
        gradient=_cumsum_grad,
        compute=_cumsum_compute,
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
        arg_names=("data",),
        type_rel=_topk_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"k": 1, "axis": -1, "ret_type": "both", "is_ascend": False, "dtype": "int32"},
        reference=_topk_ref,
        gradient=_topk_grad,
        doc="the k largest (or smallest) elements along axis and their indices; k < 1 means all",
    )
)

__all__ = ["sort_indices"]
