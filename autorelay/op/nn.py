"""Dense linear algebra and small structural nn ops: `nn.dense`, `nn.matmul`, `nn.batch_matmul`,
`nn.bias_add`, `nn.batch_flatten`, `nn.dropout`.

Relay's conventions are kept exactly: `nn.dense`'s weight is `(units, in_features)` (the result is
`data @ weight.T`), `nn.batch_matmul` transposes its second operand by default, and `nn.dropout`
returns a `(result, mask)` tuple. Activations live in `nn_activation.py`, normalisations in
`nn_norm.py`, padding and upsampling in `nn_spatial.py`.

Gradient rules are written with the same ops (a dense's input gradient is a matmul) plus the
generic elementwise/reduce/reshape ops, so they stay in the IR and can be optimised like any code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Constant, Expr, TupleGetItem, const
from autorelay.ir.types import AnyDim, IncompleteType, TensorType, TupleType, Type, TypeVar
from autorelay.op import te_compute as tc
from autorelay.op.registry import NotReady, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import (
    dim_known_different,
    fmt_shape,
    merge_dims,
    normalize_axis,
    prod,
    tensor_arg,
)
from autorelay.te import nn as tnn

# ---------------------------------------------------------------------------------------------
# small IR builders shared by the nn gradient rules


def scalar(like: Expr, value: float) -> Constant:
    """A scalar constant of `like`'s (checked) dtype."""
    return const(np.array(value, dtype=like.checked_type.dtype))


def mul(*xs: Expr) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = call("multiply", out, x)
    return out


def static_shape(op: str, e: Expr) -> tuple[int, ...]:
    t = e.checked_type
    if not isinstance(t, TensorType) or not t.is_static:
        raise rel_error(op, f"gradient needs a statically shaped argument, got {t}")
    return t.concrete_shape


def sum_except(g: Expr, axis: int) -> Expr:
    """Sum over every axis but `axis` (how a per-channel parameter collects its gradient)."""
    return call("sum", g, axis=[axis], exclude=True)


def along_axis(v: Expr, axis: int, ndim: int) -> Expr:
    """Reshape a 1-d per-channel tensor so it broadcasts along `axis` of a rank-`ndim` tensor."""
    if axis == ndim - 1:
        return v
    return call("expand_dims", v, axis=1, num_newaxis=ndim - 1 - axis)


def attrs_axis(c: Call, ndim: int) -> int:
    """The call's `axis` attribute as a non-negative axis of a rank-`ndim` argument."""
    return normalize_axis(c.op.name, c.attrs["axis"], ndim)


def channel_vectors(op: str, arg_types: list[Type], names: dict[int, str], data: TensorType,
                    axis: int) -> list[Type] | None:
    """Check per-channel parameters (1-d, extent of `axis`, the data's dtype); infer unknown ones.

    Returns the refined argument types when some parameter was not yet known (as Relay's relations
    assign `gamma`, `bias`, … from the data), else None.
    """
    want = TensorType((data.shape[axis],), data.dtype)
    refined = list(arg_types)
    for i, name in names.items():
        t = arg_types[i]
        if isinstance(t, IncompleteType | TypeVar):
            refined[i] = want
            continue
        t = tensor_arg(op, arg_types, i, name)
        if len(t.shape) != 1 or dim_known_different(t.shape[0], want.shape[0]):
            raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must be ({want.shape[0]},) to match "
                                f"axis {axis} of data of shape {fmt_shape(data.shape)}")
        if t.dtype != data.dtype:
            raise rel_error(op, f"{name} has dtype {t.dtype} but data has dtype {data.dtype}")
    return refined if refined != list(arg_types) else None


def out_dtype_of(op: str, attrs: Attrs, a: TensorType, b: TensorType, names: tuple[str, str]) -> str:
    if attrs["out_dtype"]:
        return attrs["out_dtype"]
    if a.dtype != b.dtype:
        raise rel_error(op, f"{names[0]} has dtype {a.dtype} but {names[1]} has dtype {b.dtype} "
                            f"(shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)}); set out_dtype")
    return a.dtype


