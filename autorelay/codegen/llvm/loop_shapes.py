"""The shape of loops before and while they are emitted: unrolled loops expanded into copies, the
guards (`if`s) a loop body holds, and whether a loop may become vector instructions.

`expand_unrolled` replicates an unrolled loop's body with the variable fixed to each constant and
re-simplified (the copies share the simplified nodes that do not read the variable), so
register-tile accumulators end up at constant offsets. `vectorizable` is the test a loop marked
`vectorize` must pass to be emitted as vector instructions rather than as a plain loop.
"""

from __future__ import annotations

from autorelay.codegen.llvm.lanes import lane_coef
from autorelay.te.expr import Bin, Cmp, Const, Expr, Load, Var, all_of
from autorelay.te.traverse import distinct_nodes, uses_var
from autorelay.tir.nodes import Allocate, For, If, Seq, Stmt, Store, walk_stmts
from autorelay.tir.simplify import Invariant, simplify_stmt

__all__ = ["conjunction", "drop_conds", "expand_unrolled", "guard_conds", "monotone", "vectorizable"]


def guard_conds(s: Stmt) -> list[Expr]:
    return [t.cond for t in walk_stmts(s) if isinstance(t, If)]


def conjunction(cs: list[Expr]) -> Expr:
    return all_of(*cs)


def monotone(c: Expr, v: Var) -> bool:
    """Every comparison in the and-tree `c` is linear in `v` (so true at both ends => all lanes)."""

    if isinstance(c, Bin) and c.op == "and":
        return monotone(c.a, v) and monotone(c.b, v)
    if isinstance(c, Cmp) and c.op in ("lt", "le", "gt", "ge") and c.a.dtype in ("int64", "int32"):
        return lane_coef(Bin("sub", c.a, c.b, "int64"), v) is not None
    return False


def drop_conds(s: Stmt, conds: set[Expr]) -> Stmt:
    """`s` with every `if c` for c in `conds` replaced by its then-branch (c known true)."""
    if isinstance(s, If) and s.cond in conds:
        return drop_conds(s.then, conds)
    if isinstance(s, Seq):
        return Seq(tuple(drop_conds(t, conds) for t in s.stmts))
    if isinstance(s, If):
        return If(
            s.cond, drop_conds(s.then, conds), None if s.orelse is None else drop_conds(s.orelse, conds)
        )
    if isinstance(s, For):
        return For(s.var, s.extent, drop_conds(s.body, conds), s.kind)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, drop_conds(s.body, conds))
    return s


def expand_unrolled(s: Stmt, bounds: dict[Var, tuple[int, int]]) -> Stmt:
    """Replace unrolled loops by copies of their body with the variable fixed and re-simplified."""
    if isinstance(s, For):
        if s.kind == "unrolled":
            copies = []
            shared = Invariant(s.var)  # what the copies share: the body's nodes that do not read s.var
            for c in range(s.extent):
                body = simplify_stmt(s.body, bounds, {s.var: Const(c, "int64")}, shared=shared)
                if body is not None:
                    copies.append(expand_unrolled(body, bounds))
            return Seq(tuple(copies))
        inner = dict(bounds)
        inner[s.var] = (0, s.extent - 1)
        return For(s.var, s.extent, expand_unrolled(s.body, inner), s.kind)
    if isinstance(s, Seq):
        return Seq(tuple(expand_unrolled(t, bounds) for t in s.stmts))
    if isinstance(s, If):
        return If(
            s.cond,
            expand_unrolled(s.then, bounds),
            None if s.orelse is None else expand_unrolled(s.orelse, bounds),
        )
    if isinstance(s, Allocate):
        return Allocate(s.buffer, expand_unrolled(s.body, bounds))
    return s


def vectorizable(s: For) -> bool:
    """No inner loops or allocations; no lane-varying value stored to one address; no load of a
    buffer the body stores to at a different lane-dependent address (a loop-carried dependence)."""
    v = s.var
    stores: dict[int, list[Expr]] = {}
    for t in walk_stmts(s.body):
        if isinstance(t, (For, Allocate)):
            return False
        if isinstance(t, If) and t.orelse is not None and uses_var(t.cond, v):
            return False
        if isinstance(t, Store):
            coef = lane_coef(t.index, v)
            if coef == 0 and uses_var(t.value, v):
                return False
            stores.setdefault(id(t.buffer), []).append(t.index)
    values = [t.value for t in walk_stmts(s.body) if isinstance(t, Store)]
    for n in distinct_nodes(*values):  # unrolled stores share subtrees: each node once
        written = stores.get(id(n.buffer)) if isinstance(n, Load) else None
        if written is not None and any(n.index != idx for idx in written):
            return False
    return True
