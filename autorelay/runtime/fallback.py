"""Fallback kernels: a primitive function whose ops have no compute runs on the ops' NumPy references.

The function body is flattened once into a list of instructions (op calls, tuples, projections) so
that a call is a short loop, not an interpreter walk. Build reports mark these kernels "fallback"
with the reason, so a slow reference never passes for a compiled kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var
from autorelay.ir.types import TupleType, Type
from autorelay.ir.visitor import post_order
from autorelay.runtime.interp_calls import run_op


class ReferenceFunction:
    """Callable: `ref(*args) -> array | tuple` computing a primitive function with NumPy references.
    `flat_args`: the caller passes every tensor of a tuple-typed parameter in turn, as the graph
    executor passes a kernel's buffers; else one value per parameter (a tuple for a tuple)."""

    def __init__(self, fn: Function, *, flat_args: bool = False) -> None:
        self.fn = fn
        self.params_type = TupleType(tuple(_param_type(p) for p in fn.params)) if flat_args else None
        slot: dict[int, int] = {}
        self.consts: list[tuple[int, np.ndarray]] = []
        self.code: list[tuple[str, Any, list[int], int]] = []  # (kind, payload, operand slots, out slot)
        for i, p in enumerate(fn.params):
            slot[id(p)] = i
        n = len(fn.params)
        for node in post_order(fn.body):
            if id(node) in slot or isinstance(node, Op | Function):
                continue
            if isinstance(node, Var):
                raise ValueError(f"fallback kernel: free variable %{node.name_hint}")
            out, n = n, n + 1
            slot[id(node)] = out
            if isinstance(node, Constant):
                self.consts.append((out, np.asarray(node.data)))
            elif isinstance(node, Tuple):
                self.code.append(("tuple", None, [slot[id(f)] for f in node.fields], out))
            elif isinstance(node, TupleGetItem):
                self.code.append(("get", node.index, [slot[id(node.tuple_value)]], out))
            elif isinstance(node, Call) and isinstance(node.op, Op):
                operands = [slot[id(a)] for a in node.args]
                self.code.append(("op", (node.op.name, node.attrs, node), operands, out))
            else:
                raise ValueError(f"fallback kernel: cannot run {type(node).__name__} nodes")
        self.size = n
        self.result = slot[id(fn.body)]

    def __call__(self, *args: Any) -> Any:
        if self.params_type is not None:
            args = unflatten_value(self.params_type, args)
        env: list[Any] = [None] * self.size
        env[: len(args)] = args
        for i, c in self.consts:
            env[i] = c
        for kind, payload, ins, out in self.code:
            if kind == "op":
                name, attrs, site = payload
                env[out] = run_op(name, attrs, [env[i] for i in ins], site)
            elif kind == "tuple":
                env[out] = tuple(env[i] for i in ins)
            else:
                env[out] = env[ins[0]][payload]
        return env[self.result]


def _param_type(p: Var) -> Type:
    ty = p.checked_type if p.has_checked_type else p.type_annotation
    if ty is None:
        raise ValueError(f"fallback kernel: parameter %{p.name_hint} has no type")
    return ty


def unflatten_value(t: Type | None, flat: Iterable[Any]) -> Any:
    """The value of type `t` whose tensors are `flat`, in order (`flatten_value`'s inverse):
    nested tuples where `t` has tuple types, each tensor as it is."""
    rest = iter(flat)

    def take(ty: Type | None) -> Any:
        return tuple(take(f) for f in ty.fields) if isinstance(ty, TupleType) else next(rest)

    return take(t)


def flatten_value(v: Any) -> list[np.ndarray]:
    """The tensors of a (possibly nested) tuple value, in order."""
    if isinstance(v, tuple | list):
        return [x for f in v for x in flatten_value(f)]
    return [np.asarray(v)]


def op_names(fn: Function) -> list[str]:
    return [n.op.name for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]
