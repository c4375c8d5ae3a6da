"""Partial values for PartialEvaluate: what is statically known about a value, residual let lists
(scopes), environments and static pattern matching. Kept apart from the evaluator itself."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.ir.expr import (
    Constant,
    Constructor,
    Expr,
    GlobalVar,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Var,
)

_scope_ids = itertools.count()


class Scope:
    """A residual let list; `parent` is the enclosing scope (whose bindings are visible here)."""

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.uid = next(_scope_ids)  # not id(): a finished scope's id may be reused
        self.bindings: list[tuple[Var, Expr]] = []

    def emit(self, expr: Expr, hint: str = "x") -> Expr:
        if isinstance(expr, Var | Constant | GlobalVar | Op | Constructor):
            return expr
        v = Var(hint)
        self.bindings.append((v, expr))
        return v

    def chain(self) -> list[Scope]:
        out, s = [], self
        while s is not None:
            out.append(s)
            s = s.parent
        return out


@dataclass(eq=False)
class PV:
    """A partial value: `kind` says what is statically known; `residual` maps scopes to exprs."""

    kind: str  # "dyn" | "tensor" | "tuple" | "adt" | "closure" | "global" | "op" | "con"
    data: Any = None  # np.ndarray | list[PV] | (Constructor, list[PV]) | (Function, env) | ...
    residual: dict[int, Expr] = field(default_factory=dict)

    def drives_control(self) -> bool:
        """Static data that can decide a recursion: an ADT cell, or a scalar / integer tensor (a
        loop counter). Constant weight tensors do not count: they never stop a recursion."""
        if self.kind == "adt":
            return True
        if self.kind == "tensor":
            arr = np.asarray(self.data)
            return arr.size == 1 or arr.dtype.kind in "iub"
        return self.kind == "tuple" and any(f.drives_control() for f in self.data)


_activations = itertools.count()


class Env:
    """Variable bindings. `activation` identifies one (inlined) function call: within it, a node
    shared in graph form denotes one value, so its evaluation is memoised per activation."""

    def __init__(self, parent: Env | None, new_activation: bool = False) -> None:
        self.parent = parent
        self.vars: dict[int, PV] = {}
        self.activation: int = next(_activations) if new_activation or parent is None else parent.activation

    def lookup(self, v: Var) -> PV | None:
        e: Env | None = self
        while e is not None:
            hit = e.vars.get(id(v))
            if hit is not None:
                return hit
            e = e.parent
        return None


def dyn(expr: Expr, scope: Scope) -> PV:
    return PV("dyn", residual={scope.uid: expr})


def static_value(pv: PV) -> Any:
    if pv.kind == "tensor":
        return pv.data
    if pv.kind == "tuple":
        vals = [static_value(f) for f in pv.data]
        return None if any(v is None for v in vals) else tuple(vals)
    return None


def from_value(v: Any) -> PV:
    if isinstance(v, tuple | list):
        return PV("tuple", [from_value(x) for x in v])
    return PV("tensor", np.asarray(v))


def match_pattern(p: Pattern, v: PV, binds: dict[int, PV]) -> bool | None:
    """True/False when the pattern statically does/doesn't match `v`; None when unknown."""
    if isinstance(p, PatternWildcard):
        return True
    if isinstance(p, PatternVar):
        binds[id(p.var)] = v
        return True
    if isinstance(p, PatternConstructor):
        if v.kind != "adt":
            return None
        con, fields = v.data
        if con.name != p.constructor.name:
            return False
        results = [match_pattern(sp, f, binds) for sp, f in zip(p.patterns, fields)]
        return None if None in results else all(results)
    if isinstance(p, PatternTuple):
        if v.kind != "tuple":
            return None
        results = [match_pattern(sp, f, binds) for sp, f in zip(p.patterns, v.data)]
        return None if None in results else all(results)
    return None


def fresh_pattern(p: Pattern, env: Env, scope: Scope) -> Pattern:
    if isinstance(p, PatternVar):
        v = Var(p.var.name_hint, p.var.type_annotation)
        env.vars[id(p.var)] = dyn(v, scope)
        return PatternVar(v)
    if isinstance(p, PatternConstructor):
        return PatternConstructor(p.constructor, tuple(fresh_pattern(s, env, scope) for s in p.patterns))
    if isinstance(p, PatternTuple):
        return PatternTuple(tuple(fresh_pattern(s, env, scope) for s in p.patterns))
    return p
