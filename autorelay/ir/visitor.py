"""Memoising visitor and mutator bases for expressions.

Memo tables are keyed by node identity (`id`), which is O(1) and treats a shared sub-graph as
one node (a DAG is visited once, not once per path). Walks are recursive; callers that may meet
deep graphs wrap their entry point with `autorelay.utils.deep.deep`, which the `visit_module`
helpers here already do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autorelay.ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule

VISIT_METHOD = {
    Var: "visit_var",
    GlobalVar: "visit_global_var",
    Constant: "visit_constant",
    Op: "visit_op",
    Call: "visit_call",
    Function: "visit_function",
    Let: "visit_let",
    If: "visit_if",
    Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem",
    Constructor: "visit_constructor",
    Match: "visit_match",
    RefCreate: "visit_ref_create",
    RefRead: "visit_ref_read",
    RefWrite: "visit_ref_write",
}


class ExprFunctor:
    """Dispatches `visit(e)` to `visit_<kind>(e)`, memoising the result per node."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[Expr, Any]] = {}

    def visit(self, expr: Expr) -> Any:
        key = id(expr)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is expr:
            return hit[1]
        try:
            method = VISIT_METHOD[type(expr)]
        except KeyError:
            raise TypeError(f"not an expression: {type(expr).__name__}") from None
        result = getattr(self, method)(expr)
        self.memo[key] = (expr, result)  # keep expr alive so its id is not reused
        return result


class ExprVisitor(ExprFunctor):
    """Visits every sub-expression once. Override `visit_*` and call the base to keep walking."""

    def visit_var(self, v: Var) -> None:
        pass

    def visit_global_var(self, g: GlobalVar) -> None:
        pass

    def visit_constant(self, c: Constant) -> None:
        pass

    def visit_op(self, o: Op) -> None:
        pass

    def visit_constructor(self, c: Constructor) -> None:
        pass

    def visit_call(self, c: Call) -> None:
        self.visit(c.op)
        for a in c.args:
            self.visit(a)

    def visit_function(self, f: Function) -> None:
        for p in f.params:
            self.visit(p)
        self.visit(f.body)

    def visit_let(self, let: Let) -> None:
        # Iterate along let chains instead of recursing into each body.
        while True:
            self.visit(let.var)
            self.visit(let.value)
            body = let.body
            if isinstance(body, Let) and id(body) not in self.memo:
                self.memo[id(body)] = (body, None)
                let = body
                continue
            self.visit(body)
            return

    def visit_if(self, i: If) -> None:
        self.visit(i.cond)
        self.visit(i.true_branch)
        self.visit(i.false_branch)

    def visit_tuple(self, t: Tuple) -> None:
        for f in t.fields:
            self.visit(f)

    def visit_tuple_getitem(self, t: TupleGetItem) -> None:
        self.visit(t.tuple_value)

    def visit_match(self, m: Match) -> None:
        self.visit(m.data)
        for c in m.clauses:
            self.visit_pattern(c.lhs)
            self.visit(c.rhs)

    def visit_pattern(self, p: Pattern) -> None:
        if isinstance(p, PatternVar):
            self.visit(p.var)
        elif isinstance(p, PatternConstructor | PatternTuple):
            for sub in p.patterns:
                self.visit_pattern(sub)

    def visit_ref_create(self, r: RefCreate) -> None:
        self.visit(r.value)

    def visit_ref_read(self, r: RefRead) -> None:
        self.visit(r.ref)

    def visit_ref_write(self, r: RefWrite) -> None:
        self.visit(r.ref)
        self.visit(r.value)


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class ExprMutator(ExprFunctor):
    """Rebuilds an expression bottom-up; a node whose children are unchanged is returned as is."""

    def visit_var(self, v: Var) -> Expr:
        return v

    def visit_global_var(self, g: GlobalVar) -> Expr:
        return g

    def visit_constant(self, c: Constant) -> Expr:
        return c

    def visit_op(self, o: Op) -> Expr:
        return o

    def visit_constructor(self, c: Constructor) -> Expr:
        return c

    def visit_call(self, c: Call) -> Expr:
        op = self.visit(c.op)
        args = tuple(self.visit(a) for a in c.args)
        if op is c.op and _same(args, c.args):
            return c
        return c.replace(op=op, args=args)

    def visit_function(self, f: Function) -> Expr:
        params = tuple(self.visit(p) for p in f.params)
        body = self.visit(f.body)
        if body is f.body and _same(params, f.params):
            return f
        return f.replace(params=params, body=body)

    def visit_let(self, let: Let) -> Expr:
        # Walk the chain iteratively, then rebuild it from the inside out.
        chain: list[tuple[Let, Expr, Expr]] = []
        node: Expr = let
        while isinstance(node, Let) and (id(node) not in self.memo or node is let):
            var = self.visit(node.var)
            value = self.visit(node.value)
            chain.append((node, var, value))
            node = node.body
        body = self.visit(node)
        for old, var, value in reversed(chain):
            if var is old.var and value is old.value and body is old.body:
                new: Expr = old
            else:
                new = old.replace(var=var, value=value, body=body)
            self.memo[id(old)] = (old, new)
            body = new
        return body

    def visit_if(self, i: If) -> Expr:
        c, t, f = self.visit(i.cond), self.visit(i.true_branch), self.visit(i.false_branch)
        if c is i.cond and t is i.true_branch and f is i.false_branch:
            return i
        return i.replace(cond=c, true_branch=t, false_branch=f)

    def visit_tuple(self, t: Tuple) -> Expr:
        fields = tuple(self.visit(f) for f in t.fields)
        return t if _same(fields, t.fields) else t.replace(fields=fields)

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        v = self.visit(t.tuple_value)
        return t if v is t.tuple_value else t.replace(tuple_value=v)

    def visit_pattern(self, p: Pattern) -> Pattern:
        if isinstance(p, PatternVar):
            v = self.visit(p.var)
            return p if v is p.var else PatternVar(v)
        if isinstance(p, PatternConstructor):
            subs = tuple(self.visit_pattern(s) for s in p.patterns)
            return p if _same(subs, p.patterns) else PatternConstructor(p.constructor, subs)
        if isinstance(p, PatternTuple):
            subs = tuple(self.visit_pattern(s) for s in p.patterns)
            return p if _same(subs, p.patterns) else PatternTuple(subs)
        assert isinstance(p, PatternWildcard)
        return p

    def visit_match(self, m: Match) -> Expr:
        data = self.visit(m.data)
        clauses = []
        changed = data is not m.data
        for c in m.clauses:
            lhs, rhs = self.visit_pattern(c.lhs), self.visit(c.rhs)
            if lhs is c.lhs and rhs is c.rhs:
                clauses.append(c)
            else:
                clauses.append(Clause(lhs, rhs))
                changed = True
        return m.replace(data=data, clauses=tuple(clauses)) if changed else m

    def visit_ref_create(self, r: RefCreate) -> Expr:
        v = self.visit(r.value)
        return r if v is r.value else r.replace(value=v)

    def visit_ref_read(self, r: RefRead) -> Expr:
        v = self.visit(r.ref)
        return r if v is r.ref else r.replace(ref=v)

    def visit_ref_write(self, r: RefWrite) -> Expr:
        ref, v = self.visit(r.ref), self.visit(r.value)
        return r if ref is r.ref and v is r.value else r.replace(ref=ref, value=v)


