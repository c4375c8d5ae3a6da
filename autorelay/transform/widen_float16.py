"""WidenFloat16: float16 ops computed in float32, their results rounded back to float16.

x86 has no float16 arithmetic short of AVX512-FP16, and the kernels are written, scheduled and
tuned for float32. So float16 is a storage type: every op call that reads or makes a float16
tensor gets its float16 operands cast to float32 and its float16 results cast back, with any
`"float16"` attribute (a `dtype`, an `out_dtype`) read as `"float32"`:

    add(%a: f16, %b: f16)  ->  cast(add(cast(%a, f32), cast(%b, f32)), f16)

The casts are elementwise, so fusion folds them into the kernels: a kernel loads halves, widens
them in registers (F16C's `vcvtph2ps`), computes in float32 and narrows what it stores. Each op's
result is still rounded to float16, as NumPy's float16 ops round theirs (the back-to-back casts
between two ops are kept: they are that rounding). Products and reductions add in float32, as
ONNX Runtime and PyTorch do on CPUs, where NumPy adds in float16; they are the more accurate.
`cast` and `cast_like` are left alone: they are the conversions, and code generation emits them;
so is `reinterpret`, which reads a float16's bits, not its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform.pass_base import FunctionPass

NARROW, WIDE = "float16", "float32"
_CONVERSIONS = ("cast", "cast_like", "reinterpret")


def has_float16(t: Type | None) -> bool:
    """Whether a type is, or holds, a float16 tensor."""
    if isinstance(t, TensorType):
        return t.dtype == NARROW
    if isinstance(t, TupleType):
        return any(has_float16(f) for f in t.fields)
    return False


def _at_float16(e: Expr, t: Type, dst: str) -> Expr:
    """`e` with each tensor that is float16 in `t` (the call's own type) cast to `dst`: to float32
    on the way into a widened op, back to float16 on the way out (tuples field by field)."""
    if isinstance(t, TensorType):
        return call("cast", e, dtype=dst) if t.dtype == NARROW else e
    if isinstance(t, TupleType) and has_float16(t):
        fields = e.fields if isinstance(e, Tuple) else [TupleGetItem(e, i) for i in range(len(t.fields))]
        return Tuple(tuple(_at_float16(f, ft, dst) for f, ft in zip(fields, t.fields)))
    return e


class _Widen(ExprMutator):
    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if not (isinstance(new, Call) and isinstance(new.op, Op)) or new.op.name in _CONVERSIONS:
            return new
        arg_types = [a.checked_type for a in c.args]
        touched = any(has_float16(t) for t in arg_types) or has_float16(c.checked_type)
        if not touched and NARROW not in new.attrs.values():
            return new
        args = tuple(_at_float16(a, t, WIDE) for a, t in zip(new.args, arg_types))
        attrs = Attrs({k: WIDE if v == NARROW else v for k, v in new.attrs.items()})
        return _at_float16(Call(new.op, args, attrs).with_span(new.span), c.checked_type, NARROW)


@dataclass(frozen=True)
class WidenFloat16(FunctionPass):
    """Compute float16 ops in float32 (see the module docstring); a no-op on models without float16."""

    name: ClassVar[str] = "WidenFloat16"
    requires_types: ClassVar[bool] = True

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Widen().visit(fn)
        assert isinstance(out, Function)
        return out
