"""Tensor compute DSL: placeholders, `compute(shape, lambda i, j: ...)`, reductions, inlining.

An op's compute is `compute(inputs: list[Tensor], attrs) -> Tensor` (see `autorelay.te.ops`).
"""

from autorelay.te.expr import Expr, IterVar, Var, call, cast, const, maximum, minimum, select
from autorelay.te.tensor import (
    ComputeDef,
    Tensor,
    compute,
    inline_injective,
    make_def,
    max,
    min,
    placeholder,
    prod,
    reduce_axis,
    sum,
)

__all__ = [
    "ComputeDef",
    "Expr",
    "IterVar",
    "Tensor",
    "Var",
    "call",
    "cast",
    "compute",
    "const",
    "inline_injective",
    "make_def",
    "max",
    "maximum",
    "min",
    "minimum",
    "placeholder",
    "prod",
    "reduce_axis",
    "select",
    "sum",
]
