"""Unification of types with holes (`IncompleteType`), by union-find.

A hole is bound at most once, to another hole or to a type; `find` follows the chain (compressing
it) and `resolve` substitutes every solved hole inside a type. Tensor types unify dimension by
dimension: equal integers, equal symbolic names, and `?` (AnyDim) with anything — `?` is a
run-time extent, so it is compatible with every dimension but proves nothing about it. Type
variables are rigid: inside a polymorphic function `A` only unifies with `A` itself (or a hole);
callers instantiate a polymorphic type with fresh holes before unifying (`instantiate`).

Where a value meets the type it is expected to have (an argument, a let's annotation, a return
annotation), `subsume(expected, given)` lets a polymorphic function serve where a less polymorphic
function type is expected: the given type's extra type parameters are instantiated with fresh
holes, then the two unify (Relay's unifier does the same for function types). Only the given side
is instantiated, so a monomorphic function is *not* accepted where a polymorphic one is expected
(Relay's unifier is symmetric here and would accept it).

`unify` raises `UnifyError`, which says *where inside* the two types they first differ
("dimension 1: 3 vs 4"); callers wrap it in a `TypeCheckError` that names the construct.
"""

from __future__ import annotations

from autorelay.ir.types import (
    AnyDim,
    Dim,
    FuncType,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
    substitute_type,
)


