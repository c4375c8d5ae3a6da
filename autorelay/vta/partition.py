"""Graph partitioning: which layers of a quantized graph the accelerator runs.

A layer is offloaded when the accelerator computes it exactly as the CPU would, so either backend
can run any layer and the partitioned model gives the CPU int8 path's outputs bit for bit:

    [clip(] qnn.requantize(nn.bias_add(qnn.conv2d(x, W, 0, 0, s_x, s_w), B), s_acc, 0, s_out, 0,
                           rounding="UPWARD", out_dtype="int8") [, lo, hi)]
      -> vta.conv2d(x, W, B; strides, padding, shift = log2(s_out / s_acc), clip)

and the same for `qnn.dense`. Conditions: int8 data and constant int8 weights without zero points
(the GEMM core multiplies raw int8), no groups or dilation, equal strides and
padding on every side (the LOAD's pads are symmetric per tile), a single requantize ratio that is
an exact power of two 2**-shift (the ALU shifts; it cannot multiply per channel) — what
`quantize_model(..., scheme="vta")` produces. Convolutions with fewer input channels than one
block (an RGB stem) stay on the CPU, as in Relay's VTA flow: padding 3 channels to 16 wastes 80% of
the core and the CPU does them well. Everything else — quantize/dequantize, pooling, residual adds,
the float head — stays on the CPU; `PartitionReport` says, per int8 layer, where it runs and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, children, post_order
from autorelay.op.registry import call
from autorelay.transform.util import op_name
from autorelay.typing import infer_types
from autorelay.vta import ops as _ops  # noqa: F401  (registers vta.conv2d / vta.dense)
from autorelay.vta.config import VTAConfig
from autorelay.vta.conv import ConvShape
from autorelay.vta.sim import VTAError
from autorelay.vta.tasks import default_conv_knobs


@dataclass
class PartitionReport:
    """Per int8 layer (in graph order): its op, whether it was offloaded, and why not."""

    layers: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def offloaded(self) -> int:
        return sum(1 for _, on, _ in self.layers if on)

    def __str__(self) -> str:
        lines = [f"{'#':>3} {'layer':<12} {'runs on':<8} reason"]
        for i, (op, on, why) in enumerate(self.layers):
            lines.append(f"{i:>3} {op:<12} {'vta' if on else 'cpu':<8} {why}")
        lines.append(f"{self.offloaded} of {len(self.layers)} int8 layers offloaded")
        return "\n".join(lines)


def _const(e: Expr) -> np.ndarray | None:
    return np.asarray(e.data) if isinstance(e, Constant) else None


def _all_zero(e: Expr) -> bool:
    v = _const(e)
    return v is not None and not np.any(v)


def _uniform(*values: Expr) -> bool:
    return all(_const(v) is not None for v in values)


def _dtype(e: Expr) -> str:
    return e.checked_type.dtype if e.has_checked_type else ""


@dataclass
class _Match:
    layer: Call  # the qnn.conv2d / qnn.dense
    bias: np.ndarray
    shift: int
    lo: int
    hi: int


class _Partitioner(ExprMutator):
    def __init__(self, config: VTAConfig, uses: dict[int, int]) -> None:
        super().__init__()
        self.config, self.uses = config, uses
        self.decisions: dict[int, tuple[str, bool, str]] = {}
        self._seen: set[int] = set()

    def visit_call(self, c: Call) -> Expr:
        match = self._match(c)
        if match is None:
            return super().visit_call(c)
        layer, x = match.layer, self.visit(match.layer.args[0])
        weight = Constant(_const(layer.args[1]))
        bias = Constant(match.bias.astype(np.int32))
        epilogue = {"shift": match.shift, "clip_min": match.lo, "clip_max": match.hi}
        if op_name(layer) == "qnn.conv2d":
            return call("vta.conv2d", x, weight, bias, strides=int(layer.attrs["strides"][0]),
                        padding=int(layer.attrs["padding"][0]), **epilogue)
        return call("vta.dense", x, weight, bias, **epilogue)

    # ---- matching ------------------------------------------------------------------------------

    def _match(self, c: Call) -> _Match | None:
        lo, hi, req = -128, 127, c
        if op_name(c) == "clip":
            req = c.args[0]
            if op_name(req) != "qnn.requantize" or self.uses.get(id(req), 0) != 1:
                return None
            lo = max(lo, math.ceil(float(c.attrs["a_min"])))
            hi = min(hi, math.floor(float(c.attrs["a_max"])))
        elif op_name(c) != "qnn.requantize":
            return None
        acc, bias = req.args[0], None  # type: ignore[union-attr]
        if op_name(acc) == "nn.bias_add" and self.uses.get(id(acc), 0) == 1:
            acc, bias = acc.args[0], acc.args[1]  # type: ignore[union-attr]
        if op_name(acc) not in ("qnn.conv2d", "qnn.dense") or self.uses.get(id(acc), 0) != 1:
            return None
        if id(acc) in self._seen:  # already decided (the clip's visit tried its requantize first)
            return None
        self._seen.add(id(acc))
        why, shift, bias_value = self._why_not(acc, bias, req)  # type: ignore[arg-type]
        self.decisions[id(acc)] = (op_name(acc) or "", why is None, why or "offloaded")
        if why is not None:
            return None
        return _Match(acc, bias_value, shift, lo, hi)  # type: ignore[arg-type]

    def _why_not(self, layer: Call, bias: Expr | None,
                 req: Call) -> tuple[str | None, int, np.ndarray | None]:
        x, w = layer.args[0], layer.args[1]
        weight = _const(w)
        if _dtype(x) != "int8" or weight is None or weight.dtype != np.int8:
            return "data must be int8 and the weight an int8 constant", 0, None
        if not (_all_zero(layer.args[2]) and _all_zero(layer.args[3])):
            return "zero points must be 0 (the GEMM core multiplies raw int8)", 0, None
        if op_name(layer) == "qnn.conv2d":
            why = self._conv_why_not(layer, x)
            if why is not None:
                return why, 0, None
        b = np.zeros(weight.shape[0], np.int32)
        if bias is not None:
            bv = _const(bias)
            if bv is None or bv.dtype != np.int32 or bv.size != weight.shape[0]:
                return "the bias must be an int32 constant per output channel", 0, None
            b = bv.reshape(-1)
        shift = _power_of_two_shift(req)
        if shift is None:
            return ("the requantize is not a rounding shift (zero points 0, int8 out, UPWARD, "
                    "one power-of-two ratio <= 1)"), 0, None
        return None, shift, b

    def _conv_why_not(self, layer: Call, x: Expr) -> str | None:
        a = layer.attrs
        if a["data_layout"] != "NCHW" or a["kernel_layout"] != "OIHW" or int(a["groups"]) != 1:
            return "only NCHW / OIHW convolutions without groups"
        if any(int(d) != 1 for d in a["dilation"]):
            return "dilated convolution"
        if len(set(map(int, a["strides"]))) != 1 or len(set(map(int, a["padding"]))) != 1:
            return "strides and padding must be equal on every side"
        shape = x.checked_type.shape
        if shape[1] < self.config.block_in:
            return f"{shape[1]} input channels < one block of {self.config.block_in} (stays on the CPU)"
        w = layer.args[1].checked_type.shape
        conv = ConvShape(int(shape[1]), int(shape[2]), int(shape[3]), int(w[0]), int(w[2]), int(w[3]),
                         int(a["strides"][0]), int(a["padding"][0]))
        try:
            default_conv_knobs(conv, self.config)
        except VTAError:
            return "no tiling of it fits the accelerator's on-chip buffers"
        return None


def _power_of_two_shift(req: Call) -> int | None:
    _, in_scale, in_zp, out_scale, out_zp = req.args
    if req.attrs["out_dtype"] != "int8" or req.attrs["rounding"] != "UPWARD":
        return None
    if not (_all_zero(in_zp) and _all_zero(out_zp) and _uniform(in_scale, out_scale)):
        return None
    ratios = np.asarray(_const(in_scale), np.float64).reshape(-1) / np.asarray(_const(out_scale),
                                                                             np.float64).reshape(-1)
    if ratios.size == 0 or not np.all(ratios == ratios[0]) or not 0 < ratios[0] <= 1:
        return None
    mantissa, exponent = math.frexp(float(ratios[0]))  # ratio = mantissa * 2**exponent
    shift = 1 - exponent
    return shift if mantissa == 0.5 and shift < 32 else None


def partition(mod: IRModule, config: VTAConfig | None = None) -> tuple[IRModule, PartitionReport]:
    """`@main` with every offloadable int8 layer as a `vta.*` call (weights must be bound constants:
    `autorelay.transform.bind_params` first), and the report of what runs where."""
    mod = infer_types(mod)
    fn = mod["main"]
    uses: dict[int, int] = {}
    for node in post_order(fn.body):
        for ch in children(node):
            uses[id(ch)] = uses.get(id(ch), 0) + 1
    part = _Partitioner(config or VTAConfig(), uses)
    body = part.visit(fn.body)
    report = PartitionReport()
    for node in post_order(fn.body):  # graph order; layers no pattern reached run on the CPU
        if op_name(node) in ("qnn.conv2d", "qnn.dense"):
            unmatched = (op_name(node) or "", False, "no int8 requantize epilogue (read in float or int32)")
            report.layers.append(part.decisions.get(id(node), unmatched))
    out = IRModule.from_expr(fn.replace(body=body)) if body is not fn.body else mod
    return infer_types(out), report


__all__ = ["PartitionReport", "partition"]
