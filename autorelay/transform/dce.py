"""DeadCodeElimination: drop `let` bindings nobody reads, and (optionally) inline single uses.

In graph form an unused expression is simply unreachable, so only `let` chains can hold dead code.
A binding is kept when its variable is read later *or* its value may have a side effect (a ref
write, an effectful op, a call of a function not known to be pure): removing those would change
what the program does. With `inline_once=True`, a pure binding read exactly once is substituted
into its single use (turning A-normal form back towards graph form). Removal cascades: walking a
chain backwards, a binding only read by dead bindings is dead too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Expr, Function, GlobalVar, Let, Var
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, children, post_order
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import Purity, var_uses


def _vars_in(expr: Expr) -> set[int]:
    return {id(n) for n in post_order(expr) if isinstance(n, Var)}


def _add_vars(expr: Expr, seen: set[int], out: set[int]) -> None:
    """Add the variables under `expr` to `out`, skipping nodes already walked (shared graphs stay linear)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Var):
            out.add(id(node))
        stack.extend(children(node))


class _DeadLets(ExprMutator):
    def __init__(self, purity: Purity, movable: Purity, inline_once: bool, uses: dict[int, int]) -> None:
        super().__init__()
        self.purity, self.movable = purity, movable
        self.inline_once = inline_once
        self.uses = uses
        self.subst: dict[int, Expr] = {}
        self.removed = 0

    def visit_var(self, v: Var) -> Expr:
        return self.subst.get(id(v), v)

    def visit_let(self, let: Let) -> Expr:
        chain: list[tuple[Let, Expr]] = []
        node: Expr = let
        while isinstance(node, Let):
            recursive = id(node.var) in _vars_in(node.value)  # before substitution: small
            value = self.visit(node.value)
            if (self.inline_once and not recursive and self.uses.get(id(node.var), 0) == 1
                    and self.movable.pure(value)):
                self.subst[id(node.var)] = value  # read exactly once: substitute at the use
                self.removed += 1
            else:
                chain.append((node, value))
            node = node.body
        body = self.visit(node)
        live: set[int] = set()
        walked: set[int] = set()
        _add_vars(body, walked, live)
        for old, value in reversed(chain):
            if id(old.var) not in live and self.purity.pure(value):
                self.removed += 1
                continue
            _add_vars(value, walked, live)
            body = old if (value is old.value and body is old.body) else Let(old.var, value, body)
        return body


@dataclass(frozen=True)
class DeadCodeElimination(FunctionPass):
    """Remove unused pure `let` bindings; `inline_once` also inlines movable single-use bindings
    (`Purity`: a reference's creation or read stays where it is bound)."""

    name: ClassVar[str] = "DeadCodeElimination"
    inline_once: bool = False

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        uses = var_uses(fn) if self.inline_once else {}
        out = _DeadLets(Purity(mod), Purity(mod, movable=True), self.inline_once, uses).visit(fn)
        assert isinstance(out, Function)
        return out
