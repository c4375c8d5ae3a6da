"""Indexing ops: `strided_slice`, `take`, `gather`, `one_hot`.

Their gradients scatter an output gradient back into the input's shape. The rules express that
scatter with ops that are differentiable again: `take` over a zero-padded copy (strided_slice) or
a product with `one_hot` masks summed over the index axes (take, gather); `scatter_elements`
(`op.scatter`) has no gradient of its own.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, Tuple, const
from autorelay.ir.types import Dim, TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.elemwise import INT, check_dtype, scalar_like
from autorelay.op.registry import REQUIRED, OpPattern, call, rel_error
from autorelay.op.shape_utils import ANY, fmt_shape, is_static_shape, normalize_axis, tensor_arg
from autorelay.op.transform import COMPUTES, as_tuple, reg
from autorelay.te import expr as E

_BIG = 2**31 - 1  # importers write INT_MAX for "to the end"


# ---- strided_slice --------------------------------------------------------------------------


def slice_plan(op: str, shape: tuple, attrs: Attrs) -> dict[int, tuple[int, int | None, int]]:
    """axis -> (begin, end, stride) for each sliced axis, in Python slice semantics (negative
    indices count from the end; out-of-range bounds clamp; `end=None` means to the end)."""
    begin, end = as_tuple(attrs["begin"]), as_tuple(attrs["end"])
    strides = as_tuple(attrs["strides"]) if attrs["strides"] is not None else ()
    axes = as_tuple(attrs["axes"]) if attrs["axes"] is not None else tuple(range(len(begin)))
    if len(end) != len(begin) or len(axes) != len(begin) or len(strides) > len(begin):
        raise rel_error(op, f"begin={begin}, end={end}, strides={strides}, axes={axes} must have one entry "
                        "per sliced axis")
    plan: dict[int, tuple[int, int | None, int]] = {}
    for k, a in enumerate(axes):
        axis = normalize_axis(op, a, len(shape), "axes")
        b, e = begin[k], end[k]
        s = strides[k] if k < len(strides) else 1
        if attrs["slice_mode"] == "size":
            e, s = (None if e < 0 else b + e), 1
        elif attrs["slice_mode"] != "end":
            raise rel_error(op, f"slice_mode must be 'end' or 'size', got {attrs['slice_mode']!r}")
        if s == 0:
            raise rel_error(op, f"stride 0 on axis {axis} (data {fmt_shape(shape)})")
        plan[axis] = (b, e, s)
    return plan


def _slice_extent(d: Dim, b: int, e: int | None, s: int) -> Dim:
    if isinstance(d, int):
        return len(range(*slice(b, e, s).indices(d)))
    if b == 0 and s == 1 and (e is None or e >= _BIG):
        return d
    return ANY


# ---- tensor computes (registered through transform.COMPUTES by `reg`) ---------------------------


def _strided_slice_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x = inputs[0]
    plan = slice_plan("strided_slice", x.shape, attrs)
    first = {ax: (range(x.shape[ax])[slice(*p)].start if len(range(x.shape[ax])[slice(*p)]) else 0, p[2] or 1)
             for ax, p in plan.items()}
    return tc.index_map(x, out_type, lambda *i: [
        first[d][0] + v * first[d][1] if d in first else v for d, v in enumerate(i)], "strided_slice")


def _take_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x, ind = inputs
    mode = attrs["mode"]

    def fix(v: E.Expr, n: int) -> E.Expr:
        v = E.cast(v, "int64")
        return v % n if mode == "wrap" else E.maximum(E.minimum(v, n - 1), 0)

    if attrs["axis"] is None:
        size = 1
        for d in x.shape:
            size *= d
        return tc.index_map(x, out_type, lambda *i: tc.unflatten(fix(ind[i] if ind.ndim else ind[()], size),
                                                                   x.shape), "take")
    axis = normalize_axis("take", attrs["axis"], x.ndim)
    k = ind.ndim

    def src(*i: E.Expr) -> list:
        pos = fix(ind[tuple(i[axis : axis + k])] if k else ind[()], x.shape[axis])
        return [*i[:axis], pos, *i[axis + k :]]

    return tc.index_map(x, out_type, src, "take")


def _gather_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x, ind = inputs
    axis = normalize_axis("gather", attrs["axis"], x.ndim)
    n = x.shape[axis]

    def src(*i: E.Expr) -> list:
        v = E.cast(ind[i], "int64")
        v = E.maximum(E.minimum(E.select(v < 0, v + n, v), n - 1), 0)  # NumPy's negative indices
        return [v if d == axis else u for d, u in enumerate(i)]

    return tc.index_map(x, out_type, src, "gather")


def _one_hot_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    ind, on, off = inputs
    dtype = tc.out_dtype(out_type)
    axis = normalize_axis("one_hot", attrs["axis"], ind.ndim, extra=1)

    def body(*i: E.Expr) -> E.Expr:
        hit = E.compare("eq", E.cast(ind[i[:axis] + i[axis + 1 :]], "int64"), i[axis])
        return E.select(hit, E.cast(on[()], dtype), E.cast(off[()], dtype))

    return tc.compute0(tc.out_shape(out_type), body, "one_hot", tag="injective")


COMPUTES.update({"strided_slice": _strided_slice_compute, "take": _take_compute, "gather": _gather_compute,
                 "one_hot": _one_hot_compute})


def _strided_slice_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    t = tensor_arg("strided_slice", arg_types, 0, "data")
    plan = slice_plan("strided_slice", t.shape, attrs)
    shape = tuple(_slice_extent(d, *plan[i]) if i in plan else d for i, d in enumerate(t.shape))
    return TensorType(shape, t.dtype)


def _strided_slice_ref(attrs: Attrs, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    plan = slice_plan("strided_slice", x.shape, attrs)
    index = tuple(slice(*plan[i]) if i in plan else slice(None) for i in range(x.ndim))
    return x[index].copy()


def _strided_slice_grad(c: Call, g: Expr) -> list[Expr]:
    # Per sliced axis: append one zero slice to g, then `take` maps each input position to its
    # position in g, or to the zero slot when the slice skipped it.
    x = c.args[0]
    shape = x.checked_type.shape
    for axis, (b, e, s) in sorted(slice_plan("strided_slice", shape, c.attrs).items()):
        n = shape[axis]
        if not isinstance(n, int):
            raise rel_error("strided_slice", f"gradient needs static axis {axis}: data {fmt_shape(shape)}")
        selected = list(range(n))[slice(b, e, s)]
        if selected == list(range(n)):
            continue
        if not selected:
            return [call("zeros_like", x)]
        position = {j: k for k, j in enumerate(selected)}
        index = const(np.array([position.get(j, len(selected)) for j in range(n)], dtype="int32"))
        zero_slot = call("zeros_like", call("take", g, const(np.array([0], "int32")), axis=axis))
        padded = call("concatenate", Tuple((g, zero_slot)), axis=axis)
        g = call("take", padded, index, axis=axis)
    return [g]


reg("strided_slice", ("data",), _strided_slice_rel, _strided_slice_ref, grad=_strided_slice_grad,
    attrs={"begin": REQUIRED, "end": REQUIRED, "strides": None, "axes": None, "slice_mode": "end"},
    doc="NumPy-style basic slicing of the listed axes (all leading axes when axes is None)")


# ---- take -----------------------------------------------------------------------------------


def _take_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("take", arg_types, 0, "data")
    ind = tensor_arg("take", arg_types, 1, "indices")
    check_dtype("take", ind, INT, "indices")
    if attrs["batch_dims"] != 0:
        raise rel_error("take", f"batch_dims={attrs['batch_dims']} is not supported (only 0)")
    if attrs["mode"] not in ("clip", "wrap", "fast"):
        raise rel_error("take", f"mode must be 'clip', 'wrap' or 'fast', got {attrs['mode']!r}")
    if attrs["axis"] is None:
        return TensorType(ind.shape, data.dtype)
    axis = normalize_axis("take", attrs["axis"], data.ndim)
    return TensorType(data.shape[:axis] + ind.shape + data.shape[axis + 1 :], data.dtype)


def _take_ref(attrs: Attrs, x: np.ndarray, ind: np.ndarray) -> np.ndarray:
    """The oracle: `fast` promises indices in [0, n), which the kernels clamp to stay in bounds
    rather than check; a program that breaks the promise is refused here, not given an answer the
    kernels would not give (NumPy's `raise` mode would wrap a negative index)."""
    x, ind = np.asarray(x), np.asarray(ind)
    mode = {"clip": "clip", "wrap": "wrap", "fast": "raise"}[attrs["mode"]]
    axis = None if attrs["axis"] is None else normalize_axis("take", attrs["axis"], x.ndim)
    extent = x.size if axis is None else x.shape[axis]
    if attrs["mode"] == "fast" and ind.size and (ind.min() < 0 or ind.max() >= extent):
        bad = int(ind.min()) if ind.min() < 0 else int(ind.max())
        raise IndexError(f"take: mode 'fast' needs indices in [0, {extent}), got {bad}")
    if axis is None:
        return np.take(x.reshape(-1), ind, mode=mode)
    if x.shape[axis] == 0 and ind.size:
        raise IndexError(f"take: cannot index axis {axis} of extent 0 (data shape {x.shape})")
    return np.take(x, ind, axis=axis, mode=mode)


def _take_grad(c: Call, g: Expr) -> list[Expr]:
    x, ind = c.args
    xt, it = x.checked_type, ind.checked_type
    if not (is_static_shape(xt.shape) and is_static_shape(it.shape)):
        raise rel_error("take", f"gradient needs static shapes; data is {xt}, indices {it}")
    flat = c.attrs["axis"] is None
    shape = (int(np.prod(xt.shape)),) if flat else xt.shape
    axis = 0 if flat else normalize_axis("take", c.attrs["axis"], xt.ndim)
    n, k = shape[axis], int(np.prod(it.shape))
    if c.attrs["mode"] == "clip":
        norm = call("clip", ind, a_min=0, a_max=max(n - 1, 0))
    else:
        norm = call("floor_mod", ind, const(np.array(n, dtype=it.dtype)))
    hot = call("one_hot", norm, scalar_like(c, 1.0), scalar_like(c, 0.0),
               depth=n, axis=-1, dtype=xt.dtype)
    before, after = shape[:axis], shape[axis + 1 :]
    hot = call("reshape", hot, newshape=(k, n) + (1,) * len(after))
    g3 = call("reshape", g, newshape=before + (k, 1) + after)
    gx = call("sum", call("multiply", g3, hot), axis=axis)
    return [call("reshape_like", gx, x), call("zeros_like", ind)]


reg("take", ("data", "indices"), _take_rel, _take_ref, grad=_take_grad,
    attrs={"axis": None, "batch_dims": 0, "mode": "clip"},
    doc="select entries along axis (flattened when None); mode clip/wrap/fast for out-of-range")


# ---- gather ---------------------------------------------------------------------------------


def _gather_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("gather", arg_types, 0, "data")
    ind = tensor_arg("gather", arg_types, 1, "indices")
    check_dtype("gather", ind, INT, "indices")
    normalize_axis("gather", attrs["axis"], data.ndim)
    if ind.ndim != data.ndim:
        raise rel_error("gather", f"indices of shape {fmt_shape(ind.shape)} must have the rank of data "
                        f"{fmt_shape(data.shape)}")
    return TensorType(ind.shape, data.dtype)


def _gather_ref(attrs: Attrs, x: np.ndarray, ind: np.ndarray) -> np.ndarray:
    x, ind = np.asarray(x), np.asarray(ind)
    axis = normalize_axis("gather", attrs["axis"], x.ndim)
    grid = list(np.indices(ind.shape, sparse=True))
    grid[axis] = ind
    return x[tuple(grid)]


def _gather_grad(c: Call, g: Expr) -> list[Expr]:
    x, ind = c.args
    xt, it = x.checked_type, ind.checked_type
    axis = normalize_axis("gather", c.attrs["axis"], xt.ndim)
    same = all(i == axis or a == b for i, (a, b) in enumerate(zip(xt.shape, it.shape)))
    if not (is_static_shape(xt.shape) and same):
        raise rel_error("gather", f"gradient needs static data {xt} and indices {it} equal off axis {axis}")
    norm = call("floor_mod", ind, const(np.array(xt.shape[axis], dtype=it.dtype)))
    hot = call("one_hot", norm, scalar_like(c, 1.0), scalar_like(c, 0.0), depth=xt.shape[axis],
               axis=axis + 1, dtype=xt.dtype)
    gx = call("sum", call("multiply", call("expand_dims", g, axis=axis + 1), hot), axis=axis)
    return [gx, call("zeros_like", ind)]


reg("gather", ("data", "indices"), _gather_rel, _gather_ref, grad=_gather_grad, attrs={"axis": 0},
    doc="out[..i..] = data[..indices[..i..]..] along axis (like numpy take_along_axis)")


# ---- one_hot --------------------------------------------------------------------------------


def _one_hot_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    ind = tensor_arg("one_hot", arg_types, 0, "indices")
    check_dtype("one_hot", ind, INT, "indices")
    for i, name in ((1, "on_value"), (2, "off_value")):
        v = tensor_arg("one_hot", arg_types, i, name)
        if v.ndim != 0:
            raise rel_error("one_hot", f"{name} must be a scalar, got shape {fmt_shape(v.shape)}")
    if attrs["depth"] < 0:
        raise rel_error("one_hot", f"depth={attrs['depth']} must be non-negative")
    axis = normalize_axis("one_hot", attrs["axis"], ind.ndim, extra=1)
    return TensorType(ind.shape[:axis] + (attrs["depth"],) + ind.shape[axis:], attrs["dtype"])


def _one_hot_ref(attrs: Attrs, ind: np.ndarray, on: np.ndarray, off: np.ndarray) -> np.ndarray:
    ind = np.asarray(ind)
    axis = normalize_axis("one_hot", attrs["axis"], ind.ndim, extra=1)
    mask = ind[..., None] == np.arange(attrs["depth"])  # out-of-range indices give an all-off row
    return np.moveaxis(np.where(mask, on, off), -1, axis).astype(attrs["dtype"])


def _one_hot_grad(c: Call, g: Expr) -> list[Expr]:
    ind, on, off = c.args
    one = const(np.array(1, dtype=c.attrs["dtype"]))
    zero = const(np.array(0, dtype=c.attrs["dtype"]))
    mask = call("one_hot", ind, one, zero, **dict(c.attrs))
    g_on = call("sum", call("multiply", g, mask))
    g_off = call("subtract", call("sum", g), g_on)
    return [call("zeros_like", ind), call("cast_like", g_on, on), call("cast_like", g_off, off)]


reg("one_hot", ("indices", "on_value", "off_value"), _one_hot_rel, _one_hot_ref, grad=_one_hot_grad,
    attrs={"depth": REQUIRED, "axis": -1, "dtype": "float32"}, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    doc="on_value where the index matches, off_value elsewhere; a new axis of extent depth")
