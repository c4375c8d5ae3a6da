"""Values of AoT-generated code: a tensor is a pointer and a byte size; tuples are Python tuples of
those. Helpers that map Relay types onto that layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.ir.expr import Expr, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType, Type, TypeCall
from autorelay.runtime.aot.kernels import AotError


@dataclass(frozen=True)
class TVal:
    """A tensor value in generated code: a pointer operand and the size of the data."""

    ptr: str
    nbytes: int


def nbytes(t: TensorType) -> int:
    itemsize = 1 if t.dtype == "bool" else np.dtype(t.dtype).itemsize
    return int(np.prod(t.concrete_shape, dtype=np.int64)) * itemsize


def leaves(t: Type | None, what: str) -> list[TensorType]:
    """The static tensor types of a tensor or (nested) tuple type."""
    if isinstance(t, TensorType):
        if not t.is_static:
            raise AotError(f"AoT: {what} has a dynamic shape {t}; AoT code needs static shapes: build with "
                           "executor=\"vm\" (it compiles a kernel per concrete shape)")
        return [t]
    if isinstance(t, TupleType):
        return [x for f in t.fields for x in leaves(f, what)]
    raise AotError(f"AoT: {what} has type {t}; only tensors and tuples of tensors are supported")


def list_element(mod: IRModule, t: Type | None) -> TensorType | None:
    """The element type if `t` is a list-like ADT (`Cons(A, List[A])`, `Nil`) of static tensors."""
    if not isinstance(t, TypeCall) or len(t.args) != 1 or not isinstance(t.args[0], TensorType):
        return None
    data = next((d for h, d in mod.type_definitions.items() if h == t.func), None)
    if data is None or len(data.constructors) != 2:
        return None
    return t.args[0] if t.args[0].is_static else None


def ptr_const(addr: int) -> str:
    return f"inttoptr (i64 {addr} to ptr)"


def type_of(e: Expr) -> Type | None:
    if isinstance(e, Var) and e.type_annotation is not None:
        return e.type_annotation
    return e.checked_type if e.has_checked_type else None


def flatten(v: Any) -> list[TVal]:
    return [x for f in v for x in flatten(f)] if isinstance(v, tuple) else [v]
