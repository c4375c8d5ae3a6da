"""FoldConstant: evaluate constant sub-graphs at compile time with the ops' NumPy references.

A call is folded when its callee is a registered, *pure* op with a reference and every argument
is a constant (or a tuple of constants). Effectful ops (`OpDef.effectful`) and reference
operations (`ref`, `ref_read`, `ref_write`) are never evaluated: folding them would drop or
duplicate a side effect. Besides calls, the pass projects fields out of constant tuples, inlines
`let`s bound to constants and picks the branch of an `if` whose condition is constant.
Primitive (fused) functions are left alone: their bodies are kernels, not graph-level code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType
from autorelay.ir.visitor import ExprMutator
from autorelay.op import registry
from autorelay.transform.pass_base import FunctionPass


def _is_const(e: Expr) -> bool:
    return isinstance(e, Constant) or (isinstance(e, Tuple) and all(_is_const(f) for f in e.fields))


def _value(e: Expr) -> Any:
    return e.data if isinstance(e, Constant) else tuple(_value(f) for f in e.fields)  # type: ignore[union-attr]


def _to_expr(value: Any, like: Expr) -> Expr:
    """A constant (or tuple of constants) holding `value`, in the dtype type inference gave `like`."""
    t = like.checked_type if like.has_checked_type else None
    if isinstance(value, tuple | list):
        types = list(t.fields) if isinstance(t, TupleType) else []
        fields = [_to_expr(v, _Typed(types[i] if i < len(types) else None)) for i, v in enumerate(value)]
        return Tuple(tuple(fields))
    arr = np.asarray(value)
    if isinstance(t, TensorType) and str(arr.dtype) != t.dtype:
        arr = arr.astype(t.dtype)
    c = Constant(arr)
    c.set_checked_type(c.type)
    return c


class _Typed:
    """A stand-in carrying only a (possibly absent) checked type, for `_to_expr` on tuple fields."""

    def __init__(self, t: Any) -> None:
        self.t = t

    @property
    def has_checked_type(self) -> bool:
        return self.t is not None

    @property
    def checked_type(self) -> Any:
        return self.t


def foldable(call: Call) -> bool:
    """A call of a pure op with a reference (the only calls FoldConstant may evaluate)."""
    if not isinstance(call.op, Op) or not registry.exists(call.op.name):
        return False
    opdef = registry.get(call.op.name)
    return opdef.reference is not None and not opdef.effectful


class ConstantFolder(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.subst: dict[int, Expr] = {}
        self.folded = 0

    def visit_var(self, v: Var) -> Expr:
        return self.subst.get(id(v), v)

    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        assert isinstance(new, Call)
        if foldable(new) and all(_is_const(a) for a in new.args):
            opdef = registry.get(new.op.name)  # type: ignore[union-attr]
            try:
                value = opdef.reference(new.attrs, *(_value(a) for a in new.args))
            except Exception:
                return new
            self.folded += 1
            return _to_expr(value, c)
        return new

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        v = self.visit(t.tuple_value)
        if isinstance(v, Tuple) and _is_const(v):
            return v.fields[t.index]
        return t if v is t.tuple_value else t.replace(tuple_value=v)

    def visit_if(self, i: If) -> Expr:
        cond = self.visit(i.cond)
        if isinstance(cond, Constant) and cond.data.size == 1:
            return self.visit(i.true_branch if bool(cond.data.reshape(())) else i.false_branch)
        t, f = self.visit(i.true_branch), self.visit(i.false_branch)
        if cond is i.cond and t is i.true_branch and f is i.false_branch:
            return i
        return i.replace(cond=cond, true_branch=t, false_branch=f)

    def visit_let(self, let: Let) -> Expr:
        kept: list[tuple[Let, Expr]] = []
        node: Expr = let
        while isinstance(node, Let):
            value = self.visit(node.value)
            if _is_const(value):
                self.subst[id(node.var)] = value
            else:
                kept.append((node, value))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(kept):
            if value is old.value and body is old.body:
                body = old
            else:
                body = Let(old.var, value, body)
        return body


@dataclass(frozen=True)
class FoldConstant(FunctionPass):
    """Evaluate every constant sub-graph of pure ops; see the module docstring for the rules."""

    name: ClassVar[str] = "FoldConstant"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = ConstantFolder().visit(fn)
        assert isinstance(out, Function)
        return out


def fold_expr(expr: Expr) -> Expr:
    """Fold one expression (for other passes that build constant arithmetic)."""
    return ConstantFolder().visit(expr)
