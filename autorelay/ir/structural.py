"""Structural equality and hashing: alpha-equivalence over expressions, modules, types and attrs.

Expression nodes compare by identity (see `autorelay.ir.expr`); these functions compare what the
program *means*:

* Bound variables (function parameters, let variables, pattern variables) are matched by binding
  position, not name; their type annotations must agree. Free variables must be the same object
  unless `map_free_vars=True`, which matches them by first occurrence.
* Type parameters of functions and function types are matched by position too.
* Constants compare by dtype, shape and values (NaN equals NaN).
* Sharing is part of the structure: a composite node used twice on one side must correspond to one
  node used twice on the other, so `%0 = f(%x); add(%0, %0)` differs from `add(f(%x), f(%x))` —
  which is what a CSE test needs, and what keeps effects such as `ref_read` apart. (Atoms —
  variables, globals, ops, constructors, constants — are exempt.)
* `Call.type_args` and `checked_type` are results of type inference and are not compared.
* A bare ADT name (`GlobalTypeVar`) equals the same ADT applied to no arguments (`TypeCall`).

`structural_hash` lives in `structural_hash.py` and agrees with `structural_equal`: equal values
have equal hashes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from autorelay.ir.attrs import Attrs
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
from autorelay.ir.structural_hash import structural_hash
from autorelay.ir.types import (
    AnyDim,
    FuncType,
    GlobalTypeVar,
    IncompleteType,
    RefType,
    SymDim,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeData,
    TypeVar,
)
from autorelay.utils.deep import deep

__all__ = ["assert_structural_equal", "structural_equal", "structural_hash"]


class _Mismatch(Exception):
    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


def attr_values_equal(a: Any, b: Any) -> bool:
    """Attribute values, with `True` != `1` and `1` != `1.0` (the printed forms differ too)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(attr_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Attrs):
        return attrs_equal(a, b)
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    return a == b


def attrs_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return set(a) == set(b) and all(attr_values_equal(a[k], b[k]) for k in a)


