"""Where the printer puts each expression: inline, as a `%N = …;` graph binding, and in which block.

The printer shows DAG sharing as graph bindings, like Relay: a node used more than once is bound
once and referred to by name; a call that is an argument of another expression is bound too, so a
deep network prints as a flat list of `%N = op(…);` lines instead of a deeply nested term.

A binding must be visible at every use, and blocks (function bodies, if branches, match clauses,
parenthesised lets) nest lexically. So each bound node is placed in the *lowest common ancestor*
of the blocks of all its uses. The layout is computed once, parents before children (reverse
post-order is a topological order of the DAG), without recursion.
"""

from __future__ import annotations

from autorelay.ir.expr import (
    Call,
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
)
from autorelay.ir.visitor import post_order

ATOMS = (Var, GlobalVar, Op, Constructor, Constant)


class Scope:
    """A printed block. Blocks form a tree; `depth` makes the common-ancestor walk cheap."""

    __slots__ = ("depth", "parent")

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1


def common_ancestor(a: Scope, b: Scope) -> Scope:
    while a.depth > b.depth:
        a = a.parent  # type: ignore[assignment]
    while b.depth > a.depth:
        b = b.parent  # type: ignore[assignment]
    while a is not b:
        a, b = a.parent, b.parent  # type: ignore[assignment]
    return a


class Layout:
    """For one printed root: each composite node's block, use count and whether it is bound."""

    def __init__(self, root: Expr) -> None:
        self.root_scope = Scope(None)
        self.scope: dict[int, Scope] = {id(root): self.root_scope}
        self.uses: dict[int, int] = {}
        self.block_tail: dict[int, bool] = {id(root): True}  # last expression of a block
        self.inline_ok: dict[int, bool] = {id(root): True}  # a call here needs no binding
        self.child_scope: dict[tuple[int, int], Scope] = {}
        self.callee: set[int] = set()  # function literals that are called (fused primitives)
        order = post_order(root)
        self._keep = order  # ids stay valid while the layout lives
        for node in order:
            for child in _children(node):
                if not isinstance(child, ATOMS):
                    self.uses[id(child)] = self.uses.get(id(child), 0) + 1
        for node in reversed(order):
            if not isinstance(node, ATOMS):
                self._place_children(node)

    def _use(self, child: Expr, scope: Scope, tail: bool = False, inline: bool = False) -> None:
        if isinstance(child, ATOMS):
            return
        cid = id(child)
        old = self.scope.get(cid)
        self.scope[cid] = scope if old is None else common_ancestor(old, scope)
        self.block_tail[cid] = tail
        self.inline_ok[cid] = tail or inline

    def _new_scope(self, node: Expr, k: int, parent: Scope) -> Scope:
        s = Scope(parent)
        self.child_scope[(id(node), k)] = s
        return s

    def _place_children(self, n: Expr) -> None:
        s = self.scope[id(n)]
        if isinstance(n, Function):
            self._use(n.body, self._new_scope(n, 0, s), tail=True)
        elif isinstance(n, If):
            self._use(n.cond, s)
            self._use(n.true_branch, self._new_scope(n, 0, s), tail=True)
            self._use(n.false_branch, self._new_scope(n, 1, s), tail=True)
        elif isinstance(n, Match):
            self._use(n.data, s)
            for k, c in enumerate(n.clauses):
                self._use(c.rhs, self._new_scope(n, k, s), tail=True)
        elif isinstance(n, Let):
            inner = s if self.is_statement_let(n) else self._new_scope(n, 0, s)
            self._use(n.value, inner, inline=True)
            self._use(n.body, inner, tail=True)
        else:
            if isinstance(n, Call) and isinstance(n.op, Function):
                self.callee.add(id(n.op))
            for child in _children(n):
                self._use(child, s)

    def is_statement_let(self, n: Let) -> bool:
        """A let printed as `let %x = …;` inside the enclosing block (else it gets its own parens)."""
        return self.block_tail.get(id(n), False) and self.uses.get(id(n), 0) <= 1

    def is_bound(self, n: Expr) -> bool:
        if isinstance(n, ATOMS):
            return False
        if self.uses.get(id(n), 0) > 1:
            return True
        if isinstance(n, Function):  # `%1 = fn (…, Primitive=1) {…}; %1(%0)`, as Relay prints fused code
            return id(n) in self.callee
        return isinstance(n, Call) and not self.inline_ok.get(id(n), False)


def _children(n: Expr) -> list[Expr]:
    if isinstance(n, Call):
        return [n.op, *n.args]
    if isinstance(n, Function):
        return [n.body]
    if isinstance(n, Let):
        return [n.value, n.body]
    if isinstance(n, If):
        return [n.cond, n.true_branch, n.false_branch]
    if isinstance(n, Tuple):
        return list(n.fields)
    if isinstance(n, TupleGetItem):
        return [n.tuple_value]
    if isinstance(n, Match):
        return [n.data, *(c.rhs for c in n.clauses)]
    if isinstance(n, RefCreate):
        return [n.value]
    if isinstance(n, RefRead):
        return [n.ref]
    if isinstance(n, RefWrite):
        return [n.ref, n.value]
    return []
