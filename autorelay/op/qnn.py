"""Quantisation: `qnn.quantize`, `qnn.dequantize`, `qnn.requantize`.

As in Relay, scales and zero points are tensor *arguments* (float32 and int32), either scalars
(per-tensor) or 1-d tensors along `axis` (per-channel):

* quantize    `q = clip(round(x / scale) + zero_point, qmin, qmax)` (round half to even)
* dequantize  `x = (q - zero_point) * scale`
* requantize  `q' = clip(rescale(q - zp_in, scale_in / scale_out) + zp_out, qmin', qmax')`, the
  rescaling in fixed point by the one rule of `qnn_fixed` (`rounding` "UPWARD", half toward +inf,
  Relay's default, or "TONEAREST", half away from zero), exactly as the kernels compute it.

Quantize divides in the data's float type (as ONNX Runtime does); dequantize computes in float64.
The integer ops (conv2d, dense, add, concatenate) are in `qnn_nn`. None is differentiable.

A kernel rescales with integer multipliers derived from the scales, so its scales must be
constants of the model (they are, after `build` binds the weights); with scales computed at run
time the compute is `Unsupported` and the build reports a NumPy fallback for that kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, Type
from autorelay.op import qnn_fixed as F
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import dim_known_different, fmt_shape, normalize_axis, tensor_arg

QUANT_DTYPES = ("int8", "uint8", "int16", "int32")
FLOATS = ("float16", "float32", "float64")


def _check_qparam(op: str, t: TensorType, name: str, dtype: str, data: TensorType, axis: int) -> None:
    if t.dtype != dtype:
        raise rel_error(op, f"{name} must have dtype {dtype}, got {t.dtype}")
    if t.shape == () or (len(t.shape) == 1 and t.shape[0] == 1):
        return
    if len(t.shape) == len(data.shape) > 1 and all(  # blocked per-channel (a converted layout's form)
            d == 1 or not dim_known_different(d, x) for d, x in zip(t.shape, data.shape)):
        return
    if len(t.shape) != 1 or dim_known_different(t.shape[0], data.shape[axis]):
        raise rel_error(op, f"{name} of shape {fmt_shape(t.shape)} must be a scalar or ({data.shape[axis]},) "
                            f"for axis {axis} of data of shape {fmt_shape(data.shape)}")


def _params(op: str, arg_types: list[Type], attrs: Attrs, spec: tuple[tuple[str, str], ...],
            data_dtypes: tuple[str, ...]) -> TensorType:
    data = tensor_arg(op, arg_types, 0, "data")
    if data.dtype not in data_dtypes:
        raise rel_error(op, f"data must have dtype in {data_dtypes}, got {data.dtype}")
    axis = normalize_axis(op, attrs["axis"], max(len(data.shape), 1))
    for i, (name, dtype) in enumerate(spec, start=1):
        _check_qparam(op, tensor_arg(op, arg_types, i, name), name, dtype, data, axis)
    return data


def _out_dtype(op: str, attrs: Attrs, allowed: tuple[str, ...]) -> str:
    if attrs["out_dtype"] not in allowed:
        raise rel_error(op, f"out_dtype must be one of {', '.join(allowed)}, got {attrs['out_dtype']!r}")
    return attrs["out_dtype"]


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A per-tensor or per-channel parameter shaped to broadcast against the data."""
    v = np.asarray(v, dtype=np.float64)
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    if v.ndim == ndim > 1:  # already shaped to broadcast (blocked per-channel)
        return v
    return v.reshape((-1,) + (1,) * (ndim - axis % ndim - 1))


