"""The graph FuseOps and its preprocessing (`split_fields`, shared-producer copies) work on: the
op calls of one function body in dependency order, each node's readers, and each op's pattern."""

from __future__ import annotations

from autorelay.ir.expr import Call, Expr, Function, Op
from autorelay.ir.visitor import post_order
from autorelay.op import registry
from autorelay.op.registry import OpPattern
from autorelay.transform.normal_form import scoped_children


def op_pattern(e: Expr) -> OpPattern | None:
    """The pattern of an op call (OPAQUE for an unregistered op); None for anything else."""
    if isinstance(e, Call) and isinstance(e.op, Op):
        return registry.get(e.op.name).pattern if registry.exists(e.op.name) else OpPattern.OPAQUE
    return None


def readers_of(order: list[Expr]) -> dict[int, list[Expr]]:
    """Each node's readers among the nodes of `order` (by id; a reader once per argument it reads)."""
    readers: dict[int, list[Expr]] = {}
    for n in order:
        if not isinstance(n, Function):
            for k, _ in scoped_children(n):
                readers.setdefault(id(k), []).append(n)
    return readers


def region_order(root: Expr) -> list[Expr]:
    """Nodes of one function body in dependency order, not entering nested functions."""
    return post_order(root, lambda n: [] if isinstance(n, Function) else [k for k, _ in scoped_children(n)])
