"""Small helpers shared by the passes: recognising op calls, counting ops, purity, fresh copies.

Kept apart from the passes so that every pass reads the IR the same way (an "op call" is a `Call`
whose callee is an `Op`; a call of a primitive function is not an op call).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from autorelay.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Var,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, Type, TypeVar, free_type_vars
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op import registry


def op_name(expr: Expr) -> str | None:
    """The operator name when `expr` is a call of a registered op, else None."""
    if isinstance(expr, Call) and isinstance(expr.op, Op):
        return expr.op.name
    return None


def is_op(expr: Expr, *names: str) -> bool:
    name = op_name(expr)
    return name is not None and name in names


def opdef_of(expr: Expr) -> registry.OpDef | None:
    name = op_name(expr)
    if name is None or not registry.exists(name):
        return None
    return registry.get(name)


def op_histogram(mod: IRModule | Expr) -> Counter:
    """How many calls of each op a module (every function, primitive ones included) holds."""
    roots = list(mod.functions.values()) if isinstance(mod, IRModule) else [mod]
    counts: Counter = Counter()
    for root in roots:
        for node in post_order(root):
            name = op_name(node)
            if name is not None:
                counts[name] += 1
    return counts


def count_ops(mod: IRModule | Expr) -> int:
    return sum(op_histogram(mod).values())


def primitive_functions(mod: IRModule | Expr) -> list[Function]:
    """Every distinct `Primitive` function in the module (what FuseOps produced)."""
    roots = list(mod.functions.values()) if isinstance(mod, IRModule) else [mod]
    out: list[Function] = []
    for root in roots:
        for node in post_order(root):
            if isinstance(node, Function) and node.is_primitive:
                out.append(node)
    return out


def tensor_type(expr: Expr) -> TensorType | None:
    """The checked tensor type of `expr`, or None when unknown or not a tensor."""
    if not expr.has_checked_type:
        return None
    t = expr.checked_type
    return t if isinstance(t, TensorType) else None


def static_shape(expr: Expr) -> tuple[int, ...] | None:
    t = tensor_type(expr)
    if t is None or not t.is_static:
        return None
    return t.concrete_shape


def with_type(new: Expr, like: Expr) -> Expr:
    """Give a rewritten node the checked type of the node it replaces (same value, same type)."""
    if like.has_checked_type and not new.has_checked_type:
        new.set_checked_type(like.checked_type)
    return new


def const_like(value: Any, like: Expr | str) -> Constant:
    """A constant of `like`'s dtype (a dtype string or an expression with a checked tensor type)."""
    dtype = like if isinstance(like, str) else (tensor_type(like).dtype if tensor_type(like) else "float32")
    c = Constant(np.asarray(value, dtype=dtype))
    c.set_checked_type(c.type)
    return c


def is_constant_value(expr: Expr, value: float) -> bool:
    """True when `expr` is a constant whose every element equals `value`."""
    return isinstance(expr, Constant) and expr.data.size > 0 and bool(np.all(expr.data == value))


def var_uses(root: Expr) -> Counter:
    """How many times each variable (by id) is *referenced* (binding sites excluded)."""
    counts: Counter = Counter()
    for node in post_order(root):
        if isinstance(node, Call):
            kids = [node.op, *node.args]
        elif isinstance(node, Let):
            kids = [node.value, node.body]
        elif isinstance(node, Function):
            kids = [node.body]
        elif isinstance(node, Match):
            kids = [node.data, *(c.rhs for c in node.clauses)]
        else:
            from autorelay.ir.visitor import children

            kids = children(node)
        for k in kids:
            if isinstance(k, Var):
                counts[id(k)] += 1
    return counts


def node_uses(root: Expr) -> Counter:
    """How many parent references each node (by id) has in the graph under `root`."""
    from autorelay.ir.visitor import children

    counts: Counter = Counter()
    for node in post_order(root):
        for k in children(node):
            counts[id(k)] += 1
    return counts


