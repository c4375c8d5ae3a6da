"""Types of the IR. Shapes are part of tensor types, so shape checking is type checking.

Types are small trees, so they use plain dataclass structural equality and hashing. The one
exception is `IncompleteType`, a hole that type inference fills: it carries a unique id so that
two holes are never confused.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

DTYPES = (
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "bool",
)


def is_dtype(name: str) -> bool:
    """A scalar dtype of `DTYPES`, or a vector dtype `<scalar>x<lanes>` with 2 or more lanes
    (`int8x4`, `float16x4`: TVM's vector types). Vector tensors type-check (shapes, and dtypes
    compare as names) but have no NumPy form, so no constant or run-time value has one."""
    if name in DTYPES:
        return True
    base, x, lanes = name.rpartition("x")
    return bool(x) and base in DTYPES and lanes.isdigit() and not lanes.startswith("0") and int(lanes) >= 2


@dataclass(frozen=True, slots=True)
class AnyDim:
    """An unknown extent, printed `?`. Two `?` are not known to be equal."""

    def __str__(self) -> str:
        return "?"


@dataclass(frozen=True, slots=True)
class SymDim:
    """A named symbolic extent such as `n`; equal names denote equal extents."""

    name: str

    def __str__(self) -> str:
        return self.name


Dim = int | AnyDim | SymDim


def is_static(dim: Dim) -> bool:
    return isinstance(dim, int)


class Type:
    """Base of all types."""

    __slots__ = ()

    def __str__(self) -> str:
        from autorelay.ir.printer import type_to_text

        return type_to_text(self)


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if not is_dtype(self.dtype):
            raise ValueError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}, "
                             "or a vector of one like int8x4")
        if not isinstance(self.shape, tuple):
            object.__setattr__(self, "shape", tuple(self.shape))
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, int | AnyDim | SymDim):
                raise TypeError(f"bad dimension {d!r} in tensor shape {self.shape!r}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def has_no_elements(self) -> bool:
        """Static with an axis of length 0: a value no kernel needs to read or write (kernels take
        no empty buffers), such as the scan output of a loop that ran no iterations."""
        return self.is_static and 0 in self.shape

    @property
    def concrete_shape(self) -> tuple[int, ...]:
        if not self.is_static:
            raise ValueError(f"shape {self.shape} is not static")
        return self.shape  # type: ignore[return-value]

    def __str__(self) -> str:
        from autorelay.ir.printer import type_to_text

        return type_to_text(self)


def scalar_type(dtype: str) -> TensorType:
    return TensorType((), dtype)


@dataclass(frozen=True, slots=True)
class TypeVar(Type):
    """A type parameter (`A` in `List[A]` or `def @id[A](%x: A)`). Equal by name."""

    name: str
    kind: str = "type"  # "type" or "shape" (reserved)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class GlobalTypeVar(Type):
    """The name of an algebraic data type, e.g. `List`."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))

    def __str__(self) -> str:
        from autorelay.ir.printer import type_to_text

        return type_to_text(self)


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()
    type_constraints: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        for name in ("arg_types", "type_params", "type_constraints"):
            v = getattr(self, name)
            if not isinstance(v, tuple):
                object.__setattr__(self, name, tuple(v))

    def __str__(self) -> str:
        from autorelay.ir.printer import type_to_text

        return type_to_text(self)


@dataclass(frozen=True, slots=True)
class TypeCall(Type):
    """An applied ADT such as `List[Tensor[(3,), float32]]`."""

    func: GlobalTypeVar
    args: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.args, tuple):
            object.__setattr__(self, "args", tuple(self.args))

    def __str__(self) -> str:
        from autorelay.ir.printer import type_to_text

        return type_to_text(self)


@dataclass(frozen=True, slots=True)
class RefType(Type):
    value: Type

    def __str__(self) -> str:
        from autorelay.ir.printer import type_to_text

        return type_to_text(self)


_incomplete_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class IncompleteType(Type):
    """A type not yet known; inference replaces it. `id` keeps distinct holes distinct."""

    id: int = field(default_factory=lambda: next(_incomplete_ids))

    def __str__(self) -> str:
        return f"?t{self.id}"


@dataclass(frozen=True, slots=True)
class TypeData:
    """An ADT definition: `type List[A] { Cons(A, List[A]), Nil }`."""

    header: GlobalTypeVar
    type_vars: tuple[TypeVar, ...]
    constructors: tuple  # tuple[Constructor, ...]; typed loosely to avoid an import cycle


def free_type_vars(t: Type) -> list[TypeVar]:
    """Type variables that occur in `t` and are not bound by a FuncType inside it, in order."""
    out: list[TypeVar] = []

    def walk(t: Type, bound: frozenset) -> None:
        if isinstance(t, TypeVar):
            if t not in bound and t not in out:
                out.append(t)
        elif isinstance(t, TupleType):
            for f in t.fields:
                walk(f, bound)
        elif isinstance(t, FuncType):
            inner = bound | frozenset(t.type_params)
            for a in t.arg_types:
                walk(a, inner)
            walk(t.ret_type, inner)
        elif isinstance(t, TypeCall):
            for a in t.args:
                walk(a, bound)
        elif isinstance(t, RefType):
            walk(t.value, bound)

    walk(t, frozenset())
    return out


def substitute_type(t: Type, subst: dict[TypeVar, Type]) -> Type:
    """Replace type variables by types (capture-avoiding for FuncType's own parameters)."""
    if not subst:
        return t
    if isinstance(t, TypeVar):
        return subst.get(t, t)
    if isinstance(t, TupleType):
        return TupleType(tuple(substitute_type(f, subst) for f in t.fields))
    if isinstance(t, FuncType):
        inner = {k: v for k, v in subst.items() if k not in t.type_params}
        return FuncType(
            tuple(substitute_type(a, inner) for a in t.arg_types),
            substitute_type(t.ret_type, inner),
            t.type_params,
            tuple(substitute_type(c, inner) for c in t.type_constraints),
        )
    if isinstance(t, TypeCall):
        return TypeCall(t.func, tuple(substitute_type(a, subst) for a in t.args))
    if isinstance(t, RefType):
        return RefType(substitute_type(t.value, subst))
    return t