def _matmul_np(a: np.ndarray, b: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.matmul(a.astype(dtype, copy=False), b.astype(dtype, copy=False))


# ---------------------------------------------------------------------------------------------
# nn.dense / nn.matmul


def _mm_rel(op: str, arg_types: list[Type], attrs: Attrs, ta: bool, tb: bool) -> Any:
    """`(…, M, K) x (N, K)` style product; infers the second operand from `units` when unknown."""
    a = tensor_arg(op, arg_types, 0, "data" if op == "nn.dense" else "tensor_a")
    bname = "weight" if op == "nn.dense" else "tensor_b"
    if len(a.shape) < 1 or (ta and len(a.shape) != 2):
        raise rel_error(op, f"{'data' if op == 'nn.dense' else 'tensor_a'} of shape {fmt_shape(a.shape)} "
                            f"must have rank {'2 (transpose_a)' if ta else '>= 1'}")
    k = a.shape[0] if ta else a.shape[-1]
    batch = (a.shape[1],) if ta else a.shape[:-1]
    units = attrs["units"]
    b = arg_types[1]
    refined = None
    if isinstance(b, IncompleteType | TypeVar):
        if units is None:
            raise NotReady(f"{op}: {bname} type unknown and units not given")
        refined = TensorType((units, k) if tb else (k, units), a.dtype)
        b = refined
    b = b if isinstance(b, TensorType) else tensor_arg(op, arg_types, 1, bname)
    if len(b.shape) != 2:
        raise rel_error(op, f"{bname} of shape {fmt_shape(b.shape)} must be 2-d")
    n, kb = (b.shape if tb else b.shape[::-1])
    if dim_known_different(k, kb):
        raise rel_error(
            op, f"in_features mismatch: {'data' if op == 'nn.dense' else 'tensor_a'} of shape "
            f"{fmt_shape(a.shape)} has {k} features, {bname} of shape {fmt_shape(b.shape)} has {kb}"
        )
    if units is not None and dim_known_different(n, units):
        raise rel_error(op, f"{bname} of shape {fmt_shape(b.shape)} has {n} units, but units={units}")
    out = TensorType((*batch, merge_dims(n, units) if units is not None else n),
                     out_dtype_of(op, attrs, a, b, ("data", bname)))
    return ([a, refined], out) if refined is not None else out


def _flat2(x: Expr, k: int) -> Expr:
    """A rank > 2 operand viewed as a matrix with `k` columns (batch axes folded into rows)."""
    return x if len(x.checked_type.shape) <= 2 else call("reshape", x, newshape=[-1, k])


def _dense_grad(c: Call, g: Expr) -> list[Expr]:
    x, w = c.args
    units, k = static_shape("nn.dense", w)
    dx = call("nn.matmul", g, w)
    dw = call("nn.matmul", _flat2(g, units), _flat2(x, k), transpose_a=True)
    return [dx, dw]


def _matmul_grad(c: Call, g: Expr) -> list[Expr]:
    a, b = c.args
    ta, tb = c.attrs["transpose_a"], c.attrs["transpose_b"]
    k = static_shape("nn.matmul", a)[0 if ta else -1]
    n = static_shape("nn.matmul", c)[-1]
    if not ta:
        da = call("nn.matmul", g, b, transpose_b=not tb)
        g2, a2 = _flat2(g, n), _flat2(a, k)
        db = call("nn.matmul", *((g2, a2) if tb else (a2, g2)), transpose_a=True)
    elif not tb:
        da = call("nn.matmul", b, g, transpose_b=True)
        db = call("nn.matmul", a, g)
    else:
        da = call("nn.matmul", b, g, transpose_a=True, transpose_b=True)
        db = call("nn.matmul", g, a, transpose_a=True, transpose_b=True)
    return [da, db]


def _mm_ref(ta_key: str | None, tb_default: bool):
    def reference(attrs: Attrs, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ta = attrs[ta_key] if ta_key else False
        tb = attrs.get("transpose_b", tb_default)
        dtype = attrs["out_dtype"] or a.dtype
        return _matmul_np(a.T if ta else a, b.T if tb else b, dtype)

    return reference


def _same_dtype(attrs: Attrs, a: Any) -> None:
    if attrs["out_dtype"] and attrs["out_dtype"] != a.dtype:
        raise tc.Unsupported(f"out_dtype {attrs['out_dtype']} differs from the input dtype {a.dtype}")


def _dense_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    data, weight = inputs
    _same_dtype(attrs, data)
    if data.ndim < 2:
        raise tc.Unsupported(f"data of rank {data.ndim}: the dense compute needs rows")
    return tnn.dense(data, weight)


def _matmul_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Every transpose form is one GEMM (`te.nn.matmul`); batch axes of a non-transposed
    tensor_a are the GEMM's batch, its weight broadcast over them."""
    a, b = inputs
    _same_dtype(attrs, a)
    if a.ndim < 2:
        raise tc.Unsupported(f"tensor_a of rank {a.ndim}: the matmul compute needs rows")
    return tnn.matmul(a, b, attrs["transpose_a"], attrs["transpose_b"], name="matmul",
                      tag="matmul" if a.ndim == 2 else "batch_matmul")


def _bmm_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    """Any transposes and a broadcast batch-1 operand: one GEMM (`te.nn.matmul`); the transposed-B
    layout is packed, `[B, K, N]` read as it is."""
    a, b = inputs
    _same_dtype(attrs, a)
    return tnn.matmul(a, b, attrs["transpose_a"], attrs["transpose_b"], name="batch_matmul",
                      tag="batch_matmul")


register(OpDef(
    name="nn.dense",
    arg_names=("data", "weight"),
    type_rel=lambda ts, a: _mm_rel("nn.dense", ts, a, False, True),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None, "out_dtype": ""},
    reference=_mm_ref(None, True),
    gradient=_dense_grad,
    compute=_dense_compute,
    doc="data (…, K) times weight (units, K) transposed: (…, units).",
))

register(OpDef(
    name="nn.matmul",
    arg_names=("tensor_a", "tensor_b"),
    type_rel=lambda ts, a: _mm_rel("nn.matmul", ts, a, a["transpose_a"], a["transpose_b"]),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": None, "out_dtype": "", "transpose_a": False, "transpose_b": False},
    reference=_mm_ref("transpose_a", False),
    gradient=_matmul_grad,
    compute=_matmul_compute,
    doc="op(a) @ op(b) with optional transposes; a may carry leading batch axes when not transposed.",
))


# ---------------------------------------------------------------------------------------------
# nn.batch_matmul


def _bmm_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "nn.batch_matmul"
    x = tensor_arg(op, arg_types, 0, "tensor_a")
    y = tensor_arg(op, arg_types, 1, "tensor_b")
    for name, t in (("tensor_a", x), ("tensor_b", y)):
        if len(t.shape) != 3:
            raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must be 3-d (batch, rows, cols)")
    bx, m, kx = (x.shape[0], x.shape[2], x.shape[1]) if attrs["transpose_a"] else x.shape
    by, n, ky = y.shape if attrs["transpose_b"] else (y.shape[0], y.shape[2], y.shape[1])
    if dim_known_different(kx, ky):
        raise rel_error(op, f"reduction mismatch: tensor_a of shape {fmt_shape(x.shape)} has {kx} columns, "
                            f"tensor_b of shape {fmt_shape(y.shape)} has {ky}")
    if bx == 1:
        batch = by
    elif by == 1 or not dim_known_different(bx, by):
        batch = merge_dims(bx, by) if by != 1 else bx
    else:
        raise rel_error(op, f"batch mismatch: tensor_a of shape {fmt_shape(x.shape)} and tensor_b of shape "
                            f"{fmt_shape(y.shape)}")
    return TensorType((batch, m, n), out_dtype_of(op, attrs, x, y, ("tensor_a", "tensor_b")))


def _bmm_ref(attrs: Attrs, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = np.swapaxes(x, 1, 2) if attrs["transpose_a"] else x
    y = np.swapaxes(y, 1, 2) if attrs["transpose_b"] else y
    return _matmul_np(x, y, attrs["out_dtype"] or x.dtype)


def _bmm_grad(c: Call, g: Expr) -> list[Expr]:
    a, b = c.args
    ta, tb = c.attrs["transpose_a"], c.attrs["transpose_b"]

    def bmm(p: Expr, q: Expr, tp: bool, tq: bool) -> Expr:
        return call("nn.batch_matmul", p, q, transpose_a=tp, transpose_b=tq)

    if not ta and tb:
        da, db = bmm(g, b, False, False), bmm(g, a, True, False)
    elif not ta:
        da, db = bmm(g, b, False, True), bmm(a, g, True, False)
    elif not tb:
        da, db = bmm(b, g, False, True), bmm(a, g, False, False)
    else:
        da, db = bmm(b, g, True, True), bmm(g, a, True, True)
    out_batch = static_shape("nn.batch_matmul", c)[0]
    # an operand with batch 1 was broadcast: its gradient sums over the batch
    da = da if static_shape("nn.batch_matmul", a)[0] == out_batch else call("collapse_sum_like", da, a)
    db = db if static_shape("nn.batch_matmul", b)[0] == out_batch else call("collapse_sum_like", db, b)
    return [da, db]


register(OpDef(
    name="nn.batch_matmul",
    arg_names=("tensor_a", "tensor_b"),
    type_rel=_bmm_rel,
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"out_dtype": "", "transpose_a": False, "transpose_b": True},
    reference=_bmm_ref,
    gradient=_bmm_grad,
    compute=_bmm_compute,
    doc="Batched product of (B, M, K) and (B, N, K) (transpose_b=True by default); batch 1 broadcasts.",
))


# ---------------------------------------------------------------------------------------------
# nn.bias_add, nn.batch_flatten, nn.dropout


def _bias_add_rel(arg_types: list[Type], attrs: Attrs) -> Any:
    op = "nn.bias_add"
    data = tensor_arg(op, arg_types, 0, "data")
    axis = normalize_axis(op, attrs["axis"], len(data.shape))
    refined = channel_vectors(op, arg_types, {1: "bias"}, data, axis)
    return (refined, data) if refined else data


def _bias_add_ref(attrs: Attrs, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    axis = attrs["axis"] % x.ndim
    return x + b.reshape((-1,) + (1,) * (x.ndim - axis - 1))


def _bias_add_grad(c: Call, g: Expr) -> list[Expr]:
    ndim = len(c.args[0].checked_type.shape)
    return [g, sum_except(g, attrs_axis(c, ndim))]


def _bias_add_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    x, b = inputs
    axis = attrs["axis"] % x.ndim
    return tc.compute0(tc.out_shape(out_type), lambda *i: x[i] + b[i[axis]], "bias_add", tag="elemwise")


register(OpDef(
    name="nn.bias_add",
    arg_names=("data", "bias"),
    type_rel=_bias_add_rel,
    pattern=OpPattern.BROADCAST,
    attrs={"axis": 1},
    reference=_bias_add_ref,
    gradient=_bias_add_grad,
    compute=_bias_add_compute,
    doc="Add a 1-d bias along `axis` (the channel axis by default).",
))


def _batch_flatten_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    data = tensor_arg("nn.batch_flatten", arg_types, 0, "data")
    if len(data.shape) < 1:
        raise rel_error("nn.batch_flatten", "data must have at least one axis (the batch)")
    rest = prod(data.shape[1:])
    return TensorType((data.shape[0], AnyDim() if rest is None else rest), data.dtype)


register(OpDef(
    name="nn.batch_flatten",
    arg_names=("data",),
    type_rel=_batch_flatten_rel,
    pattern=OpPattern.INJECTIVE,
    reference=lambda a, x: x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64))),
    gradient=lambda c, g: [call("reshape_like", g, c.args[0])],
    compute=lambda ins, a, t: tc.reshape(ins[0], t, "batch_flatten"),
    doc="(N, d1, d2, …) -> (N, d1 * d2 * …).",
))


def _dropout_rel(arg_types: list[Type], attrs: Attrs) -> TupleType:
    data = tensor_arg("nn.dropout", arg_types, 0, "data")
    if not 0.0 <= float(attrs["rate"]) < 1.0:
        raise rel_error("nn.dropout", f"rate must be in [0, 1), got {attrs['rate']}")
    return TupleType((data, data))


register(OpDef(
    name="nn.dropout",
    arg_names=("data",),
    type_rel=_dropout_rel,
    pattern=OpPattern.OPAQUE,
    attrs={"rate": 0.5},
    # inference semantics, as Relay's interpreter: the identity and a mask of ones
    reference=lambda a, x: (x.copy(), np.ones_like(x)),
    gradient=lambda c, g: [TupleGetItem(g, 0)],
    compute=lambda ins, a, t: [tc.map_tensor(ins[0], lambda v: v, "dropout"),
                               tc.map_tensor(ins[0], lambda v: tc.scalar(1, v.dtype), "dropout_mask")],
    doc="Dropout at inference: returns (data, ones mask); training-time dropout is a transform's job.",
))
