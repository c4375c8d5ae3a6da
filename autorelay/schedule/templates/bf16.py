"""bf16 templates: the dense of `autorelay.te.nn_bf16`, float32 accumulators.

The int8 dense's register tile (`int8.DenseInt8Template`) with the weight packed in pairs of K
(`[N/NR, K/2, NR, 2]`, K zero-padded to even: the word 0 is +0.0) and the pair tensorized as a
bf16 dot (`Tensorize(stage, axis, "dot")`): one `vdpbf16ps` per vector of float32 accumulators
with AVX512-BF16, two multiply-adds on the widened words elsewhere (`codegen.llvm.dot`). A row's
pair of data words is one 32-bit broadcast serving every vector of the tile. Knobs are the int8
dense's; vector widths and register counts come from the target.
"""

from __future__ import annotations

from autorelay.codegen.llvm.dot import BF16_GROUP
from autorelay.schedule.templates.base import register
from autorelay.schedule.templates.int8 import DenseInt8Template
from autorelay.target import Target

__all__ = ["DenseBf16Template"]


class DenseBf16Template(DenseInt8Template):
    """bf16 dense `[M, K] x [N, K] -> float32 [M, N]`; see the module docstring."""

    name = "dense_bf16"
    tags = ("dense_bf16",)

    @staticmethod
    def _group(target: Target) -> int:
        return BF16_GROUP


register(DenseBf16Template())