def is_pure(expr: Expr, mod: IRModule | None = None) -> bool:
    """Conservatively: evaluating `expr` has no side effect (no ref write, no effectful op, and no
    call of an unknown function). Calls of globals count as impure unless the global is pure."""
    return Purity(mod).pure(expr)


class Purity:
    """Memoised purity of nodes (by identity), so repeated questions about shared graphs stay cheap.

    `movable=True` asks a stronger question: may the expression be evaluated somewhere else than
    where it is bound (substituted at its use, duplicated, moved past other lets)? A reference's
    creation has an identity (two evaluations make two references) and a read depends on the
    writes before it, so neither moves, though both are pure enough to drop when unused."""

    def __init__(self, mod: IRModule | None, *, movable: bool = False) -> None:
        self.mod = mod
        self.movable = movable
        self.globals: dict[str, bool] = {}
        self.memo: dict[int, tuple[Expr, bool]] = {}

    def pure(self, expr: Expr) -> bool:
        from autorelay.ir.visitor import children

        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in self.memo:
                continue
            kids = children(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if id(k) not in self.memo)
                continue
            ok = self._node_pure(node) and all(self.memo[id(k)][1] for k in kids)
            self.memo[id(node)] = (node, ok)
        return self.memo[id(expr)][1]

    def _node_pure(self, node: Expr) -> bool:
        if isinstance(node, RefWrite) or (self.movable and isinstance(node, RefCreate | RefRead)):
            return False
        if isinstance(node, Call):
            callee = node.op
            if isinstance(callee, Op):
                return not (registry.exists(callee.name) and registry.get(callee.name).effectful)
            if isinstance(callee, Constructor | Function):
                return True  # a function literal's body is checked as a child
            if isinstance(callee, GlobalVar):
                return self._global_pure(callee)
            return False
        return True

    def _global_pure(self, gv: GlobalVar) -> bool:
        if self.mod is None or gv not in self.mod:
            return False
        name = gv.name_hint
        if name not in self.globals:
            self.globals[name] = True  # optimistic for recursion; corrected below
            self.globals[name] = self.pure(self.mod[gv])
        return self.globals[name]


class FreshCopy(ExprMutator):
    """A copy of an expression in which every variable bound inside it is a new `Var`.

    Inlining the same function twice must not bind one `Var` object twice: variables are
    binding sites compared by identity. Annotations that mention type variables are dropped
    (they would be unbound outside the polymorphic function); inference recovers them.
    """

    def __init__(self, subst: dict[int, Expr] | None = None) -> None:
        super().__init__()
        self.subst: dict[int, Expr] = dict(subst or {})

    def fresh(self, v: Var) -> Var:
        ann: Type | None = v.type_annotation
        if ann is not None and free_type_vars(ann):
            ann = None
        nv = Var(v.name_hint, ann)
        self.subst[id(v)] = nv
        return nv

    def visit_var(self, v: Var) -> Expr:
        return self.subst.get(id(v), v)

    def visit_function(self, f: Function) -> Expr:
        params = tuple(self.fresh(p) for p in f.params)
        body = self.visit(f.body)
        ret = f.ret_type if f.ret_type is None or not _mentions_type_vars(f.ret_type) else None
        return Function(params, body, ret, f.type_params, f.attrs)

    def visit_let(self, let: Let) -> Expr:
        bindings = []
        node: Expr = let
        while isinstance(node, Let):
            nv = self.fresh(node.var)
            bindings.append((nv, self.visit(node.value)))
            node = node.body
        body = self.visit(node)
        for var, value in reversed(bindings):
            body = Let(var, value, body)
        return body

    def visit_match(self, m: Match) -> Expr:
        from autorelay.ir.visitor import pattern_vars

        for c in m.clauses:
            for v in pattern_vars(c.lhs):
                self.fresh(v)
        return super().visit_match(m)


def _mentions_type_vars(t: Type) -> bool:
    return isinstance(t, TypeVar) or bool(free_type_vars(t))
