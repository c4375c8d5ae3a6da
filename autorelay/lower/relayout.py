"""A kernel input's recorded re-layouts (the schedule's Pack / Pad steps) as a compute.

Constant weights are packed once at build time with NumPy (`autorelay.schedule.relayout`).
A non-constant input that a kernel reads blocked (batch_matmul's second operand, an activation)
must be packed on every run; as a compiled injective kernel that costs one pass over the data and
no allocation. The index map inverts the recorded operations last to first, with the same meaning
as `relayout`: `("pad", d, n)` zero-extends axis d to n; `("pack", axis, f, pos)` zero-pads the axis
to a multiple of f, splits it into (outer, f) and moves the f-axis to position `pos`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autorelay.ir.expr import Function
from autorelay.ir.types import TensorType
from autorelay.schedule.relayout import packed_shape
from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.halo import BufferPlan
from autorelay.te.tensor import ComputeDef


def relayout_compute(shape: Sequence[int], dtype: str, ops: Sequence[Any], name: str = "pack") -> ComputeDef:
    """src (of `shape`) -> its packed form, zero where the packing pads."""
    shapes = [tuple(shape)]
    for op in ops:
        shapes.append(packed_shape(shapes[-1], [op]))
    src = te.placeholder(tuple(shape), dtype, "src")

    def body(*idx: E.Expr) -> E.Expr:
        conds: list[E.Expr] = []
        cur = list(idx)
        for op, in_shape in zip(reversed(ops), reversed(shapes[:-1])):
            if op[0] == "pad":
                d = op[1]
                conds.append(cur[d] < in_shape[d])
            else:
                _, axis, f, pos = op
                inner = cur[pos]
                rest = cur[:pos] + cur[pos + 1 :]
                full = rest[axis] * f + inner
                conds.append(full < in_shape[axis])
                cur = rest[:axis] + [full] + rest[axis + 1 :]
        safe = [E.minimum(v, n - 1) for v, n in zip(cur, shape)]
        return E.select(E.all_of(*conds), src[tuple(safe)], E.const(0, dtype)) if conds else src[tuple(cur)]

    out = te.compute(shapes[-1], body, name=name, tag="injective")
    return ComputeDef((src,), (out,), name)


def compile_pack(shape: Sequence[int], dtype: str, ops: Sequence[Any], target: Any,
                 pitches: tuple = ()) -> Any:
    """The compiled packing kernel of an input of `shape` (read from a bordered buffer of row
    pitches `pitches`, `BufferPlan`'s form, when given): what each executor runs before a kernel
    that reads a non-constant input blocked."""
    from autorelay.kernel import compile_kernel  # here: the kernel layer imports the lowering package

    cdef = relayout_compute(shape, dtype, ops)
    return compile_kernel(BufferPlan(pitches=pitches).apply(cdef) if pitches else cdef, None, target)


def pack_detail(shape: Sequence[int], ops: Sequence[Any]) -> str:
    """The build report's line for a packing kernel."""
    return f"re-layout {list(shape)} for a blocked read: {list(ops)}"


class PackKernels:
    """The packing kernels of one executable's non-constant inputs (the VM's and AoT's): compiled
    once per distinct (shape, dtype, ops) of the parameter they pack, each announced once to
    `report` with its build-report line."""

    def __init__(self, target: Any, report: Callable[[str], None]) -> None:
        self.target, self.report = target, report
        self._kernels: dict[tuple, Any] = {}

    def for_param(self, fn: Function, index: int, ops: Sequence[Any]) -> Any:
        """The kernel packing parameter `index` of the (static) primitive function `fn`."""
        ptype = fn.params[index].checked_type
        assert isinstance(ptype, TensorType)
        shape, dtype = ptype.concrete_shape, str(ptype.dtype)
        key = (shape, dtype, tuple(map(tuple, ops)))
        if key not in self._kernels:
            self._kernels[key] = compile_pack(shape, dtype, ops, self.target)
            self.report(pack_detail(shape, ops))
        return self._kernels[key]
