"""Expressions of the IR: a Relay-style functional language.

Design note: expression nodes are frozen and slotted, but compare and hash by *identity*
(`eq=False`). Structural, alpha-invariant equality and hashing live in
`autorelay.ir.structural` (`structural_equal`, `structural_hash`). Identity semantics keep memo
tables O(1) per lookup on big graphs, never conflate two effectful calls that happen to look alike
(`ref_read(%r)` twice), and make a `Var` a binding site rather than a name.

Two pieces of derived information ride on every node without being part of its value: `span`
(where it came from in source text) and `checked_type` (filled in by type inference). Both are
set once, after construction, through `with_span` / `set_checked_type`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autorelay.ir.attrs import EMPTY_ATTRS, Attrs
from autorelay.ir.types import GlobalTypeVar, TensorType, Type, TypeVar


@dataclass(frozen=True, slots=True)
class Span:
    """A source location (1-based line and column)."""

    source: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}"


class Node:
    """Base of expressions and patterns: carries a span and a checked type, both optional."""

    __slots__ = ("_checked_type", "span")

    @property
    def checked_type(self) -> Type:
        try:
            t = self._checked_type
        except AttributeError:
            t = None
        if t is None:
            raise ValueError(
                f"{type(self).__name__} has no checked type; run autorelay.infer_types first"
            )
        return t

    @property
    def has_checked_type(self) -> bool:
        try:
            return self._checked_type is not None
        except AttributeError:
            return False

    def set_checked_type(self, t: Type) -> None:
        object.__setattr__(self, "_checked_type", t)

    def get_span(self) -> Span | None:
        try:
            return self.span
        except AttributeError:
            return None

    def with_span(self, span: Span | None):
        object.__setattr__(self, "span", span)
        return self

    def replace(self, **changes: Any):
        """A copy with some fields changed (the span is kept, the checked type is not)."""
        new = replace(self, **changes)
        sp = self.get_span()
        if sp is not None:
            new.with_span(sp)
        return new

    def astext(self) -> str:
        from autorelay.ir.printer import astext

        return astext(self)


class Expr(Node):
    __slots__ = ()

    def __str__(self) -> str:
        return self.astext()


_var_ids = itertools.count()


@dataclass(frozen=True, slots=True, eq=False)
class Var(Expr):
    """A local variable. Each Var object is a distinct binding; `name_hint` is only for printing."""

    name_hint: str
    type_annotation: Type | None = None
    id: int = field(default_factory=lambda: next(_var_ids), repr=False)

    def __repr__(self) -> str:
        return f"Var(%{self.name_hint})"


@dataclass(frozen=True, slots=True)
class GlobalVar(Expr):
    """A module-level function name such as `@main`. Equal by name."""

    name_hint: str

    def __repr__(self) -> str:
        return f"GlobalVar(@{self.name_hint})"


@dataclass(frozen=True, slots=True, eq=False)
class Constant(Expr):
    """A constant tensor, stored row-major (C-contiguous). Scalars are 0-d arrays."""

    data: np.ndarray

    def __post_init__(self) -> None:
        data = np.asarray(self.data)
        if not data.flags.c_contiguous:  # a copy, not ascontiguousarray, which makes a 0-d array 1-d
            data = data.copy(order="C")
        if data is not self.data:
            object.__setattr__(self, "data", data)

    @property
    def type(self) -> TensorType:
        return TensorType(tuple(int(d) for d in self.data.shape), str(self.data.dtype))

    def __repr__(self) -> str:
        return f"Constant({self.type})"


@dataclass(frozen=True, slots=True)
class Op(Expr):
    """A reference to a registered operator, by name (e.g. `nn.conv2d`)."""

    name: str

    def __repr__(self) -> str:
        return f"Op({self.name})"


@dataclass(frozen=True, slots=True, eq=False)
class Call(Expr):
    """A call of an operator, a global, a function value, a closure or a constructor."""

    op: Expr
    args: tuple[Expr, ...]
    attrs: Attrs = EMPTY_ATTRS
    type_args: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.args, tuple):
            object.__setattr__(self, "args", tuple(self.args))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs or {}))

    def __repr__(self) -> str:
        return f"Call({self.op!r}, {len(self.args)} args)"


@dataclass(frozen=True, slots=True, eq=False)
class Function(Expr):
    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    type_params: tuple[TypeVar, ...] = ()
    attrs: Attrs = EMPTY_ATTRS

    def __post_init__(self) -> None:
        if not isinstance(self.params, tuple):
            object.__setattr__(self, "params", tuple(self.params))
        if not isinstance(self.type_params, tuple):
            object.__setattr__(self, "type_params", tuple(self.type_params))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs or {}))

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("Primitive", 0))

    def __repr__(self) -> str:
        return f"Function({', '.join('%' + p.name_hint for p in self.params)})"


@dataclass(frozen=True, slots=True, eq=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr


@dataclass(frozen=True, slots=True, eq=False)
class If(Expr):
    cond: Expr
    true_branch: Expr
    false_branch: Expr


@dataclass(frozen=True, slots=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True, slots=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int


@dataclass(frozen=True, slots=True)
class Constructor(Expr):
    """An ADT constructor such as `Cons`. Equal by name and the ADT it belongs to."""

    name: str
    inputs: tuple[Type, ...]
    belong_to: GlobalTypeVar
    tag: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, tuple):
            object.__setattr__(self, "inputs", tuple(self.inputs))

    def __repr__(self) -> str:
        return f"Constructor({self.name})"


@dataclass(frozen=True, slots=True, eq=False)
class RefCreate(Expr):
    value: Expr


@dataclass(frozen=True, slots=True, eq=False)
class RefRead(Expr):
    ref: Expr


@dataclass(frozen=True, slots=True, eq=False)
class RefWrite(Expr):
    ref: Expr
    value: Expr


# ---- patterns ------------------------------------------------------------------------------


class Pattern(Node):
    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class PatternWildcard(Pattern):
    pass


@dataclass(frozen=True, slots=True, eq=False)
class PatternVar(Pattern):
    var: Var


@dataclass(frozen=True, slots=True, eq=False)
class PatternConstructor(Pattern):
    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.patterns, tuple):
            object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(frozen=True, slots=True, eq=False)
class PatternTuple(Pattern):
    patterns: tuple[Pattern, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.patterns, tuple):
            object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(frozen=True, slots=True, eq=False)
class Clause:
    lhs: Pattern
    rhs: Expr


@dataclass(frozen=True, slots=True, eq=False)
class Match(Expr):
    """`match (e) {...}` (complete) or `match? (e) {...}` (incomplete: may fail at run time)."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.clauses, tuple):
            object.__setattr__(self, "clauses", tuple(self.clauses))


def const(value: Any, dtype: str | None = None) -> Constant:
    """Build a Constant from a Python or numpy value (float defaults to float32, int to int32)."""
    if isinstance(value, np.ndarray):
        arr = value.astype(dtype) if dtype else value
    elif isinstance(value, bool):
        arr = np.array(value, dtype=dtype or "bool")
    elif isinstance(value, int):
        arr = np.array(value, dtype=dtype or "int32")
    elif isinstance(value, float):
        arr = np.array(value, dtype=dtype or "float32")
    else:
        arr = np.asarray(value, dtype=dtype)
        if dtype is None and arr.dtype == np.float64:
            arr = arr.astype("float32")
    return Constant(arr)


def bind_lets(bindings: list[tuple[Var, Expr]], body: Expr) -> Expr:
    """Nest `let v = e;` bindings around `body` without recursion."""
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    return body


def flatten_lets(expr: Expr) -> tuple[list[tuple[Var, Expr]], Expr]:
    """The inverse of `bind_lets`: the let bindings at the head of `expr` and the final body."""
    bindings = []
    while isinstance(expr, Let):
        bindings.append((expr.var, expr.value))
        expr = expr.body
    return bindings, expr