class _Equal:
    def __init__(self, map_free_vars: bool) -> None:
        self.map_free_vars = map_free_vars
        self.var_l: dict[int, Var] = {}  # lhs var id -> rhs var
        self.var_r: dict[int, Var] = {}
        self.node_l: dict[int, Expr] = {}  # lhs composite id -> rhs node it matched
        self.node_r: dict[int, Expr] = {}
        self.tv_l: dict[TypeVar, TypeVar] = {}
        self.tv_r: dict[TypeVar, TypeVar] = {}
        self.path: list[str] = []

    def fail(self, detail: str) -> None:
        raise _Mismatch("".join(self.path) or "<root>", detail)

    def at(self, step: str, fn: Any, *args: Any) -> None:
        self.path.append(step)
        fn(*args)
        self.path.pop()

    # ---- types ------------------------------------------------------------------------------

    def bind_type_params(self, a: tuple[TypeVar, ...], b: tuple[TypeVar, ...]) -> list[tuple]:
        if len(a) != len(b):
            self.fail(f"{len(a)} type parameter(s) vs {len(b)}")
        saved = [(x, self.tv_l.get(x), y, self.tv_r.get(y)) for x, y in zip(a, b)]
        for x, y in zip(a, b):
            self.tv_l[x], self.tv_r[y] = y, x
        return saved

    def unbind_type_params(self, saved: list[tuple]) -> None:
        for x, old_x, y, old_y in reversed(saved):
            for table, key, old in ((self.tv_l, x, old_x), (self.tv_r, y, old_y)):
                if old is None:
                    table.pop(key, None)
                else:
                    table[key] = old

    def type(self, a: Type | None, b: Type | None) -> None:
        if a is None or b is None:
            if a is not b:
                self.fail(f"type {_t(a)} vs {_t(b)}")
            return
        if isinstance(a, GlobalTypeVar):
            a = TypeCall(a, ())
        if isinstance(b, GlobalTypeVar):
            b = TypeCall(b, ())
        if type(a) is not type(b):
            self.fail(f"type {_t(a)} vs {_t(b)}")
        if isinstance(a, TensorType):
            if a.dtype != b.dtype or len(a.shape) != len(b.shape) or not all(
                _dim_eq(x, y) for x, y in zip(a.shape, b.shape)
            ):
                self.fail(f"type {_t(a)} vs {_t(b)}")
        elif isinstance(a, TupleType):
            if len(a.fields) != len(b.fields):
                self.fail(f"type {_t(a)} vs {_t(b)}")
            for i, (x, y) in enumerate(zip(a.fields, b.fields)):
                self.at(f".field{i}", self.type, x, y)
        elif isinstance(a, FuncType):
            if len(a.arg_types) != len(b.arg_types) or len(a.type_constraints) != len(b.type_constraints):
                self.fail(f"type {_t(a)} vs {_t(b)}")
            saved = self.bind_type_params(a.type_params, b.type_params)
            for i, (x, y) in enumerate(zip(a.arg_types, b.arg_types)):
                self.at(f".arg{i}", self.type, x, y)
            self.at(".ret", self.type, a.ret_type, b.ret_type)
            for x, y in zip(a.type_constraints, b.type_constraints):
                self.type(x, y)
            self.unbind_type_params(saved)
        elif isinstance(a, TypeVar):
            if a in self.tv_l or b in self.tv_r:
                if self.tv_l.get(a) != b:
                    self.fail(f"type variable {a.name} vs {b.name}")
            elif a.name != b.name:
                self.fail(f"type variable {a.name} vs {b.name}")
        elif isinstance(a, TypeCall):
            if a.func.name != b.func.name or len(a.args) != len(b.args):
                self.fail(f"type {_t(a)} vs {_t(b)}")
            for x, y in zip(a.args, b.args):
                self.type(x, y)
        elif isinstance(a, RefType):
            self.type(a.value, b.value)
        elif not isinstance(a, IncompleteType):
            self.fail(f"cannot compare types {a!r} and {b!r}")

    # ---- expressions ------------------------------------------------------------------------

    def bind_var(self, a: Var, b: Var) -> None:
        self.at(f"(%{a.name_hint}).type_annotation", self.type, a.type_annotation, b.type_annotation)
        self.var_l[id(a)], self.var_r[id(b)] = b, a

    def expr(self, a: Expr, b: Expr) -> None:
        if type(a) is not type(b):
            self.fail(f"{type(a).__name__} vs {type(b).__name__}")
        if isinstance(a, Var):
            self.var(a, b)  # type: ignore[arg-type]
        elif isinstance(a, GlobalVar):
            if a.name_hint != b.name_hint:  # type: ignore[attr-defined]
                self.fail(f"@{a.name_hint} vs @{b.name_hint}")  # type: ignore[attr-defined]
        elif isinstance(a, Op):
            if a.name != b.name:  # type: ignore[attr-defined]
                self.fail(f"op {a.name} vs {b.name}")  # type: ignore[attr-defined]
        elif isinstance(a, Constructor):
            if a.name != b.name or a.belong_to.name != b.belong_to.name:  # type: ignore[attr-defined]
                self.fail(f"constructor {a.name} vs {b.name}")  # type: ignore[attr-defined]
        elif isinstance(a, Constant):
            self.constant(a, b)  # type: ignore[arg-type]
        else:
            seen = self.node_l.get(id(a))
            if seen is not None or id(b) in self.node_r:
                if seen is not b:
                    self.fail(f"sharing differs: this {type(a).__name__} is shared on one side only")
                return
            self.composite(a, b)
            self.node_l[id(a)], self.node_r[id(b)] = b, a

    def var(self, a: Var, b: Var) -> None:
        mapped = self.var_l.get(id(a))
        if mapped is not None or id(b) in self.var_r:
            if mapped is not b:
                self.fail(f"variable %{a.name_hint} vs %{b.name_hint} (bound at different places)")
        elif self.map_free_vars:
            self.bind_var(a, b)
        elif a is not b:
            self.fail(f"free variable %{a.name_hint} vs %{b.name_hint}")

    def constant(self, a: Constant, b: Constant) -> None:
        x, y = a.data, b.data
        if x.dtype != y.dtype or x.shape != y.shape:
            self.fail(f"constant {a.type} vs {b.type}")
        if x.ndim == 0:  # fast path for scalar literals
            u, v = x.item(), y.item()
            if not (u == v or (u != u and v != v)):
                self.fail(f"constant values differ: {u!r} vs {v!r}")
            return
        nan = x.dtype.kind in "fc"
        if not np.array_equal(x, y, equal_nan=nan):
            self.fail("constant values differ")

    def composite(self, a: Expr, b: Any) -> None:
        if isinstance(a, Call):
            self.at(".op", self.expr, a.op, b.op)
            self.exprs("args", a.args, b.args)
            if not attrs_equal(a.attrs, b.attrs):
                self.fail(f"attrs {dict(a.attrs)} vs {dict(b.attrs)}")
        elif isinstance(a, Function):
            if len(a.params) != len(b.params):
                self.fail(f"{len(a.params)} parameter(s) vs {len(b.params)}")
            saved = self.bind_type_params(a.type_params, b.type_params)
            for i, (x, y) in enumerate(zip(a.params, b.params)):
                self.at(f".params[{i}]", self.bind_var, x, y)
            self.at(".ret_type", self.type, a.ret_type, b.ret_type)
            if not attrs_equal(a.attrs, b.attrs):
                self.fail(f"function attrs {dict(a.attrs)} vs {dict(b.attrs)}")
            self.at(".body", self.expr, a.body, b.body)
            self.unbind_type_params(saved)
        elif isinstance(a, Let):
            self.at(".var", self.bind_var, a.var, b.var)
            self.at(".value", self.expr, a.value, b.value)
            self.at(".body", self.expr, a.body, b.body)
        elif isinstance(a, If):
            self.at(".cond", self.expr, a.cond, b.cond)
            self.at(".true_branch", self.expr, a.true_branch, b.true_branch)
            self.at(".false_branch", self.expr, a.false_branch, b.false_branch)
        elif isinstance(a, Tuple):
            self.exprs("fields", a.fields, b.fields)
        elif isinstance(a, TupleGetItem):
            if a.index != b.index:
                self.fail(f"tuple index {a.index} vs {b.index}")
            self.at(".tuple_value", self.expr, a.tuple_value, b.tuple_value)
        elif isinstance(a, Match):
            if a.complete != b.complete:
                self.fail("complete match vs incomplete match?")
            self.at(".data", self.expr, a.data, b.data)
            if len(a.clauses) != len(b.clauses):
                self.fail(f"{len(a.clauses)} clause(s) vs {len(b.clauses)}")
            for i, (x, y) in enumerate(zip(a.clauses, b.clauses)):
                self.at(f".clauses[{i}].lhs", self.pattern, x.lhs, y.lhs)
                self.at(f".clauses[{i}].rhs", self.expr, x.rhs, y.rhs)
        elif isinstance(a, RefCreate):
            self.at(".value", self.expr, a.value, b.value)
        elif isinstance(a, RefRead):
            self.at(".ref", self.expr, a.ref, b.ref)
        elif isinstance(a, RefWrite):
            self.at(".ref", self.expr, a.ref, b.ref)
            self.at(".value", self.expr, a.value, b.value)
        else:
            self.fail(f"cannot compare {type(a).__name__}")

    def exprs(self, name: str, a: tuple, b: tuple) -> None:
        if len(a) != len(b):
            self.fail(f"{len(a)} {name} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            self.at(f".{name}[{i}]", self.expr, x, y)

    def pattern(self, a: Pattern, b: Pattern) -> None:
        if type(a) is not type(b):
            self.fail(f"pattern {type(a).__name__} vs {type(b).__name__}")
        if isinstance(a, PatternVar):
            self.bind_var(a.var, b.var)  # type: ignore[attr-defined]
        elif isinstance(a, PatternConstructor | PatternTuple):
            if isinstance(a, PatternConstructor) and a.constructor.name != b.constructor.name:  # type: ignore[attr-defined]
                self.fail(f"constructor {a.constructor.name} vs {b.constructor.name}")  # type: ignore[attr-defined]
            if len(a.patterns) != len(b.patterns):  # type: ignore[attr-defined]
                self.fail("patterns of different arity")
            for i, (x, y) in enumerate(zip(a.patterns, b.patterns)):  # type: ignore[attr-defined]
                self.at(f"[{i}]", self.pattern, x, y)
        else:
            assert isinstance(a, PatternWildcard)

    # ---- modules and ADTs ---------------------------------------------------------------------

    def type_data(self, a: TypeData, b: TypeData) -> None:
        if a.header.name != b.header.name or len(a.constructors) != len(b.constructors):
            self.fail(f"type {a.header.name} vs {b.header.name}")
        saved = self.bind_type_params(a.type_vars, b.type_vars)
        for x, y in zip(a.constructors, b.constructors):
            if x.name != y.name or x.tag != y.tag or len(x.inputs) != len(y.inputs):
                self.fail(f"constructor {x.name} vs {y.name}")
            for i, (s, t) in enumerate(zip(x.inputs, y.inputs)):
                self.at(f".{x.name}[{i}]", self.type, s, t)
        self.unbind_type_params(saved)

    def module(self, a: IRModule, b: IRModule) -> None:
        ga = {g.name_hint: f for g, f in a.functions.items()}
        gb = {g.name_hint: f for g, f in b.functions.items()}
        if set(ga) != set(gb):
            self.fail(f"globals {sorted(ga)} vs {sorted(gb)}")
        ta = {t.name: d for t, d in a.type_definitions.items()}
        tb = {t.name: d for t, d in b.type_definitions.items()}
        if set(ta) != set(tb):
            self.fail(f"type definitions {sorted(ta)} vs {sorted(tb)}")
        for name in sorted(ta):
            self.at(f"type {name}", self.type_data, ta[name], tb[name])
        for name in sorted(ga):
            # Each global is printed (and so parsed) on its own: sharing is compared within one.
            self.node_l, self.node_r = {}, {}
            self.at(f"@{name}", self.expr, ga[name], gb[name])

    def any(self, a: Any, b: Any) -> None:
        if isinstance(a, IRModule) and isinstance(b, IRModule):
            self.module(a, b)
        elif isinstance(a, Expr) and isinstance(b, Expr):
            self.expr(a, b)
        elif isinstance(a, Type | None) and isinstance(b, Type | None) and not (a is None and b is None):
            self.type(a, b)
        elif isinstance(a, TypeData) and isinstance(b, TypeData):
            self.type_data(a, b)
        elif isinstance(a, Mapping) and isinstance(b, Mapping):
            if not attrs_equal(a, b):
                self.fail(f"attrs {dict(a)} vs {dict(b)}")
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
            if len(a) != len(b):
                self.fail(f"length {len(a)} vs {len(b)}")
            for i, (x, y) in enumerate(zip(a, b)):
                self.at(f"[{i}]", self.any, x, y)
        elif a is None and b is None:
            return
        else:
            self.fail(f"cannot compare {type(a).__name__} with {type(b).__name__}")


def _dim_eq(x: Any, y: Any) -> bool:
    if isinstance(x, AnyDim):
        return isinstance(y, AnyDim)
    if isinstance(x, SymDim):
        return isinstance(y, SymDim) and x.name == y.name
    return type(x) is type(y) and x == y


def _t(t: Type | None) -> str:
    return "None" if t is None else str(t)


@deep
def _compare(a: Any, b: Any, map_free_vars: bool) -> _Mismatch | None:
    try:
        _Equal(map_free_vars).any(a, b)
    except _Mismatch as m:
        return m
    return None


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    """Whether `a` and `b` (Exprs, IRModules, Types, TypeData, Attrs) are alpha-equivalent."""
    return _compare(a, b, map_free_vars) is None


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> None:
    """Raise AssertionError naming the path to the first difference."""
    m = _compare(a, b, map_free_vars)
    if m is not None:
        path = m.path if len(m.path) <= 400 else "…" + m.path[-400:]
        raise AssertionError(f"not structurally equal at {path}: {m.detail}")
