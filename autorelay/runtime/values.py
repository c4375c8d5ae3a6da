"""Run-time values of the reference interpreter.

Tensors are plain NumPy arrays and tuples are Python tuples, so results can be handed straight to
NumPy code and tests. The language's other values get small classes here: closures (a function
plus the captured variables it needs), ADT constructor values, references, and operators or
constructors used as first-class functions.

ADT values can be arbitrarily deep (a 10,000-element `List` is a chain of 10,000 `Cons` cells), so
everything here that walks them — `repr`, `to_list`, `from_list`, equality — is iterative.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from autorelay.ir.expr import Constructor, Function
from autorelay.ir.module import IRModule


class Closure:
    """A function value: the `Function` node and the values of its free variables.

    Only the variables the body actually uses are captured (not the whole enclosing scope), so a
    closure created inside a long loop keeps nothing else alive.
    """

    __slots__ = ("env", "fn", "name")

    def __init__(self, fn: Function, env: dict[Any, Any], name: str | None = None) -> None:
        self.fn = fn
        self.env = env
        self.name = name

    def __repr__(self) -> str:
        params = ", ".join("%" + p.name_hint for p in self.fn.params)
        label = f"@{self.name}" if self.name else "closure"
        return f"<{label} fn({params})>"


class OpValue:
    """An operator used as a value (`%f = nn.relu; %f(%x)`): called with default attributes."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<op {self.name}>"


class ConstructorFn:
    """A constructor that takes arguments, used as a first-class function (`@map(Some, %l)`)."""

    __slots__ = ("constructor",)

    def __init__(self, constructor: Constructor) -> None:
        self.constructor = constructor

    def __repr__(self) -> str:
        return f"<constructor {self.constructor.name}>"


class RefValue:
    """A mutable cell created by `ref(v)`; `ref_read`/`ref_write` read and replace `.value`."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"ref({format_value(self.value)})"


class ConstructorValue:
    """A value built by an ADT constructor: `Cons(x, Nil)` is `ConstructorValue(Cons, (x, Nil))`."""

    __slots__ = ("constructor", "fields")

    def __init__(self, constructor: Constructor, fields: tuple[Any, ...] = ()) -> None:
        self.constructor = constructor
        self.fields = fields

    @property
    def name(self) -> str:
        return self.constructor.name

    @property
    def tag(self) -> int:
        return self.constructor.tag

    def __repr__(self) -> str:
        return format_value(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConstructorValue):
            return NotImplemented
        return values_equal(self, other)

    __hash__ = None  # type: ignore[assignment]  # mutable contents (arrays): not hashable


def same_constructor(a: Constructor, b: Constructor) -> bool:
    """Constructors are the same when they have the same name in the same ADT."""
    return a is b or (a.name == b.name and a.belong_to == b.belong_to)


# ---- List conversion -----------------------------------------------------------------------


def to_list(value: ConstructorValue) -> list[Any]:
    """The elements of a `List` value (`Cons(a, Cons(b, Nil))` -> `[a, b]`), without recursion.

    Any ADT shaped like a list works: a nullary constructor ends it, and a cell keeps its element
    in the first field and the rest of the list in the last.
    """
    if not isinstance(value, ConstructorValue):
        raise TypeError(f"to_list expects a List constructor value, got {type(value).__name__}")
    out: list[Any] = []
    while value.fields:
        if len(value.fields) != 2 or not isinstance(value.fields[1], ConstructorValue):
            raise TypeError(f"to_list: {value.constructor.name} is not a list cell (element, rest)")
        out.append(value.fields[0])
        value = value.fields[1]
    return out


def from_list(mod: IRModule, items: Iterable[Any], cons: str = "Cons", nil: str = "Nil") -> ConstructorValue:
    """A `List` value with the given elements, using the module's `Cons`/`Nil` constructors."""
    try:
        cons_c, nil_c = mod.get_constructor(cons), mod.get_constructor(nil)
    except KeyError as e:
        raise ValueError(f"from_list: the module defines no List ({e.args[0]})") from None
    value = ConstructorValue(nil_c, ())
    for item in reversed(list(items)):
        value = ConstructorValue(cons_c, (item, value))
    return value


# ---- printing and comparison ---------------------------------------------------------------

_MAX_PRINT = 50  # list cells shown before eliding


def _format_array(a: np.ndarray) -> str:
    if a.ndim == 0:
        return f"{a.item()!r}{'' if a.dtype == np.float32 else ':' + str(a.dtype)}"
    return f"array{list(a.shape)}<{a.dtype}>"


def format_value(value: Any) -> str:
    """A short readable rendering of any run-time value (long ADT chains are elided)."""
    if isinstance(value, np.ndarray | np.generic):
        return _format_array(np.asarray(value))
    if isinstance(value, tuple):
        inner = ", ".join(format_value(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if not isinstance(value, ConstructorValue):
        return repr(value)
    # Walk the spine along the last field iteratively: this is how lists and Nats nest.
    parts: list[str] = []
    depth = 0
    node: Any = value
    while isinstance(node, ConstructorValue) and node.fields:
        if depth == _MAX_PRINT:
            parts.append("...")
            node = None
            break
        heads = ", ".join(format_value(f) for f in node.fields[:-1])
        parts.append(f"{node.constructor.name}({heads}{', ' if heads else ''}")
        node = node.fields[-1]
        depth += 1
    tail = "" if node is None else (node.constructor.name if isinstance(node, ConstructorValue)
                                    else format_value(node))
    return "".join(parts) + tail + ")" * depth


def values_equal(a: Any, b: Any) -> bool:
    """Structural equality of run-time values (arrays compared by shape, dtype and contents; NaNs in
    the same places are equal)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            floats = x.dtype.kind in "fc"
            if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=floats):
                return False
        elif isinstance(x, tuple) and isinstance(y, tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif isinstance(x, ConstructorValue) and isinstance(y, ConstructorValue):
            if not same_constructor(x.constructor, y.constructor) or len(x.fields) != len(y.fields):
                return False
            stack.extend(zip(x.fields, y.fields))
        elif isinstance(x, RefValue) and isinstance(y, RefValue):
            if x is not y:
                return False
        elif x is not y and x != y:
            return False
    return True


def input_array(value: Any, dtype: str) -> tuple[np.ndarray, str | None]:
    """An executable's input as an array of the parameter's `dtype`, and None; or the value and
    why it cannot be one (every executor checks its inputs with this one rule).

    Conversions NumPy calls `same_kind` are made (a float64 array into a float32 input, a Python
    list), except an integer conversion that would change a value: int64 300 passed for an int8
    input wrapped to 44 before, silently. Kernels read raw memory, so nothing else gets through."""
    arr = np.asarray(value)
    if arr.dtype == np.dtype(dtype):
        return arr, None
    if not np.can_cast(arr.dtype, dtype, "same_kind"):
        return arr, f"expected dtype {dtype}, got {arr.dtype}"
    out = arr.astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.integer) and not np.array_equal(out, arr):
        info = np.iinfo(dtype)
        return arr, (f"expected dtype {dtype}; the {arr.dtype} values given do not all fit its range "
                     f"[{info.min}, {info.max}]")
    return out, None
