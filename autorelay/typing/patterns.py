"""Typing of match patterns against the type of the matched value.

A constructor pattern fixes the value's type to its ADT (with fresh type arguments, solved by
unification), checks its arity against the constructor's declared fields, and types each
sub-pattern against the field types with those type arguments substituted. Tuple patterns fix the
value to a tuple of as many fields; variable patterns bind; wildcards accept anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autorelay.ir.expr import Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard
from autorelay.ir.types import TupleType, Type, TypeCall, substitute_type
from autorelay.typing.unify import UnifyError, show

if TYPE_CHECKING:
    from autorelay.typing.infer import Inferencer


def check_pattern(inf: Inferencer, p: Pattern, t: Type) -> None:
    """Type pattern `p` as matching a value of type `t`, binding its variables."""
    inf.record(p, t)
    if isinstance(p, PatternWildcard):
        return
    if isinstance(p, PatternVar):
        var_t = inf.bind_var(p.var)
        inf.unify(p, var_t, t, f"pattern variable %{p.var.name_hint}: annotated type vs matched type")
        return
    if isinstance(p, PatternTuple):
        fields = tuple(inf.u.fresh() for _ in p.patterns)
        try:
            inf.u.unify(t, TupleType(fields))
        except UnifyError as e:
            raise inf.error(
                p, f"match: a tuple pattern of {len(p.patterns)} field(s) cannot match a value of type "
                f"{show(inf.u.resolve(t))} ({e.detail})"
            ) from None
        for sub, ft in zip(p.patterns, fields):
            check_pattern(inf, sub, ft)
        return
    if isinstance(p, PatternConstructor):
        ctor = p.constructor
        td = inf.type_data(p, ctor)
        args = tuple(inf.u.fresh() for _ in td.type_vars)
        adt = TypeCall(td.header, args)
        try:
            inf.u.unify(t, adt)
        except UnifyError as e:
            raise inf.error(
                p, f"match: pattern {ctor.name} (a constructor of type {td.header.name}) cannot match "
                f"a value of type {show(inf.u.resolve(t))} ({e.detail})"
            ) from None
        if len(p.patterns) != len(ctor.inputs):
            raise inf.error(
                p, f"match: pattern {ctor.name} has {len(p.patterns)} field pattern(s) but constructor "
                f"{ctor.name} takes {len(ctor.inputs)}"
            )
        subst = dict(zip(td.type_vars, args))
        for sub, field_t in zip(p.patterns, ctor.inputs):
            check_pattern(inf, sub, substitute_type(field_t, subst))
        return
    raise TypeError(f"not a pattern: {type(p).__name__}")
