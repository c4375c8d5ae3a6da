"""SimplifyExpr: algebraic identities that leave the value unchanged.

* `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1` → `x`, but only when the result has exactly
  `x`'s type (a broadcast against a bigger constant changes the shape, a dtype promotion the dtype).
* `reshape(reshape(x))` → one `reshape` to the final shape; a reshape to the same shape → `x`.
* `transpose(transpose(x, a), b)` → `transpose(x, a∘b)`, or `x` when the composition is the
  identity; `transpose` with the identity permutation → `x`.
* `cast(x, t)` where `x` already has dtype `t` → `x`; `negative(negative(x))` → `x`.
* `layout_transform(layout_transform(x, A, B), B, C)` → `layout_transform(x, A, C)`, or `x` when
  `A == C` (back-to-back transforms cancel).
* a convolution's leading and trailing kernel taps that read only padding (a dilated kernel on a
  small map) are dropped, with the padding they spanned (`conv_taps.drop_dead_taps`).

Rules read checked types, so the pass requires them; rewritten nodes inherit the checked type of
the node they replace, which lets rules cascade bottom-up in one walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Expr, Function, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.op import registry
from autorelay.transform.conv_taps import drop_dead_taps
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import is_constant_value, op_name, static_shape, tensor_type, with_type


def _same_type(a: Expr, b: Expr) -> bool:
    return a.has_checked_type and b.has_checked_type and a.checked_type == b.checked_type


def _perm(axes: object, ndim: int) -> list[int] | None:
    if axes is None or axes == ():
        return list(range(ndim))[::-1]
    try:
        return [int(a) % ndim for a in axes]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return None


def simplify_call(c: Call) -> Expr:
    """One simplification step at `c` (its arguments already simplified)."""
    name = op_name(c)
    args = c.args
    if name in ("add", "subtract", "multiply", "divide"):
        unit = 0 if name in ("add", "subtract") else 1
        x, y = args
        if is_constant_value(y, unit) and _same_type(x, c):
            return x
        if name in ("add", "multiply") and is_constant_value(x, unit) and _same_type(y, c):
            return y
    elif name == "reshape":
        x = args[0]
        if _same_type(x, c):
            return x
        shape = static_shape(c)
        if op_name(x) == "reshape" and shape is not None:
            return with_type(registry.call("reshape", x.args[0], newshape=shape), c)  # type: ignore[union-attr]
    elif name == "transpose":
        x = args[0]
        t = tensor_type(c)
        if t is None:
            return c
        outer = _perm(c.attrs.get("axes"), t.ndim)
        if outer is None:
            return c
        if outer == list(range(t.ndim)):
            return x
        if op_name(x) == "transpose":
            assert isinstance(x, Call)
            inner = _perm(x.attrs.get("axes"), t.ndim)
            if inner is not None:
                composed = [inner[i] for i in outer]
                if composed == list(range(t.ndim)):
                    return x.args[0]
                return with_type(registry.call("transpose", x.args[0], axes=composed), c)
    elif name == "cast":
        if _same_type(args[0], c):
            return args[0]
    elif name == "negative":
        if op_name(args[0]) == "negative":
            return args[0].args[0]  # type: ignore[union-attr]
    elif name == "layout_transform":
        return cancel_layout_transforms(c)
    elif name in ("nn.conv1d", "nn.conv2d"):
        return drop_dead_taps(c) or c
    return c


def cancel_layout_transforms(c: Call) -> Expr:
    """`layout_transform(layout_transform(x, A, B), B, C)` → `x` (A == C) or one transform A → C."""
    x = c.args[0]
    if c.attrs["src_layout"] == c.attrs["dst_layout"]:
        return x
    if op_name(x) == "layout_transform":
        assert isinstance(x, Call)
        a, b = x.attrs["src_layout"], x.attrs["dst_layout"]
        if b == c.attrs["src_layout"]:
            if a == c.attrs["dst_layout"]:
                return x.args[0]
            dst = c.attrs["dst_layout"]
            merged = registry.call("layout_transform", x.args[0], src_layout=a, dst_layout=dst)
            return with_type(merged, c)
    return c


class _Simplifier(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.rewrites = 0

    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        assert isinstance(new, Call)
        with_type(new, c)
        while isinstance(new, Call):
            out = simplify_call(new)
            if out is new:
                break
            self.rewrites += 1
            new = out  # type: ignore[assignment]
        return new


@dataclass(frozen=True)
class SimplifyExpr(FunctionPass):
    """Apply the algebraic identities listed in the module docstring until none applies."""

    name: ClassVar[str] = "SimplifyExpr"
    requires_types: ClassVar[bool] = True

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Simplifier().visit(fn)
        assert isinstance(out, Function)
        return out
