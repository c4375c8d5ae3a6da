"""EliminateCommonSubexpr: compute each pure op call (and projection) once per scope.

Two calls are the same when they call the same op with the same attributes on the *same*
(already deduplicated) arguments, so a bottom-up walk with a table keyed by
`(op, attrs, type_args, ids of rewritten args)` finds every repeat in one pass. Effectful ops and
calls of functions/globals are never merged. Scopes matter: an expression first met inside one
`if` branch, `match` clause or function body is not visible from a sibling, so tables (and the
memo of rewritten nodes) form a chain from the innermost scope outwards. In A-normal form a repeat
of `let %a = f(x)` becomes a use of `%a`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from autorelay.ir.expr import (
    Call,
    Clause,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    TupleGetItem,
)
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import VISIT_METHOD, ExprMutator
from autorelay.op import registry
from autorelay.transform.pass_base import FunctionPass


class _Scope:
    def __init__(self, parent: _Scope | None) -> None:
        self.parent = parent
        self.table: dict[Any, Expr] = {}
        self.memo: dict[int, tuple[Expr, Expr]] = {}

    def lookup(self, key: Any) -> Expr | None:
        s: _Scope | None = self
        while s is not None:
            hit = s.table.get(key)
            if hit is not None:
                return hit
            s = s.parent
        return None

    def memo_get(self, expr: Expr) -> Expr | None:
        s: _Scope | None = self
        while s is not None:
            hit = s.memo.get(id(expr))
            if hit is not None and hit[0] is expr:
                return hit[1]
            s = s.parent
        return None


def _mergeable(c: Call) -> bool:
    if not isinstance(c.op, Op):
        return False
    return not (registry.exists(c.op.name) and registry.get(c.op.name).effectful)


def _const_key(c: Constant) -> Any:
    # Small constants (scalars, per-channel vectors) are merged by value; big ones by identity.
    if c.data.size <= 64:
        return ("const", str(c.data.dtype), c.data.shape, np.ascontiguousarray(c.data).tobytes())
    return None


class _CSE(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.scope = _Scope(None)
        self.merged = 0
        self.key_of: dict[int, Any] = {}

    def visit(self, expr: Expr) -> Any:
        hit = self.scope.memo_get(expr)
        if hit is not None:
            return hit
        # Dispatch without the base class's memo: that one is global, ours follows scopes.
        result = getattr(self, VISIT_METHOD[type(expr)])(expr)
        self.scope.memo[id(expr)] = (expr, result)
        return result

    def _in_scope(self, expr: Expr) -> Expr:
        self.scope = _Scope(self.scope)
        try:
            return self.visit(expr)
        finally:
            assert self.scope.parent is not None
            self.scope = self.scope.parent

    def _dedup(self, key: Any, new: Expr) -> Expr:
        hit = self.scope.lookup(key)
        if hit is not None:
            self.merged += 1
            return hit
        self.scope.table[key] = new
        self.key_of[id(new)] = key
        return new

    def visit_constant(self, c: Constant) -> Expr:
        key = _const_key(c)
        return c if key is None else self._dedup(key, c)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        assert isinstance(new, Call)
        if not _mergeable(new):
            return new
        key = ("call", new.op, new.attrs, new.type_args, tuple(id(a) for a in new.args))
        return self._dedup(key, new)

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        new = super().visit_tuple_getitem(t)
        assert isinstance(new, TupleGetItem)
        return self._dedup(("proj", id(new.tuple_value), new.index), new)

    def visit_function(self, f: Function) -> Expr:
        if f.is_primitive:
            return f
        body = self._in_scope(f.body)
        return f if body is f.body else f.replace(body=body)

    def visit_if(self, i: If) -> Expr:
        cond = self.visit(i.cond)
        t, e = self._in_scope(i.true_branch), self._in_scope(i.false_branch)
        if cond is i.cond and t is i.true_branch and e is i.false_branch:
            return i
        return i.replace(cond=cond, true_branch=t, false_branch=e)

    def visit_match(self, m: Match) -> Expr:
        data = self.visit(m.data)
        clauses = []
        changed = data is not m.data
        for c in m.clauses:
            rhs = self._in_scope(c.rhs)
            changed |= rhs is not c.rhs
            clauses.append(c if rhs is c.rhs else Clause(c.lhs, rhs))
        return m.replace(data=data, clauses=tuple(clauses)) if changed else m

    def visit_let(self, let: Let) -> Expr:
        chain: list[tuple[Let, Expr]] = []
        node: Expr = let
        while isinstance(node, Let):
            value = self.visit(node.value)
            # Later repeats of this value read the variable instead of recomputing it.
            key = self.key_of.get(id(value))
            fresh = key is not None and self.scope.table.get(key) is value
            if fresh and isinstance(value, Call | TupleGetItem):
                self.scope.table[key] = node.var
            chain.append((node, value))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(chain):
            body = old if (value is old.value and body is old.body) else Let(old.var, value, body)
        return body


@dataclass(frozen=True)
class EliminateCommonSubexpr(FunctionPass):
    """Merge repeated pure op calls, projections and small equal constants within each scope."""

    name: ClassVar[str] = "EliminateCommonSubexpr"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _CSE().visit(fn)
        assert isinstance(out, Function)
        return out
