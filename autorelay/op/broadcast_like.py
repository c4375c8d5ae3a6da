"""Broadcasting to a shape (`broadcast_to`) and the shape-polymorphic ops that gradient rules rely
on (`collapse_sum_like`, `broadcast_to_like`, `reshape_like`): they take their target shape from a
second argument, so a gradient can be written once without knowing any concrete shape.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op import te_compute as tc
from autorelay.op.broadcast import static_shape_attr
from autorelay.op.elemwise import sum_to
from autorelay.op.registry import REQUIRED, OpDef, OpPattern, call, register, rel_error
from autorelay.op.shape_utils import broadcast_shapes, fmt_shape, prod, tensor_arg

# ---- tensor computes (looked up by name when each OpDef below is registered) --------------------


def _collapse_sum_compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
    x = inputs[0]
    shape = tc.out_shape(out_type)
    lead = x.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1]
    tmp = TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)
    red = tc.reduction(x, "sum", axes, False, tmp, name="collapse_sum")
    return tc.reshape(red, out_type, "collapse_sum_like")


_TE = {
    "broadcast_to": lambda ins, a, t: tc.bcast_map(lambda x: x, ins[:1], t, "broadcast_to"),
    "broadcast_to_like": lambda ins, a, t: tc.bcast_map(lambda x: x, ins[:1], t, "broadcast_to"),
    "reshape_like": lambda ins, a, t: tc.reshape(ins[0], t, "reshape_like"),
    "collapse_sum_like": _collapse_sum_compute,
}


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
    shape = static_shape_attr("broadcast_to", attrs["shape"])
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
