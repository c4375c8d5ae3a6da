"""PartialEvaluate: online partial evaluation of the entry function, given static values.

The evaluator runs the program on *partially known* values. A value is static (a tensor, a tuple,
an ADT cell, a closure or a global) when it is known at compile time, dynamic otherwise; every
dynamic computation is emitted into a residual program (a `let` list per scope). So:

* an op call whose arguments are all static tensors is evaluated with the op's reference (never
  an effectful op; reference operations are always residual);
* `if` / `match` on a static value keeps only the taken branch / clause;
* calls of known functions are inlined. A *recursive* function is inlined only when one of its
  arguments carries static data that can decide it (an ADT cell, or a scalar / integer tensor) —
  e.g. a known step count or a list of known length — and at most `max_unroll` times in all;
  otherwise the call is residual.
  Constant weights do not count as such data: they never decide when a recursion stops.

A generative RNN with a static step count therefore becomes straight-line dataflow, and a fold
over a `Cons(a, Cons(b, Nil))` list becomes the expression it computes. Static entry arguments are
given as `static_args=(("n", np.array(5)),)` and removed from the entry's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

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
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    bind_lets,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.op import registry
from autorelay.transform.dce import DeadCodeElimination
from autorelay.transform.inline import recursive_globals
from autorelay.transform.partial_values import (
    PV,
    Env,
    Scope,
    dyn,
    fresh_pattern,
    from_value,
    match_pattern,
    static_value,
)
from autorelay.transform.pass_base import ModulePass


class _PE:
    def __init__(self, mod: IRModule, max_unroll: int) -> None:
        self.mod = mod
        self.recursive = recursive_globals(mod)
        self.fuel = max_unroll  # recursive inlinings left, for the whole evaluation
        self.active: dict[int, int] = {}  # id(function) -> inlining depth
        self.scope = Scope(None)
        self.memo: dict[tuple[int, int, int], PV] = {}  # (node, activation, scope) -> value

    # ---- residual code ----------------------------------------------------------------------

    def reify(self, pv: PV) -> Expr:
        for s in self.scope.chain():
            hit = pv.residual.get(s.uid)
            if hit is not None:
                return hit
        if pv.kind == "dyn":  # made in a scope that is no longer visible: cannot happen lexically
            raise AssertionError("dynamic value used outside the scope that computed it")
        if pv.kind == "tensor":
            out: Expr = Constant(pv.data)
        elif pv.kind == "tuple":
            out = self.scope.emit(Tuple(tuple(self.reify(f) for f in pv.data)))
        elif pv.kind == "adt":
            con, fields = pv.data
            out = self.scope.emit(Call(con, tuple(self.reify(f) for f in fields))) if fields else con
        elif pv.kind in ("global", "op", "con"):
            out = pv.data
        else:
            out = self._reify_closure(pv)
        pv.residual[self.scope.uid] = out
        return out

    def _reify_closure(self, pv: PV) -> Expr:
        fn, env = pv.data
        var = Var("f")
        pv.residual[self.scope.uid] = var  # a recursive closure refers to itself by this name
        params = tuple(Var(p.name_hint, p.type_annotation) for p in fn.params)
        inner = Env(env, new_activation=True)
        body = self.in_scope(lambda: self._bind_and_eval(fn, params, inner))
        self.scope.bindings.append((var, Function(params, body, fn.ret_type, fn.type_params, fn.attrs)))
        return var

    def _bind_and_eval(self, fn: Function, params: tuple[Var, ...], env: Env) -> PV:
        for p, q in zip(fn.params, params):
            env.vars[id(p)] = dyn(q, self.scope)
        return self.eval(fn.body, env)

    def in_scope(self, thunk) -> Expr:
        outer = self.scope
        self.scope = Scope(outer)
        try:
            result = self.reify(thunk())
            return bind_lets(self.scope.bindings, result)
        finally:
            self.scope = outer

    def emit(self, expr: Expr, hint: str = "x") -> PV:
        return dyn(self.scope.emit(expr, hint), self.scope)

    # ---- evaluation -------------------------------------------------------------------------

    def eval(self, e: Expr, env: Env) -> PV:
        if isinstance(e, Call | Tuple | TupleGetItem | If | Match | Let):
            act = env.activation
            for s in self.scope.chain():
                hit = self.memo.get((id(e), act, s.uid))
                if hit is not None:
                    return hit
            pv = self._eval(e, env)
            self.memo[(id(e), act, self.scope.uid)] = pv
            return pv
        return self._eval(e, env)

    def _eval(self, e: Expr, env: Env) -> PV:
        if isinstance(e, Var):
            pv = env.lookup(e)
            return pv if pv is not None else dyn(e, self.scope)
        if isinstance(e, Constant):
            return PV("tensor", e.data)
        if isinstance(e, GlobalVar):
            return PV("global", e)
        if isinstance(e, Op):
            return PV("op", e)
        if isinstance(e, Constructor):
            return PV("adt", (e, [])) if not e.inputs else PV("con", e)
        if isinstance(e, Function):
            return PV("closure", (e, env)) if not e.is_primitive else PV("op", e)
        if isinstance(e, Let):
            return self._let(e, env)
        if isinstance(e, Call):
            return self._call(e, env)
        if isinstance(e, If):
            return self._if(e, env)
        if isinstance(e, Match):
            return self._match(e, env)
        if isinstance(e, Tuple):
            return PV("tuple", [self.eval(f, env) for f in e.fields])
        if isinstance(e, TupleGetItem):
            t = self.eval(e.tuple_value, env)
            if t.kind == "tuple":
                return t.data[e.index]
            return self.emit(TupleGetItem(self.reify(t), e.index))
        if isinstance(e, RefCreate):
            return self.emit(RefCreate(self.reify(self.eval(e.value, env))))
        if isinstance(e, RefRead):
            return self.emit(RefRead(self.reify(self.eval(e.ref, env))))
        if isinstance(e, RefWrite):
            ref, val = self.eval(e.ref, env), self.eval(e.value, env)
            return self.emit(RefWrite(self.reify(ref), self.reify(val)))
        raise TypeError(f"PartialEvaluate: unexpected {type(e).__name__}")

    def _let(self, e: Let, env: Env) -> PV:
        while isinstance(e, Let):
            pv = self.eval(e.value, env)
            if pv.kind == "dyn" and not isinstance(self.reify(pv), Var):
                pv = self.emit(self.reify(pv), e.var.name_hint)
            env.vars[id(e.var)] = pv
            e = e.body  # type: ignore[assignment]
        return self.eval(e, env)

    def _call(self, e: Call, env: Env) -> PV:
        callee = self.eval(e.op, env)
        args = [self.eval(a, env) for a in e.args]
        if callee.kind == "op" and isinstance(callee.data, Op):
            return self._op(e, callee.data, args)
        if callee.kind == "con":
            return PV("adt", (callee.data, args))
        if callee.kind == "adt" and not args:  # `Nil()`: a constructor without fields
            return callee
        if callee.kind in ("closure", "global"):
            fn, fenv = (callee.data if callee.kind == "closure" else (self.mod[callee.data], Env(None)))
            if self._should_inline(fn, callee, args):
                depth = self.active.get(id(fn), 0)
                self.active[id(fn)] = depth + 1
                try:
                    inner = Env(fenv, new_activation=True)
                    for p, a in zip(fn.params, args):
                        inner.vars[id(p)] = a
                    return self.eval(fn.body, inner)
                finally:
                    self.active[id(fn)] = depth
        return self.emit(Call(self.reify(callee), tuple(self.reify(a) for a in args), e.attrs, e.type_args))

    def _should_inline(self, fn: Function, callee: PV, args: list[PV]) -> bool:
        recursive = callee.kind == "global" and callee.data in self.recursive
        if not (recursive or self.active.get(id(fn), 0) > 0):
            return True
        if self.fuel <= 0 or not any(a.drives_control() for a in args):
            return False
        self.fuel -= 1  # a bound on the total unrolling, so dynamic control cannot explode it
        return True

    def _op(self, e: Call, op: Op, args: list[PV]) -> PV:
        opdef = registry.get(op.name) if registry.exists(op.name) else None
        if (opdef is not None and opdef.reference is not None and not opdef.effectful
                and all(static_value(a) is not None for a in args)):
            try:
                out = opdef.reference(e.attrs, *(static_value(a) for a in args))
            except Exception:
                out = None
            if out is not None:
                return from_value(out)
        return self.emit(Call(op, tuple(self.reify(a) for a in args), e.attrs, e.type_args))

    def _if(self, e: If, env: Env) -> PV:
        cond = self.eval(e.cond, env)
        if cond.kind == "tensor":
            taken = bool(np.asarray(cond.data).reshape(()))
            return self.eval(e.true_branch if taken else e.false_branch, env)
        c = self.reify(cond)
        t = self.in_scope(lambda: self.eval(e.true_branch, Env(env)))
        f = self.in_scope(lambda: self.eval(e.false_branch, Env(env)))
        return self.emit(If(c, t, f))

    def _match(self, e: Match, env: Env) -> PV:
        data = self.eval(e.data, env)
        for clause in e.clauses:
            binds: dict[int, PV] = {}
            verdict = match_pattern(clause.lhs, data, binds)
            if verdict is None:
                break  # cannot decide statically: residualise the whole match
            if verdict:
                inner = Env(env)
                inner.vars.update(binds)
                return self.eval(clause.rhs, inner)
        d = self.reify(data)
        clauses = []
        for clause in e.clauses:
            inner = Env(env)
            pattern = fresh_pattern(clause.lhs, inner, self.scope)
            rhs = self.in_scope(lambda c=clause, i=inner: self.eval(c.rhs, i))
            clauses.append(Clause(pattern, rhs))
        return self.emit(Match(d, tuple(clauses), e.complete))


@dataclass(frozen=True)
class PartialEvaluate(ModulePass):
    """Specialise `entry` for `static_args` (param name → value) and simplify what becomes known."""

    name: ClassVar[str] = "PartialEvaluate"
    static_args: tuple[tuple[str, Any], ...] = ()
    entry: str = "main"
    max_unroll: int = 1000

    def transform_module(self, mod: IRModule) -> IRModule:
        fn = mod[self.entry]
        given = dict(self.static_args)
        names = [p.name_hint for p in fn.params]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(f"PartialEvaluate: @{self.entry} has no parameter(s) {', '.join(unknown)} "
                             f"(parameters: {', '.join(names)})")
        pe = _PE(mod, self.max_unroll)
        env = Env(None)
        params = []
        for p in fn.params:
            if p.name_hint in given:
                value = np.asarray(given[p.name_hint])
                if isinstance(p.type_annotation, TensorType):
                    value = value.astype(p.type_annotation.dtype)
                env.vars[id(p)] = from_value(value)
            else:
                params.append(p)
                env.vars[id(p)] = dyn(p, pe.scope)
        result = pe.reify(pe.eval(fn.body, env))
        body = bind_lets(pe.scope.bindings, result)
        new = Function(tuple(params), body, fn.ret_type, fn.type_params, fn.attrs)
        out = mod.with_function(self.entry, new)
        return DeadCodeElimination().transform_module(out)