class UnifyError(Exception):
    """Two types do not unify; `detail` names the first conflicting part."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def show(t: Type) -> str:
    """A type as messages print it: the text syntax (holes print as `?tN`)."""
    return str(t)


def contains_hole(t: Type) -> bool:
    """Whether `t` still has an `IncompleteType` anywhere inside (call on resolved types)."""
    if isinstance(t, IncompleteType):
        return True
    if isinstance(t, TupleType):
        return any(contains_hole(f) for f in t.fields)
    if isinstance(t, FuncType):
        return any(contains_hole(a) for a in t.arg_types) or contains_hole(t.ret_type)
    if isinstance(t, TypeCall):
        return any(contains_hole(a) for a in t.args)
    if isinstance(t, RefType):
        return contains_hole(t.value)
    return False


def instantiate(t: FuncType, type_args: tuple[Type, ...] = ()) -> FuncType:
    """A polymorphic function type with its type parameters replaced (by fresh holes by default)."""
    if not t.type_params:
        return t
    if type_args and len(type_args) != len(t.type_params):
        raise UnifyError(
            f"{len(type_args)} type argument(s) given for {len(t.type_params)} type parameter(s)"
        )
    args = type_args or tuple(IncompleteType() for _ in t.type_params)
    subst = dict(zip(t.type_params, args))
    return FuncType(
        tuple(substitute_type(a, subst) for a in t.arg_types),
        substitute_type(t.ret_type, subst),
        (),
        tuple(substitute_type(c, subst) for c in t.type_constraints),
    )


def instantiate_extra(t: FuncType, keep: int) -> FuncType:
    """`t` with its type parameters after the first `keep` replaced by fresh holes."""
    subst: dict[TypeVar, Type] = {p: IncompleteType() for p in t.type_params[keep:]}
    return FuncType(
        tuple(substitute_type(a, subst) for a in t.arg_types),
        substitute_type(t.ret_type, subst),
        t.type_params[:keep],
        tuple(substitute_type(c, subst) for c in t.type_constraints),
    )


class Unifier:
    """Union-find over holes. `version` counts bindings, so a solver can tell whether it progressed."""

    def __init__(self) -> None:
        self.parent: dict[IncompleteType, Type] = {}
        self.version = 0

    def fresh(self) -> IncompleteType:
        return IncompleteType()

    def find(self, t: Type) -> Type:
        """The representative of `t`: the type a hole chain ends in, or the last unbound hole."""
        if not isinstance(t, IncompleteType):
            return t
        path = []
        while isinstance(t, IncompleteType) and t in self.parent:
            path.append(t)
            t = self.parent[t]
        for h in path[:-1]:
            self.parent[h] = t
        return t

    def resolve(self, t: Type) -> Type:
        """`t` with every solved hole replaced by its solution, recursively."""
        t = self.find(t)
        if isinstance(t, TensorType | TypeVar | IncompleteType):
            return t
        if isinstance(t, TupleType):
            return TupleType(tuple(self.resolve(f) for f in t.fields))
        if isinstance(t, FuncType):
            return FuncType(
                tuple(self.resolve(a) for a in t.arg_types),
                self.resolve(t.ret_type),
                t.type_params,
                tuple(self.resolve(c) for c in t.type_constraints),
            )
        if isinstance(t, TypeCall):
            return TypeCall(t.func, tuple(self.resolve(a) for a in t.args))
        if isinstance(t, RefType):
            return RefType(self.resolve(t.value))
        return t

    def _bind(self, hole: IncompleteType, t: Type) -> None:
        if self._occurs(hole, t):
            raise UnifyError(f"infinite type: {hole} occurs in {show(self.resolve(t))}")
        self.parent[hole] = t
        self.version += 1

    def _occurs(self, hole: IncompleteType, t: Type) -> bool:
        t = self.find(t)
        if t == hole:
            return True
        if isinstance(t, TupleType):
            return any(self._occurs(hole, f) for f in t.fields)
        if isinstance(t, FuncType):
            return any(self._occurs(hole, a) for a in t.arg_types) or self._occurs(hole, t.ret_type)
        if isinstance(t, TypeCall):
            return any(self._occurs(hole, a) for a in t.args)
        if isinstance(t, RefType):
            return self._occurs(hole, t.value)
        return False

    def unify(self, a: Type, b: Type) -> None:
        """Make `a` and `b` equal by binding holes, or raise `UnifyError` naming the conflict."""
        a, b = self.find(a), self.find(b)
        if a is b:
            return
        if isinstance(a, IncompleteType):
            if a != b:
                self._bind(a, b)
            return
        if isinstance(b, IncompleteType):
            self._bind(b, a)
            return
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            _unify_tensors(a, b)
        elif isinstance(a, TupleType) and isinstance(b, TupleType):
            if len(a.fields) != len(b.fields):
                raise UnifyError(f"tuples of {len(a.fields)} and {len(b.fields)} fields")
            for i, (x, y) in enumerate(zip(a.fields, b.fields)):
                self._nested(f"tuple field {i}", x, y)
        elif isinstance(a, FuncType) and isinstance(b, FuncType):
            self._unify_funcs(a, b)
        elif isinstance(a, TypeCall) and isinstance(b, TypeCall):
            if a.func != b.func:
                raise UnifyError(f"type {a.func.name} vs type {b.func.name}")
            if len(a.args) != len(b.args):
                raise UnifyError(f"{a.func.name} with {len(a.args)} vs {len(b.args)} type arguments")
            for i, (x, y) in enumerate(zip(a.args, b.args)):
                self._nested(f"type argument {i} of {a.func.name}", x, y)
        elif isinstance(a, RefType) and isinstance(b, RefType):
            self._nested("reference contents", a.value, b.value)
        elif a != b:
            raise UnifyError(f"{_kind(a)} vs {_kind(b)}")

    def subsume(self, expected: Type, given: Type) -> None:
        """Unify where a value of type `given` is used at type `expected` (see the module doc)."""
        e, g = self.find(expected), self.find(given)
        if isinstance(e, FuncType) and isinstance(g, FuncType) and len(g.type_params) > len(e.type_params):
            self.unify(e, instantiate_extra(g, len(e.type_params)))
        elif isinstance(e, TupleType) and isinstance(g, TupleType) and len(e.fields) == len(g.fields):
            for i, (x, y) in enumerate(zip(e.fields, g.fields)):
                try:
                    self.subsume(x, y)
                except UnifyError as err:
                    if err.detail.startswith("infinite type"):
                        raise
                    raise UnifyError(f"tuple field {i}: {err.detail}") from None
        else:
            self.unify(e, g)

    def _nested(self, where: str, a: Type, b: Type) -> None:
        try:
            self.unify(a, b)
        except UnifyError as e:
            if e.detail.startswith("infinite type"):
                raise
            raise UnifyError(f"{where}: {e.detail}") from None

    def _unify_funcs(self, a: FuncType, b: FuncType) -> None:
        if len(a.arg_types) != len(b.arg_types):
            raise UnifyError(
                f"functions of {len(a.arg_types)} and {len(b.arg_types)} parameters"
            )
        if len(a.type_params) != len(b.type_params):
            raise UnifyError(
                f"functions with {len(a.type_params)} and {len(b.type_params)} type parameters"
            )
        if a.type_params != b.type_params:
            # Alpha-rename b's type parameters to a's; both stay rigid.
            b = FuncType(
                tuple(substitute_type(x, dict(zip(b.type_params, a.type_params))) for x in b.arg_types),
                substitute_type(b.ret_type, dict(zip(b.type_params, a.type_params))),
                a.type_params,
            )
        for i, (x, y) in enumerate(zip(a.arg_types, b.arg_types)):
            self._nested(f"parameter {i}", x, y)
        self._nested("return type", a.ret_type, b.ret_type)


def _unify_tensors(a: TensorType, b: TensorType) -> None:
    if a.dtype != b.dtype:
        raise UnifyError(f"dtype {a.dtype} vs {b.dtype}")
    if len(a.shape) != len(b.shape):
        raise UnifyError(f"rank {len(a.shape)} vs {len(b.shape)}")
    for i, (x, y) in enumerate(zip(a.shape, b.shape)):
        if not dims_compatible(x, y):
            raise UnifyError(f"dimension {i}: {x} vs {y}")


def join(a: Type, b: Type) -> Type:
    """The type of a value that is `a` or `b` (an if's two branches, a match's clauses), once they
    have unified: an extent on which they differ is `?`. The then-branch's (0, 4) where the else
    gives (?, 4) would promise no rows where there may be many."""
    if isinstance(a, TensorType) and isinstance(b, TensorType) and len(a.shape) == len(b.shape):
        if a.shape == b.shape:
            return a
        return TensorType(tuple(x if x == y else AnyDim() for x, y in zip(a.shape, b.shape)), a.dtype)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        fields = tuple(join(x, y) for x, y in zip(a.fields, b.fields))
        return a if all(f is x for f, x in zip(fields, a.fields)) else TupleType(fields)
    return a


def dims_compatible(x: Dim, y: Dim) -> bool:
    """Equal ints, equal symbolic names, or either one `?`."""
    if isinstance(x, AnyDim) or isinstance(y, AnyDim):
        return True
    return x == y


def _kind(t: Type) -> str:
    if isinstance(t, TypeVar):
        return f"type variable {t.name}"
    names = {
        TensorType: "tensor", TupleType: "tuple", FuncType: "function", TypeCall: "ADT",
        RefType: "reference",
    }
    return f"{names.get(type(t), type(t).__name__)} {show(t)}"
