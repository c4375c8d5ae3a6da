"""Normal forms: A-normal form, graph normal form and basic-block normal form.

* **Graph normal form (GNF)**: a pure `let` is replaced by its value, so sharing is expressed by
  the graph itself (a node with several parents). Lets with effects, or recursive lets, stay.
* **A-normal form (ANF)**: every compound expression is bound by a `let` and every operand is an
  atom (variable, constant, global, op, constructor). Evaluation order becomes explicit.
* **Basic-block normal form (BBNF)**: each scope (function body, `if` branch, `match` clause) is a
  graph; only an expression shared *across* scopes is let-bound, in the innermost scope enclosing
  all its uses, so that a branch never relies on a node computed in its sibling.

ANF and BBNF share one algorithm. A node is placed in the lowest common ancestor of the scopes it
is used from (computed parents-first over a topological order), then each scope is rebuilt as a
let chain of its nodes in dependency order. Primitive functions are atoms and stay untouched.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

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
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    bind_lets,
)
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, free_vars, post_order
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import Purity

ATOMS = (Var, GlobalVar, Constant, Op, Constructor)


def is_atom(e: Expr) -> bool:
    return isinstance(e, ATOMS) or (isinstance(e, Function) and e.is_primitive)


def scoped_children(n: Expr) -> list[tuple[Expr, int]]:
    """Children with the index of the new scope each opens (-1: the parent's scope)."""
    if isinstance(n, Call):
        return [(n.op, -1), *((a, -1) for a in n.args)]
    if isinstance(n, Function):
        return [] if n.is_primitive else [(n.body, 0)]
    if isinstance(n, Let):
        return [(n.value, -1), (n.var, -1), (n.body, -1)]
    if isinstance(n, If):
        return [(n.cond, -1), (n.true_branch, 0), (n.false_branch, 1)]
    if isinstance(n, Match):
        return [(n.data, -1), *((c.rhs, i) for i, c in enumerate(n.clauses))]
    if isinstance(n, Tuple):
        return [(f, -1) for f in n.fields]
    if isinstance(n, TupleGetItem):
        return [(n.tuple_value, -1)]
    if isinstance(n, RefCreate):
        return [(n.value, -1)]
    if isinstance(n, RefRead):
        return [(n.ref, -1)]
    if isinstance(n, RefWrite):
        return [(n.ref, -1), (n.value, -1)]
    return []


class _Scoper:
    """Places every node of one function body in a scope and rebuilds the scopes as let chains."""

    def __init__(self, root: Expr, bind_all: bool) -> None:
        self.bind_all = bind_all
        self.order = post_order(root, lambda n: [k for k, _ in scoped_children(n)])
        self.parent: list[int] = [-1]
        self.depth: list[int] = [0]
        self.scope: dict[int, int] = {id(root): 0}
        self.nested_use: set[int] = set()
        self.child_scope: dict[tuple[int, int], int] = {}
        self.uses: Counter = Counter()
        for n in reversed(self.order):
            s = self.scope[id(n)]
            for k, which in scoped_children(n):
                self.uses[id(k)] += 1
                use = s
                if which >= 0:
                    use = self.child_scope[(id(n), which)] = self._new_scope(s)
                prev = self.scope.get(id(k))
                placed = use if prev is None else self._lca(prev, use)
                if prev is not None and (prev != use):
                    self.nested_use.add(id(k))
                self.scope[id(k)] = placed
        self.by_scope: dict[int, list[Expr]] = {}
        for n in self.order:
            self.by_scope.setdefault(self.scope[id(n)], []).append(n)
        self.let_of_value: dict[int, Let] = {}
        for n in self.order:
            if isinstance(n, Let) and not is_atom(n.value) and self.scope[id(n.value)] == self.scope[id(n)]:
                self.let_of_value.setdefault(id(n.value), n)
        self.deferred = {id(let.var) for let in self.let_of_value.values()}
        self.let_of_var = {id(n.var): n for n in self.order if isinstance(n, Let)}
        self.atom: dict[int, Expr] = {}

    def _new_scope(self, parent: int) -> int:
        self.parent.append(parent)
        self.depth.append(self.depth[parent] + 1)
        return len(self.parent) - 1

    def _lca(self, a: int, b: int) -> int:
        while self.depth[a] > self.depth[b]:
            a = self.parent[a]
        while self.depth[b] > self.depth[a]:
            b = self.parent[b]
        while a != b:
            a, b = self.parent[a], self.parent[b]
        return a

    def get(self, e: Expr) -> Expr:
        if is_atom(e):
            return e
        return self.atom[id(e)]

    def build(self, scope: int, result: Expr) -> Expr:
        bindings: list[tuple[Var, Expr]] = []
        for n in self.by_scope.get(scope, ()):
            if isinstance(n, Var):
                let = self.let_of_var.get(id(n))
                if let is not None and id(n) not in self.deferred:
                    bindings.append((n, self.get(let.value)))
                continue
            if isinstance(n, ATOMS):
                continue
            if isinstance(n, Let):
                self.atom[id(n)] = self.get(n.body)
                continue
            new = self._rebuild(n)
            let = self.let_of_value.get(id(n))
            if let is not None:
                bindings.append((let.var, new))
                self.atom[id(n)] = let.var
            elif (self.bind_all and not is_atom(n)) or id(n) in self.nested_use:
                v = Var("x")
                bindings.append((v, new))
                self.atom[id(n)] = v
            else:
                self.atom[id(n)] = new
        return bind_lets(bindings, self.get(result))

    def _sub(self, n: Expr, which: int, child: Expr) -> Expr:
        return self.build(self.child_scope[(id(n), which)], child)

    def _rebuild(self, n: Expr) -> Expr:
        g = self.get
        if isinstance(n, Call):
            return Call(g(n.op), tuple(g(a) for a in n.args), n.attrs, n.type_args)
        if isinstance(n, Function):
            if n.is_primitive:
                return n
            return Function(n.params, self._sub(n, 0, n.body), n.ret_type, n.type_params, n.attrs)
        if isinstance(n, If):
            return If(g(n.cond), self._sub(n, 0, n.true_branch), self._sub(n, 1, n.false_branch))
        if isinstance(n, Match):
            clauses = tuple(Clause(c.lhs, self._sub(n, i, c.rhs)) for i, c in enumerate(n.clauses))
            return Match(g(n.data), clauses, n.complete)
        if isinstance(n, Tuple):
            return Tuple(tuple(g(f) for f in n.fields))
        if isinstance(n, TupleGetItem):
            return TupleGetItem(g(n.tuple_value), n.index)
        if isinstance(n, RefCreate):
            return RefCreate(g(n.value))
        if isinstance(n, RefRead):
            return RefRead(g(n.ref))
        if isinstance(n, RefWrite):
            return RefWrite(g(n.ref), g(n.value))
        raise TypeError(f"unexpected node {type(n).__name__}")


def _scoped(fn: Function, bind_all: bool) -> Function:
    body = _Scoper(fn.body, bind_all).build(0, fn.body) if not is_atom(fn.body) else fn.body
    return fn if body is fn.body else fn.replace(body=body)


@dataclass(frozen=True)
class ToANormalForm(FunctionPass):
    """Bind every compound sub-expression with a `let`; operands become atoms."""

    name: ClassVar[str] = "ToANormalForm"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        return _scoped(fn, bind_all=True)


@dataclass(frozen=True)
class ToBasicBlockNormalForm(FunctionPass):
    """Let-bind exactly the expressions shared across scopes, at their innermost common scope."""

    name: ClassVar[str] = "ToBasicBlockNormalForm"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        return _scoped(fn, bind_all=False)


def _closure_reads(fn: Function) -> set[int]:
    """The variables that some closure inside `fn` reads from outside itself."""
    inner = [n for n in post_order(fn.body) if isinstance(n, Function) and not n.is_primitive]
    return {id(v) for f in inner for v in free_vars(f)}


class _ToGraph(ExprMutator):
    def __init__(self, purity: Purity, captured: set[int]) -> None:
        super().__init__()
        self.purity, self.captured = purity, captured
        self.subst: dict[int, Expr] = {}

    def visit_var(self, v: Var) -> Expr:
        return self.subst.get(id(v), v)

    def visit_let(self, let: Let) -> Expr:
        kept: list[tuple[Let, Expr]] = []
        node: Expr = let
        while isinstance(node, Let):
            recursive = any(n is node.var for n in post_order(node.value))  # before substitution: small
            value = self.visit(node.value)
            # a closure that read the value as a graph node would compute it on every call
            in_closure = id(node.var) in self.captured and not isinstance(value, (*ATOMS, Function))
            if not recursive and not in_closure and self.purity.pure(value):
                self.subst[id(node.var)] = value
            else:
                kept.append((node, value))
            node = node.body
        body = self.visit(node)
        for old, value in reversed(kept):
            body = old if (value is old.value and body is old.body) else Let(old.var, value, body)
        return body


@dataclass(frozen=True)
class ToGraphNormalForm(FunctionPass):
    """Replace every movable (pure, and neither creating nor reading a reference), non-recursive
    `let` by its value (sharing becomes graph edges).

    Except a let whose variable a closure reads (a loop body reading what the enclosing graph
    computed, as ONNX Loops do): a graph node has no place of its own, so the closure would
    compute it on every call. Such a let stays, unless its value is an atom."""

    name: ClassVar[str] = "ToGraphNormalForm"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _ToGraph(Purity(mod, movable=True), _closure_reads(fn)).visit(fn)
        assert isinstance(out, Function)
        return out
