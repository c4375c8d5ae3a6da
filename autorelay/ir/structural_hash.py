"""`structural_hash`: a stable, alpha-invariant digest that agrees with `structural_equal`.

It is the workload key of the tuning log, so it must be the same in every process and on every
run: it is built from `hashlib` digests of a canonical description, never from Python's `hash()`
(randomised per process for strings) or from object ids. Bound variables contribute the order in
which their binding site is met, not their name; shared nodes are digested once (memo by node), so a
DAG costs time linear in its size.
"""

from __future__ import annotations

import hashlib
import json
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
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule
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


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def attr_key(v: Any) -> str:
    if v is None:
        return "N"
    if isinstance(v, bool):
        return f"b{int(v)}"
    if isinstance(v, int):
        return f"i{v}"
    if isinstance(v, float):
        return "fnan" if v != v else f"f{v!r}"
    if isinstance(v, str):
        return "s" + json.dumps(v)
    if isinstance(v, tuple | list):
        return "[" + ",".join(attr_key(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{json.dumps(k)}:{attr_key(v[k])}" for k in sorted(v)) + "}"
    return f"?{type(v).__name__}:{v!r}"


def constant_key(data: np.ndarray) -> str:
    if data.ndim == 0:  # fast path for the many scalar literals of a program
        v = data.item()
        if isinstance(v, float):
            v = "nan" if v != v else (v or 0.0)  # canonical NaN and +0.0
        return f"c{data.dtype}:{v!r}"
    x = np.ascontiguousarray(data)
    if x.dtype.kind == "f":
        # Canonical NaN and +0.0, so that values equal under `structural_equal` hash alike.
        x = np.where(np.isnan(x), np.nan, np.where(x == 0, 0, x)).astype(x.dtype)
    le = x.astype(x.dtype.newbyteorder("<"), copy=False).tobytes()
    return f"C{x.dtype}{list(x.shape)}{hashlib.blake2b(le, digest_size=16).hexdigest()}"


class _Hasher:
    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.keep: list[Expr] = []  # keeps memoised nodes alive so their ids are not reused
        self.bound: dict[int, int] = {}
        self.free: dict[int, int] = {}
        self.tv_stack: list[TypeVar] = []  # type parameters in scope, innermost last

    # ---- types ------------------------------------------------------------------------------

    def push_tvars(self, params: tuple[TypeVar, ...]) -> None:
        self.tv_stack.extend(params)

    def pop_tvars(self, params: tuple[TypeVar, ...]) -> None:
        if params:
            del self.tv_stack[-len(params):]

    def type(self, t: Type | None) -> str:
        if t is None:
            return "-"
        if isinstance(t, TensorType):
            dims = ",".join("?" if isinstance(d, AnyDim) else f"${d.name}" if isinstance(d, SymDim)
                            else str(d) for d in t.shape)
            return f"T({dims}){t.dtype}"
        if isinstance(t, TupleType):
            return "(" + ",".join(self.type(f) for f in t.fields) + ")"
        if isinstance(t, FuncType):
            self.push_tvars(t.type_params)
            key = (f"fn[{len(t.type_params)}](" + ",".join(self.type(a) for a in t.arg_types) + ")->"
                   + self.type(t.ret_type) + "|" + ",".join(self.type(c) for c in t.type_constraints))
            self.pop_tvars(t.type_params)
            return key
        if isinstance(t, TypeVar):
            for depth, p in enumerate(reversed(self.tv_stack)):
                if p == t:
                    return f"tv#{depth}"  # a de Bruijn index: independent of the name
            return f"tv:{t.name}"
        if isinstance(t, GlobalTypeVar):
            return f"adt:{t.name}[]"
        if isinstance(t, TypeCall):
            return f"adt:{t.func.name}[" + ",".join(self.type(a) for a in t.args) + "]"
        if isinstance(t, RefType):
            return f"Ref[{self.type(t.value)}]"
        if isinstance(t, IncompleteType):
            return "_"
        raise TypeError(f"cannot hash type {t!r}")

    # ---- expressions ------------------------------------------------------------------------

    def binder(self, v: Var) -> str:
        self.bound[id(v)] = len(self.bound)
        return f"bind:{self.type(v.type_annotation)}"

    def expr(self, e: Expr) -> str:
        if isinstance(e, Var):
            i = self.bound.get(id(e))
            if i is not None:
                return f"v{i}"
            return f"free{self.free.setdefault(id(e), len(self.free))}"
        if isinstance(e, GlobalVar):
            return f"@{e.name_hint}"
        if isinstance(e, Op):
            return f"op:{e.name}"
        if isinstance(e, Constructor):
            return f"ctor:{e.belong_to.name}.{e.name}"
        if isinstance(e, Constant):
            return constant_key(e.data)
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit
        d = _digest(self.composite(e))
        self.memo[id(e)] = d
        self.keep.append(e)
        return d

    def composite(self, e: Expr) -> str:
        if isinstance(e, Call):
            return (f"Call({self.expr(e.op)};" + ",".join(self.expr(a) for a in e.args)
                    + ";" + attr_key(e.attrs) + ")")
        if isinstance(e, Function):
            self.push_tvars(e.type_params)
            params = ",".join(self.binder(p) for p in e.params)
            key = (f"Fn[{len(e.type_params)}]({params})->{self.type(e.ret_type)};{attr_key(e.attrs)};"
                   + self.expr(e.body))
            self.pop_tvars(e.type_params)
            return key
        if isinstance(e, Let):
            return f"Let({self.binder(e.var)};{self.expr(e.value)};{self.expr(e.body)})"
        if isinstance(e, If):
            return f"If({self.expr(e.cond)};{self.expr(e.true_branch)};{self.expr(e.false_branch)})"
        if isinstance(e, Tuple):
            return "Tuple(" + ",".join(self.expr(f) for f in e.fields) + ")"
        if isinstance(e, TupleGetItem):
            return f"Get({self.expr(e.tuple_value)};{e.index})"
        if isinstance(e, Match):
            clauses = ";".join(f"{self.pattern(c.lhs)}=>{self.expr(c.rhs)}" for c in e.clauses)
            return f"Match{'' if e.complete else '?'}({self.expr(e.data)};{clauses})"
        if isinstance(e, RefCreate):
            return f"Ref({self.expr(e.value)})"
        if isinstance(e, RefRead):
            return f"RefRead({self.expr(e.ref)})"
        if isinstance(e, RefWrite):
            return f"RefWrite({self.expr(e.ref)};{self.expr(e.value)})"
        raise TypeError(f"cannot hash {type(e).__name__}")

    def pattern(self, p: Pattern) -> str:
        if isinstance(p, PatternVar):
            return "P" + self.binder(p.var)
        if isinstance(p, PatternConstructor):
            return f"P{p.constructor.name}(" + ",".join(self.pattern(s) for s in p.patterns) + ")"
        if isinstance(p, PatternTuple):
            return "P(" + ",".join(self.pattern(s) for s in p.patterns) + ")"
        return "P_"

    def type_data(self, td: TypeData) -> str:
        self.push_tvars(td.type_vars)
        ctors = ";".join(f"{c.name}#{c.tag}(" + ",".join(self.type(t) for t in c.inputs) + ")"
                         for c in td.constructors)
        self.pop_tvars(td.type_vars)
        return f"type {td.header.name}[{len(td.type_vars)}]{{{ctors}}}"


@deep
def structural_hash(x: Any) -> str:
    """A hex digest of `x` (Expr, IRModule, Type, TypeData or Attrs), equal for equal structures."""
    if isinstance(x, IRModule):
        tdefs = sorted(x.type_definitions.items(), key=lambda kv: kv[0].name)
        types = [_Hasher().type_data(td) for _, td in tdefs]
        fns = [f"@{g.name_hint}={_Hasher().expr(f)}"
               for g, f in sorted(x.functions.items(), key=lambda kv: kv[0].name_hint)]
        key = "Module{" + ";".join(types) + "|" + ";".join(fns) + "}"
    elif isinstance(x, Expr):
        key = "Expr:" + _Hasher().expr(x)
    elif isinstance(x, Type):
        key = "Type:" + _Hasher().type(x)
    elif isinstance(x, TypeData):
        key = "TypeData:" + _Hasher().type_data(x)
    elif isinstance(x, Attrs | Mapping):
        key = "Attrs:" + attr_key(x)
    else:
        raise TypeError(f"structural_hash: cannot hash {type(x).__name__}")
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
