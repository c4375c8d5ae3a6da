"""The IR: immutable expressions and types, modules, visitors, text format and structural keys."""

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Node,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Span,
    Tuple,
    TupleGetItem,
    Var,
    bind_lets,
    const,
    flatten_lets,
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
    scalar_type,
)
from autorelay.ir.visitor import ExprFunctor, ExprMutator, ExprVisitor, free_vars, post_order

__all__ = [
    "AnyDim", "Attrs", "Call", "Clause", "Constant", "Constructor", "Expr", "ExprFunctor",
    "ExprMutator", "ExprVisitor", "FuncType", "Function", "GlobalTypeVar", "GlobalVar", "IRModule",
    "If", "IncompleteType", "Let", "Match", "Node", "Op", "Pattern", "PatternConstructor",
    "PatternTuple", "PatternVar", "PatternWildcard", "RefCreate", "RefRead", "RefType", "RefWrite",
    "Span", "SymDim", "TensorType", "Tuple", "TupleGetItem", "TupleType", "Type", "TypeCall",
    "TypeData", "TypeVar", "Var", "bind_lets", "const", "flatten_lets", "free_vars", "post_order",
    "scalar_type",
]
