"""`scatter_elements`: a copy of `data` with elements replaced (or combined) at indexed positions,
ONNX's ScatterElements (and, through a flattened view, its ScatterND).

`indices` and `updates` have one shape, of `data`'s rank and no larger than `data` on the axes other
than `axis`: the update at position p goes to p with its `axis` coordinate replaced by
`indices[p]` (negative values count from the end). `reduction` says what happens there:
"update" writes it (ONNX leaves two updates to one position undefined; the compute keeps the
last along `axis`), "add",
"mul", "max" and "min" combine every update to a position with the original value.

The compute is written from the output's side, as the tensor language requires: each output
element looks along `axis` of `indices` for the updates that land on it. That reads K = indices'
extent along `axis` per element (quadratic along the axis, like `cumsum`'s scan), which suits the
short update lists models scatter (a cache row, a mask, a few boxes).
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.elemwise import ANY_DTYPE, INT, check_dtype
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, normalize_axis, tensor_arg

REDUCTIONS = ("update", "add", "mul", "max", "min")


def _rel(arg_types: list[Type], attrs: Attrs) -> Type:
    data = tensor_arg("scatter_elements", arg_types, 0, "data")
    ind = tensor_arg("scatter_elements", arg_types, 1, "indices")
    upd = tensor_arg("scatter_elements", arg_types, 2, "updates")
    check_dtype("scatter_elements", data, ANY_DTYPE, "data")
    check_dtype("scatter_elements", ind, INT, "indices")
    if attrs["reduction"] not in REDUCTIONS:
        raise rel_error("scatter_elements", f"reduction must be one of {', '.join(REDUCTIONS)}, "
                                            f"got {attrs['reduction']!r}")
    if upd.dtype != data.dtype:
        raise rel_error("scatter_elements", f"updates have dtype {upd.dtype}, data {data.dtype}")
    if ind.ndim != data.ndim or upd.ndim != ind.ndim or any(
            dim_known_different(u, i) for u, i in zip(upd.shape, ind.shape)):
        raise rel_error("scatter_elements", f"indices {fmt_shape(ind.shape)} and updates "
                        f"{fmt_shape(upd.shape)} must have one shape, of the rank of data "
                        f"{fmt_shape(data.shape)}")
    axis = normalize_axis("scatter_elements", attrs["axis"], data.ndim)
    for d, (i, n) in enumerate(zip(ind.shape, data.shape)):
        if d != axis and isinstance(i, int) and isinstance(n, int) and i > n:
            raise rel_error("scatter_elements", f"indices {fmt_shape(ind.shape)} are larger than data "
                            f"{fmt_shape(data.shape)} on axis {d}")
    return TensorType(data.shape, data.dtype)


_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _ref(attrs: Attrs, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    axis = normalize_axis("scatter_elements", attrs["axis"], data.ndim)
    n = data.shape[axis]
    if np.any((indices < -n) | (indices >= n)):
        raise ValueError(f"scatter_elements: an index is out of range [-{n}, {n}) on axis {axis}")
    where = list(np.indices(indices.shape))
    where[axis] = np.where(indices < 0, indices + n, indices)
    out = data.copy()
    if attrs["reduction"] == "update":
        out[tuple(where)] = updates
    else:
        _AT[attrs["reduction"]].at(out, tuple(where), updates)
    return out


def _compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    data, ind, upd = inputs
    axis = normalize_axis("scatter_elements", attrs["axis"], data.ndim)
    shape, dtype, how = tc.out_shape(out_type), tc.out_dtype(out_type), attrs["reduction"]
    n, k = data.shape[axis], te.reduce_axis(ind.shape[axis], "k")

    def source(idx: tuple, along: E.Expr) -> tuple:
        """The update position `along` on `axis` that could land on output `idx`, clamped into
        indices' shape (`lands` checks that it exists)."""
        return tuple(along if d == axis else E.minimum(i, ind.shape[d] - 1) for d, i in enumerate(idx))

    def lands(idx: tuple) -> E.Expr:
        covered = [i < ind.shape[d] for d, i in enumerate(idx) if d != axis and ind.shape[d] < shape[d]]
        pos = E.cast(ind[source(idx, k.var)], "int64")
        pos = E.select(pos < 0, pos + n, pos)
        return E.all_of(*covered, E.compare("eq", pos, E.cast(idx[axis], "int64")))

    if how == "update":
        last = te.compute(shape, lambda *idx: te.max(E.select(lands(idx), E.cast(k.var, "int32"),
                                                               E.const(-1, "int32")), k),
                          name="scatter_last", tag="reduce")

        def pick(*idx: E.Expr) -> E.Expr:
            j = last[idx]
            return E.select(j >= 0, upd[source(idx, E.maximum(j, 0))], data[idx])

        return te.compute(shape, pick, name="scatter_elements")
    if dtype == "bool":
        raise tc.Unsupported(f"a bool scatter with reduction {how} has no compute")
    reducer, identity = {"add": (te.sum, 0), "mul": (te.prod, 1), "max": (te.max, None),
                         "min": (te.min, None)}[how]

    def landing(idx: tuple, otherwise: E.Expr) -> E.Expr:
        return E.select(lands(idx), upd[source(idx, k.var)], otherwise)

    if identity is None:  # max/min: the updates that land, combined with the value already there
        acc = te.compute(shape, lambda *idx: reducer(landing(idx, data[idx]), k), name="scatter_acc",
                         tag="reduce")
        combine = E.maximum if how == "max" else E.minimum
        return te.compute(shape, lambda *idx: combine(data[idx], acc[idx]), name="scatter_elements")
    zero = E.const(identity, dtype)
    acc = te.compute(shape, lambda *idx: reducer(landing(idx, zero), k), name="scatter_acc", tag="reduce")
    if how == "add":
        return te.compute(shape, lambda *idx: data[idx] + acc[idx], name="scatter_elements")
    return te.compute(shape, lambda *idx: data[idx] * acc[idx], name="scatter_elements")


register(
    OpDef(
        name="scatter_elements",
        arg_names=("data", "indices", "updates"),
        type_rel=_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"axis": 0, "reduction": "update"},
        reference=_ref,
        compute=_compute,
        doc="data with updates written (or combined) at indices along axis",
    )
)
