"""How quantized numbers are represented: the choice a backend's integer hardware imposes.

`cpu` (the default) suits the CPU's dot-product instructions: activations asymmetric uint8 with a
zero point (`vpdpbusd` multiplies unsigned by signed bytes), weights symmetric int8 per output
channel, so each channel keeps its own scale and the requantize multiplier is a general fixed-point
number.

`cpu-narrow` is `cpu` with 7-bit weights (|w| <= 63), for CPUs with AVX2 but no VNNI: there a
convolution takes a group of 4 bytes in `vpmaddubsw` + `vpmaddwd`, whose int16 pair sums are exact
only when each pair of weights sums to at most 128 in magnitude (see `codegen.llvm.dot`). It
costs one bit of weight precision, as ONNX Runtime's `reduce_range` does for the same reason.
`scheme_for_target` picks between the two.

`vta` suits the accelerator (`autorelay.vta`): its GEMM core multiplies int8 by int8 with no zero
points, and its ALU can only add, shift, clip and multiply by a 16-bit immediate, the same for every
lane of a tile. So activations are symmetric int8, weights symmetric int8 per tensor, and every
scale is a power of two: the requantize ratio `s_x * s_w / s_out` is then an exact power of two and
the epilogue a rounding shift. The cost is accuracy (up to 2x coarser scales), as in Relay's VTA
flow; the CPU runs the same graph bit-exactly, so either backend can execute any layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

WEIGHT_QMAX = 127


@dataclass(frozen=True)
class QuantizeScheme:
    name: str
    activation_dtype: str  # "uint8" (asymmetric) or "int8" (symmetric, zero point 0)
    per_channel_weights: bool
    power_of_two: bool
    weight_qmax: int = WEIGHT_QMAX  # weights in [-weight_qmax, weight_qmax]

    @property
    def qmin(self) -> int:
        return int(np.iinfo(self.activation_dtype).min)

    @property
    def qmax(self) -> int:
        return int(np.iinfo(self.activation_dtype).max)

    def activation_qparams(self, lo: float, hi: float) -> tuple[np.float32, int]:
        """Scale and zero point covering [lo, hi] (widened to hold 0, which must be exact)."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        if self.activation_dtype == "int8":
            scale = self._snap(max(-lo, hi, 1e-8) / self.qmax)
            return scale, 0
        scale = self._snap(max(hi - lo, 1e-8) / (self.qmax - self.qmin))
        zp = int(np.clip(np.round(-lo / float(scale)) + self.qmin, self.qmin, self.qmax))
        return scale, zp

    def quantize_weight(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Symmetric int8 weights and their float32 scales: one per output channel (axis 0), or
        one for the tensor (repeated per channel, so consumers see the same shape)."""
        w64 = np.asarray(w, np.float64)
        amax = np.abs(w64.reshape(w64.shape[0], -1)).max(axis=1)
        if not self.per_channel_weights:
            amax = np.full_like(amax, amax.max(initial=0.0))
        qmax = self.weight_qmax
        scale = np.array([self._snap(float(a) / qmax) if a > 0 else self._snap(1.0 / qmax)
                          for a in amax], np.float32)
        shape = (-1,) + (1,) * (w64.ndim - 1)
        q = np.clip(np.round(w64 / scale.astype(np.float64).reshape(shape)), -qmax, qmax)
        return q.astype(np.int8), scale

    def _snap(self, scale: float) -> np.float32:
        """The scale itself, or the next power of two up (so the range still fits)."""
        if not self.power_of_two:
            return np.float32(scale)
        return np.float32(2.0 ** math.ceil(math.log2(scale)))


CPU_SCHEME = QuantizeScheme("cpu", "uint8", per_channel_weights=True, power_of_two=False)
CPU_NARROW_SCHEME = QuantizeScheme("cpu-narrow", "uint8", per_channel_weights=True, power_of_two=False,
                                   weight_qmax=63)
VTA_SCHEME = QuantizeScheme("vta", "int8", per_channel_weights=False, power_of_two=True)
SCHEMES = {s.name: s for s in (CPU_SCHEME, CPU_NARROW_SCHEME, VTA_SCHEME)}


def scheme_for_target(target: Any) -> QuantizeScheme:
    """The CPU scheme whose int8 convolutions run fastest on `target` (an `autorelay.Target`):
    `cpu-narrow` where 7-bit weights unlock `vpmaddubsw` (AVX2 without VNNI), else `cpu`."""
    from autorelay.codegen.llvm.dot import narrow_dot_available

    if target.kind != "cpu":
        return CPU_SCHEME
    return CPU_NARROW_SCHEME if narrow_dot_available(target, target.vector_lanes("int32")) else CPU_SCHEME


def scheme_named(name: str | QuantizeScheme) -> QuantizeScheme:
    if isinstance(name, QuantizeScheme):
        return name
    if name not in SCHEMES:
        raise ValueError(f"unknown quantization scheme {name!r}; known: {', '.join(SCHEMES)}")
    return SCHEMES[name]


__all__ = ["CPU_NARROW_SCHEME", "CPU_SCHEME", "SCHEMES", "VTA_SCHEME", "QuantizeScheme", "scheme_for_target",
           "scheme_named"]
