"""`qnn.add(lhs, rhs, lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point, output_scale,
output_zero_point)` (Relay's signature), on int8 or uint8 operands with per-tensor parameters.

Both operands are rescaled to the output's scale and summed with one rounding, then the output
zero point is added: `saturate(round((l - zl) * sl/so + (r - zr) * sr/so) + zo)`
(`qnn_fixed.rescale_sum`). Rescaling each operand first, as Relay does, rounds twice: one step off
ONNX's QLinearAdd on a quarter of the elements, and further along a chain of adds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op import qnn_fixed as F
from autorelay.op.qnn import _qparam, scale_multiplier
from autorelay.op.qnn_nn import INT8, _scalar_or_vector
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import broadcast_shapes, tensor_arg

_ADD_PARAMS = (("lhs_scale", "float32"), ("lhs_zero_point", "int32"), ("rhs_scale", "float32"),
               ("rhs_zero_point", "int32"), ("output_scale", "float32"), ("output_zero_point", "int32"))


def _add_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.add"
    lhs, rhs = tensor_arg(op, arg_types, 0, "lhs"), tensor_arg(op, arg_types, 1, "rhs")
    if lhs.dtype not in INT8 or rhs.dtype != lhs.dtype:
        raise rel_error(op, f"lhs and rhs must share an int8 or uint8 dtype, got {lhs.dtype} and {rhs.dtype}")
    for k, (name, dtype) in enumerate(_ADD_PARAMS, start=2):
        _scalar_or_vector(op, tensor_arg(op, arg_types, k, name), name, dtype, None)
    return TensorType(broadcast_shapes(op, lhs.shape, rhs.shape), lhs.dtype)


def _add_multipliers(ls: Any, rs: Any, os_: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both operands' ratios to the output scale (per-tensor values) over one shift
    (`qnn_fixed.common_shift`)."""
    out = np.float64(np.asarray(os_).reshape(()))
    try:
        ratios = [F.multiplier_shift(np.float64(np.asarray(v).reshape(())) / out) for v in (ls, rs)]
    except F.QuantizationError as e:
        raise rel_error("qnn.add", str(e)) from None
    return F.common_shift(*ratios[0], *ratios[1])


def _add_ref(attrs: Attrs, lhs, rhs, ls, lz, rs, rz, os_, oz) -> np.ndarray:
    m_l, m_r, shift = _add_multipliers(ls, rs, os_)
    lv = lhs.astype(np.int64) - np.int64(np.asarray(lz).reshape(()))
    rv = rhs.astype(np.int64) - np.int64(np.asarray(rz).reshape(()))
    total = F.rescale_sum(lv, m_l, rv, m_r, shift) + np.int64(np.asarray(oz).reshape(()))
    return F.saturate(total, str(lhs.dtype))


def _add_compute(inputs: list, attrs: Attrs, out_type: Type) -> Any:
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E

    lhs, rhs, ls, lz, rs, rz, os_, oz = inputs
    ratios = F.common_shift(*scale_multiplier(ls, os_, "qnn.add"), *scale_multiplier(rs, os_, "qnn.add"))
    m_l, m_r, shift = (E.const(int(np.asarray(v).reshape(())), "int64") for v in ratios)
    dtype = tc.out_dtype(out_type)

    def body(*i: E.Expr) -> E.Expr:
        lv = E.cast(tc.bcast_read(lhs, i), "int64") - E.cast(_qparam(lz, i, 0), "int64")
        rv = E.cast(tc.bcast_read(rhs, i), "int64") - E.cast(_qparam(rz, i, 0), "int64")
        total = F.rescale_sum_expr(lv, m_l, rv, m_r, shift) + E.cast(_qparam(oz, i, 0), "int64")
        return F.saturate_expr(total, dtype)

    return tc.compute0(tc.out_shape(out_type), body, "qnn_add", tag="elemwise")


register(OpDef(
    name="qnn.add",
    arg_names=("lhs", "rhs", *(n for n, _ in _ADD_PARAMS)),
    type_rel=_add_rel,
    pattern=OpPattern.BROADCAST,
    attrs={},
    reference=_add_ref,
    compute=_add_compute,
    doc="Quantized add: both operands rescaled to the output scale and summed, rounded once.",
))
