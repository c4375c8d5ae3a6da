"""InlineGlobals: replace calls of non-recursive global functions by their bodies.

Callees are processed before callers (a topological order of the call graph), so each body is
substituted once, already free of inlinable calls. A recursive global (one that can reach itself
through the call graph) is never inlined, nor are primitive (fused) functions. Each inlined copy
gets fresh variables (variables are binding sites, compared by identity). A pure argument is
substituted for its parameter directly (graph form); an impure one is bound by a `let` so that
its effect still happens exactly once. Globals no longer reachable from `keep` are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.transform.pass_base import ModulePass
from autorelay.transform.util import FreshCopy, Purity


def call_graph(mod: IRModule) -> dict[GlobalVar, set[GlobalVar]]:
    """For each global, the globals its body mentions (called or passed as values)."""
    return {
        gv: {n for n in post_order(fn) if isinstance(n, GlobalVar) and n in mod}
        for gv, fn in mod.functions.items()
    }


def recursive_globals(mod: IRModule) -> set[GlobalVar]:
    """Globals that can reach themselves through the call graph."""
    graph = call_graph(mod)
    out = set()
    for start in graph:
        stack, seen = list(graph[start]), set()
        while stack:
            g = stack.pop()
            if g == start:
                out.add(start)
                break
            if g in seen:
                continue
            seen.add(g)
            stack.extend(graph.get(g, ()))
    return out


def _topological(graph: dict[GlobalVar, set[GlobalVar]]) -> list[GlobalVar]:
    order: list[GlobalVar] = []
    state: dict[GlobalVar, int] = {}
    for root in graph:
        stack = [(root, iter(sorted(graph[root], key=lambda g: g.name_hint)))]
        if root in state:
            continue
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node] = 2
                order.append(node)
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt], key=lambda g: g.name_hint))))
    return order


class _Inliner(FreshCopy):
    """Rewrites one function, replacing calls of inlinable globals by fresh copies of their bodies."""

    def __init__(self, bodies: dict[GlobalVar, Function], purity: Purity) -> None:
        super().__init__()
        self.bodies = bodies
        self.purity = purity
        self.inlined = 0

    def visit_function(self, f: Function) -> Expr:
        # Unlike FreshCopy, keep the function's own variables: only inlined copies need new ones.
        body = self.visit(f.body)
        return f if body is f.body else f.replace(body=body)

    visit_match = ExprMutator.visit_match  # keep the caller's own pattern variables

    def visit_let(self, let: Let) -> Expr:
        value, body = self.visit(let.value), self.visit(let.body)
        return let if value is let.value and body is let.body else Let(let.var, value, body)

    def visit_call(self, c: Call) -> Expr:
        args = tuple(self.visit(a) for a in c.args)
        callee = c.op
        if isinstance(callee, GlobalVar) and callee in self.bodies:
            fn = self.bodies[callee]
            subst: dict[int, Expr] = {}
            lets: list[tuple[Var, Expr]] = []
            for p, a in zip(fn.params, args):
                if self.purity.pure(a):
                    subst[id(p)] = a
                else:
                    v = Var(p.name_hint)
                    lets.append((v, a))
                    subst[id(p)] = v
            body = FreshCopy(subst).visit(fn.body)
            self.inlined += 1
            for v, a in reversed(lets):
                body = Let(v, a, body)
            return body
        op = self.visit(callee)
        if op is callee and all(x is y for x, y in zip(args, c.args)):
            return c
        return c.replace(op=op, args=args)


@dataclass(frozen=True)
class InlineGlobals(ModulePass):
    """Inline every non-recursive, non-primitive global; drop globals unreachable from `keep`."""

    name: ClassVar[str] = "InlineGlobals"
    keep: tuple[str, ...] = ("main",)
    remove_unused: bool = True

    def transform_module(self, mod: IRModule) -> IRModule:
        graph = call_graph(mod)
        recursive = recursive_globals(mod)
        purity = Purity(mod, movable=True)  # an argument substituted into the body is moved there
        done: dict[GlobalVar, Function] = {}
        inlinable: dict[GlobalVar, Function] = {}
        for gv in _topological(graph):
            fn = mod[gv]
            if not fn.is_primitive:
                new = _Inliner(inlinable, purity).visit(fn)
                assert isinstance(new, Function)
                fn = new
            done[gv] = fn
            if gv not in recursive and not fn.is_primitive and gv.name_hint not in self.keep:
                inlinable[gv] = fn
        out = IRModule(done, mod.type_definitions)
        if self.remove_unused:
            out = drop_unreachable(out, self.keep)
        return out


def drop_unreachable(mod: IRModule, keep: tuple[str, ...]) -> IRModule:
    graph = call_graph(mod)
    live: set[GlobalVar] = set()
    stack = [gv for gv in mod.functions if gv.name_hint in keep]
    while stack:
        g = stack.pop()
        if g in live:
            continue
        live.add(g)
        stack.extend(graph.get(g, ()))
    return IRModule({g: f for g, f in mod.functions.items() if g in live}, mod.type_definitions)