def _saturate(v: np.ndarray, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


# ---- tensor computes: the references' formulas, in float64 where they compute in float64 ---------


def _qparam(p: object, idx: tuple, axis: int) -> object:
    """A per-tensor (scalar or (1,)) or per-channel parameter at output index `idx`."""
    if p.ndim == 0:  # type: ignore[attr-defined]
        return p[()]  # type: ignore[index]
    if p.ndim > 1:  # type: ignore[attr-defined]  # shaped to broadcast against the data
        from autorelay.op.te_compute import bcast_read

        return bcast_read(p, idx)  # type: ignore[arg-type]
    return p[0] if p.shape[0] == 1 else p[idx[axis]]  # type: ignore[attr-defined,index]


def constant_value(t: object) -> np.ndarray | None:
    """The value of a kernel input known at lowering time (a constant placeholder, or an inline
    scalar stage), else None."""
    from autorelay.te import expr as E

    if getattr(t, "value", None) is not None:
        return np.asarray(t.value)  # type: ignore[attr-defined]
    op = getattr(t, "op", None)
    if op is not None and isinstance(op.body, E.Const):
        return np.full(t.shape, op.body.value)  # type: ignore[attr-defined]
    return None


def scale_multiplier(num_scale: object, den_scale: object, op: str, extra_scale: object = None,
                     axis: int = 0, ndim: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`qnn_fixed.multiplier_shift` of the constant ratio `num/den` (times `extra_scale`); each
    scale is per tensor, per channel along `axis` of an `ndim`-d output, or shaped to broadcast.
    Raises `Unsupported` when a scale is not a constant."""
    from autorelay.op import te_compute as tc

    values = [constant_value(t) for t in (num_scale, den_scale, extra_scale) if t is not None]
    if any(v is None for v in values):
        raise tc.Unsupported(f"{op}: scales computed at run time (the kernel needs constant scales)")
    nd = max(ndim, 1)
    shaped = [_along(v, axis, nd) for v in values]  # type: ignore[arg-type]
    ratio = shaped[0] * shaped[2] / shaped[1] if len(shaped) == 3 else shaped[0] / shaped[1]
    try:
        return F.multiplier_shift(ratio)
    except F.QuantizationError as e:
        raise rel_error(op, str(e)) from None


def _readers(arrays: Sequence[np.ndarray], const_dtype: str, names: Sequence[str]):
    """`f(output_index) -> [expr per array]` for the precomputed rescaling constants: per tensor
    they are inlined (as `const_dtype`); per channel they become int32 constant inputs."""
    from autorelay.op import te_compute as tc
    from autorelay.te import expr as E
    from autorelay.te import tensor as te

    if arrays[0].size == 1:
        consts = [E.const(int(a.reshape(-1)[0]), const_dtype) for a in arrays]
        return lambda idx: consts
    tensors = [te.constant(a, "int32", n) for a, n in zip(arrays, names)]
    return lambda idx: [tc.bcast_read(t, idx) for t in tensors]


def fixed_point_rescaler(num_scale: object, den_scale: object, rounding: str, op: str,
                         extra_scale: object = None, axis: int = 0, ndim: int = 0):
    """`f(x_int64, output_index) -> rescaled int64 expr` multiplying by `num/den` (times
    `extra_scale`) by the rule of `qnn_fixed` (see `scale_multiplier`)."""
    m, shift = scale_multiplier(num_scale, den_scale, op, extra_scale, axis, ndim)
    return rescaler_of(m, shift, rounding)


def rescaler_of(m: np.ndarray, shift: np.ndarray, rounding: str):
    """`f(x_int64, output_index) -> rescaled int64 expr` for a precomputed multiplier and shift."""
    read = _readers((m, shift), "int64", ("multiplier", "shift"))
    return lambda x, idx: F.rescale_expr(x, *read(idx), rounding)


def int32_rescaler(m: np.ndarray, shift: np.ndarray, rounding: str):
    """`f(x_int32, output_index) -> rescaled int32 expr`, equal to `rescaler_of`'s result for every
    int32 `x` (`qnn_fixed.rescale32_expr`), or None where that is not exact (rounding other than
    UPWARD, a ratio of 1/4 or more)."""
    if not F.int32_exact(shift, rounding):
        return None
    read = _readers(F.int32_operands(m, shift), "int32", ("multiplier", "addend", "rshift"))
    return lambda x, idx: F.rescale32_expr(x, *read(idx))


def _q_compute(kind: str):
    def compute(inputs: list, attrs: Attrs, out_type: Type) -> object:
        from autorelay.op import te_compute as tc
        from autorelay.te import expr as E

        x = inputs[0]
        dtype = tc.out_dtype(out_type)
        tc.check_dtypes(inputs)
        axis = attrs["axis"] % max(x.ndim, 1)

        def f64(v: object) -> E.Expr:
            return E.cast(v, "float64")

        def saturate(v: E.Expr) -> E.Expr:
            info = np.iinfo(dtype)
            return E.cast(E.minimum(E.maximum(v, float(info.min)), float(info.max)), dtype)

        def body(*i: E.Expr) -> E.Expr:
            v = x[i]
            if kind == "dequantize":
                zp, scale = _qparam(inputs[2], i, axis), _qparam(inputs[1], i, axis)
                return E.cast((f64(v) - f64(zp)) * f64(scale), dtype)
            if kind == "quantize":
                real = v / E.cast(_qparam(inputs[1], i, axis), x.dtype)
                return saturate(f64(E.call("round", real)) + f64(_qparam(inputs[2], i, axis)))
            in_zp, out_zp = _qparam(inputs[2], i, axis), _qparam(inputs[4], i, axis)
            if fast is not None:  # an int32 accumulator, no input zero point: int32 all the way
                return F.saturate_expr(fast(v, i) + E.cast(out_zp, "int32"), dtype)
            diff = E.cast(v, "int64") - E.cast(in_zp, "int64")
            scaled = rescaler(diff, i)
            return F.saturate_expr(scaled + E.cast(out_zp, "int64"), dtype)

        if kind == "requantize":
            rounding = "TONEAREST" if attrs["rounding"] == "TONEAREST" else "UPWARD"
            m, shift = scale_multiplier(inputs[1], inputs[3], "qnn.requantize", axis=axis, ndim=x.ndim)
            rescaler = rescaler_of(m, shift, rounding)
            zp = constant_value(inputs[2])
            int32_input = x.dtype == "int32" and zp is not None and not np.any(zp)
            fast = int32_rescaler(m, shift, rounding) if int32_input else None

        return tc.compute0(tc.out_shape(out_type), body, kind, tag="elemwise")

    return compute


# ---------------------------------------------------------------------------------------------


def _quantize_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.quantize"
    spec = (("output_scale", "float32"), ("output_zero_point", "int32"))
    data = _params(op, arg_types, attrs, spec, FLOATS)
    return TensorType(data.shape, _out_dtype(op, attrs, QUANT_DTYPES))


def _quantize_ref(attrs: Attrs, x: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    ax, nd = attrs["axis"], max(x.ndim, 1)
    # Divide in the data's own float type, as ONNX Runtime and TVM's lowering do: a float64
    # division rounds ties differently (x / scale == -127.5 in float32 but -127.4999… in float64).
    real = x / _along(scale, ax, nd).astype(x.dtype)
    q = np.round(real).astype(np.float64) + _along(zp, ax, nd)
    return _saturate(q, attrs["out_dtype"])


register(OpDef(
    name="qnn.quantize",
    compute=_q_compute("quantize"),
    arg_names=("data", "output_scale", "output_zero_point"),
    type_rel=_quantize_rel,
    pattern=OpPattern.BROADCAST,
    attrs={"axis": -1, "out_dtype": "int8"},
    reference=_quantize_ref,
    doc="float -> int: clip(round(x / scale) + zero_point).",
))


def _dequantize_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.dequantize"
    data = _params(op, arg_types, attrs, (("input_scale", "float32"), ("input_zero_point", "int32")),
                   QUANT_DTYPES)
    return TensorType(data.shape, _out_dtype(op, attrs, FLOATS))


def _dequantize_ref(attrs: Attrs, q: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    ax, nd = attrs["axis"], max(q.ndim, 1)
    return ((q.astype(np.float64) - _along(zp, ax, nd)) * _along(scale, ax, nd)).astype(attrs["out_dtype"])


register(OpDef(
    name="qnn.dequantize",
    compute=_q_compute("dequantize"),
    arg_names=("data", "input_scale", "input_zero_point"),
    type_rel=_dequantize_rel,
    pattern=OpPattern.BROADCAST,
    attrs={"axis": -1, "out_dtype": "float32"},
    reference=_dequantize_ref,
    doc="int -> float: (q - zero_point) * scale.",
))


def _requantize_rel(arg_types: list[Type], attrs: Attrs) -> TensorType:
    op = "qnn.requantize"
    spec = (("input_scale", "float32"), ("input_zero_point", "int32"),
            ("output_scale", "float32"), ("output_zero_point", "int32"))
    data = _params(op, arg_types, attrs, spec, QUANT_DTYPES)
    if attrs["rounding"] not in ("None", "UPWARD", "TONEAREST"):
        raise rel_error(op, f"rounding must be UPWARD or TONEAREST, got {attrs['rounding']!r}")
    return TensorType(data.shape, _out_dtype(op, attrs, QUANT_DTYPES))


def rescale_along(q: np.ndarray, ratio: np.ndarray, axis: int, rounding: str) -> np.ndarray:
    """`qnn_fixed.rescale` of int64 `q` by a per-tensor or per-channel (along `axis`) ratio."""
    m, shift = F.multiplier_shift(np.asarray(ratio, np.float64))
    nd = max(q.ndim, 1)
    return F.rescale(q, _along(m, axis, nd).astype(np.int64), _along(shift, axis, nd).astype(np.int64),
                     rounding)


def _requantize_ref(attrs: Attrs, q, in_scale, in_zp, out_scale, out_zp) -> np.ndarray:
    ax, nd = attrs["axis"], max(q.ndim, 1)
    ratio = _along(in_scale, ax, nd) / _along(out_scale, ax, nd)
    diff = q.astype(np.int64) - _along(in_zp, ax, nd).astype(np.int64)
    rounding = "TONEAREST" if attrs["rounding"] == "TONEAREST" else "UPWARD"
    try:
        scaled = rescale_along(diff, ratio, ax, rounding)
    except F.QuantizationError as e:
        raise rel_error("qnn.requantize", str(e)) from None
    return F.saturate(scaled + _along(out_zp, ax, nd).astype(np.int64), attrs["out_dtype"])


register(OpDef(
    name="qnn.requantize",
    compute=_q_compute("requantize"),
    arg_names=("data", "input_scale", "input_zero_point", "output_scale", "output_zero_point"),
    type_rel=_requantize_rel,
    pattern=OpPattern.BROADCAST,
    attrs={"axis": -1, "rounding": "None", "compute_dtype": "None", "out_dtype": "int8"},
    reference=_requantize_ref,
    doc="int -> int under a new scale and zero point.",
))