def post_order(expr: Expr, kids: Callable[[Expr], Sequence[Expr]] | None = None) -> list[Expr]:
    """Every sub-expression once, children before parents (iterative; safe on deep graphs).

    `kids` chooses which children to walk into (default: all of them, see `children`); passes use
    it to stop at scopes or at primitive functions.
    """
    kids = kids or children
    out: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(kids(node)):
            if id(child) not in seen:
                stack.append((child, False))
    return out


def children(expr: Expr) -> list[Expr]:
    """Direct sub-expressions of `expr` (pattern variables included for Match)."""
    if isinstance(expr, Call):
        return [expr.op, *expr.args]
    if isinstance(expr, Function):
        return [*expr.params, expr.body]
    if isinstance(expr, Let):
        return [expr.var, expr.value, expr.body]
    if isinstance(expr, If):
        return [expr.cond, expr.true_branch, expr.false_branch]
    if isinstance(expr, Tuple):
        return list(expr.fields)
    if isinstance(expr, TupleGetItem):
        return [expr.tuple_value]
    if isinstance(expr, Match):
        out = [expr.data]
        for c in expr.clauses:
            out.extend(pattern_vars(c.lhs))
            out.append(c.rhs)
        return out
    if isinstance(expr, RefCreate):
        return [expr.value]
    if isinstance(expr, RefRead):
        return [expr.ref]
    if isinstance(expr, RefWrite):
        return [expr.ref, expr.value]
    return []


def pattern_vars(p: Pattern) -> list[Var]:
    if isinstance(p, PatternVar):
        return [p.var]
    if isinstance(p, PatternConstructor | PatternTuple):
        return [v for s in p.patterns for v in pattern_vars(s)]
    return []


def free_vars(expr: Expr) -> list[Var]:
    """Variables used in `expr` but not bound inside it, in first-use order."""
    bound: set[int] = set()
    for node in post_order(expr):
        if isinstance(node, Function):
            bound.update(id(p) for p in node.params)
        elif isinstance(node, Let):
            bound.add(id(node.var))
        elif isinstance(node, Match):
            for c in node.clauses:
                bound.update(id(v) for v in pattern_vars(c.lhs))
    out: list[Var] = []
    seen: set[int] = set()
    for node in post_order(expr):
        if isinstance(node, Var) and id(node) not in bound and id(node) not in seen:
            seen.add(id(node))
            out.append(node)
    return out


def map_module_functions(mod: IRModule, fn) -> IRModule:
    """Apply `fn(GlobalVar, Function) -> Function` to every global of the module."""
    return IRModule({gv: fn(gv, f) for gv, f in mod.functions.items()}, mod.type_definitions)
