"""Higher-order reverse-mode AD (the Relay paper's construction) for programs with control flow.

Every value of tensor type `T` becomes a pair `(T, Ref[T])`: the primal value and a reference
cell accumulating its gradient. Types lift structurally (tuples, ADT arguments, function
arguments and results), so lists, closures and references carry lifted values unchanged.

Every op call evaluates the op on the primals, allocates a zero gradient cell for the result, and
pushes a *backpropagator* onto a chain kept in a reference `%bp : Ref[fn () -> ()]`:

    let %prev = ref_read(%bp);
    ref_write(%bp, fn () { <add the op's input gradients into the inputs' cells>; %prev() })

The chain grows with whatever the program actually executed — whichever branch an `if` took, as
many steps as a recursion ran — so control flow needs no special treatment. After the forward
pass, the wrapper seeds the output's cell with `ones_like(output)`, calls the chain once, and
reads the parameters' cells.

Each global reachable from the entry gets a lifted copy `@name__ad` taking `%bp` as an extra last
parameter; closures capture `%bp` lexically. The output is in A-normal form: every intermediate
is let-bound in the scope (function body, branch, match arm) where it is computed, so a node that
the input shares between several uses runs once and pushes one backpropagator.

Limitations: parameters must be tensors; ADTs whose constructors name concrete tensor types are
run correctly but the output no longer type-checks against the original type definition.
"""

from __future__ import annotations

from typing import Any

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
    bind_lets,
    flatten_lets,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import FuncType, RefType, TensorType, TupleType, Type, TypeCall
from autorelay.op.registry import call as op_call
from autorelay.op.registry import get as get_op
from autorelay.transform.gradient import GradientError, is_float, substitute

__all__ = ["AD_SUFFIX", "gradient_higher_order", "lift_type"]

AD_SUFFIX = "__ad"
UNIT = TupleType(())
BP_TYPE = RefType(FuncType((), UNIT))


def lift_type(t: Type | None) -> Type | None:
    """The type of a value in the lifted program (each tensor paired with its gradient cell)."""
    if t is None:
        return None
    if isinstance(t, TensorType):
        return TupleType((t, RefType(t)))
    if isinstance(t, TupleType):
        return TupleType(tuple(lift_type(f) for f in t.fields))
    if isinstance(t, FuncType):
        return FuncType(tuple(lift_type(a) for a in t.arg_types), lift_type(t.ret_type), t.type_params,
                        t.type_constraints)
    if isinstance(t, TypeCall):
        return TypeCall(t.func, tuple(lift_type(a) for a in t.args))
    if isinstance(t, RefType):
        return RefType(lift_type(t.value))
    return t


class _Scope:
    __slots__ = ("bindings", "memo")

    def __init__(self) -> None:
        self.bindings: list[tuple[Var, Expr]] = []
        self.memo: dict[int, tuple[Expr, Expr]] = {}


class _Lifter:
    """Rewrites expressions of one module into the lifted program, in A-normal form."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.vars: dict[Var, Expr] = {}
        self.scopes: list[_Scope] = []
        self.bp: Var | None = None
        self.lifted_globals: dict[GlobalVar, GlobalVar] = {}
        self.todo: list[GlobalVar] = []
        self.count = 0

    # ---- scopes -----------------------------------------------------------------------------

    def emit(self, value: Expr, hint: str = "t") -> Var:
        v = Var(f"{hint}{self.count}")
        self.count += 1
        self.scopes[-1].bindings.append((v, value))
        return v

    def block(self, expr: Expr) -> Expr:
        """Lift `expr` in a fresh scope (a branch, a match arm, a function body)."""
        self.scopes.append(_Scope())
        try:
            atom = self.lift(expr)
            return bind_lets(self.scopes[-1].bindings, atom)
        finally:
            self.scopes.pop()

    def global_name(self, gv: GlobalVar) -> GlobalVar:
        new = self.lifted_globals.get(gv)
        if new is None:
            if gv not in self.mod:
                raise GradientError(f"gradient: call of unknown global @{gv.name_hint}")
            new = self.lifted_globals[gv] = GlobalVar(gv.name_hint + AD_SUFFIX)
            self.todo.append(gv)
        return new

    def new_var(self, v: Var) -> Var:
        nv = Var(v.name_hint, lift_type(v.type_annotation))
        self.vars[v] = nv
        return nv

    # ---- expressions --------------------------------------------------------------------------

    def lift(self, e: Expr) -> Expr:
        """An atom (variable or nullary constructor) holding the lifted value of `e`."""
        if isinstance(e, Var):
            try:
                return self.vars[e]
            except KeyError:
                raise GradientError(f"gradient: unbound variable %{e.name_hint}") from None
        if isinstance(e, Constructor):
            return e
        for scope in reversed(self.scopes):
            hit = scope.memo.get(id(e))
            if hit is not None:
                return hit[1]
        atom = self._lift_new(e)
        self.scopes[-1].memo[id(e)] = (e, atom)
        return atom

    def _lift_new(self, e: Expr) -> Expr:
        if isinstance(e, Constant):
            return self.emit(Tuple((e, RefCreate(op_call("zeros_like", e)))), "c")
        if isinstance(e, Let):
            return self._lift_let(e)
        if isinstance(e, Call):
            return self._lift_call(e)
        if isinstance(e, Function):
            return self.emit(self.lift_function(e), "f")
        if isinstance(e, GlobalVar):
            return self.emit(self._global_closure(e), "f")
        if isinstance(e, If):
            cond = self.lift(e.cond)
            return self.emit(If(TupleGetItem(cond, 0), self.block(e.true_branch), self.block(e.false_branch)))
        if isinstance(e, Match):
            data = self.lift(e.data)
            clauses = []
            for c in e.clauses:
                clauses.append(Clause(self._pattern(c.lhs), self.block(c.rhs)))
            return self.emit(Match(data, tuple(clauses), e.complete))
        if isinstance(e, Tuple):
            return self.emit(Tuple(tuple(self.lift(f) for f in e.fields)))
        if isinstance(e, TupleGetItem):
            return self.emit(TupleGetItem(self.lift(e.tuple_value), e.index))
        if isinstance(e, RefCreate):
            return self.emit(RefCreate(self.lift(e.value)))
        if isinstance(e, RefRead):
            return self.emit(RefRead(self.lift(e.ref)))
        if isinstance(e, RefWrite):
            return self.emit(RefWrite(self.lift(e.ref), self.lift(e.value)))
        if isinstance(e, Op):
            raise GradientError(f"gradient: operator {e.name} used as a value; call it directly")
        raise GradientError(f"gradient: cannot differentiate {type(e).__name__}")

    def _lift_let(self, e: Let) -> Expr:
        lets, body = flatten_lets(e)
        for var, value in lets:
            if isinstance(value, Function):
                # Bind the closure to its own (lifted) name so a recursive let can call itself.
                nv = self.new_var(var)
                self.scopes[-1].bindings.append((nv, self.lift_function(value)))
            else:
                self.vars[var] = self.lift(value)
        return self.lift(body)

    def _pattern(self, p: Pattern) -> Pattern:
        if isinstance(p, PatternVar):
            return PatternVar(self.new_var(p.var))
        if isinstance(p, PatternConstructor):
            return PatternConstructor(p.constructor, tuple(self._pattern(s) for s in p.patterns))
        if isinstance(p, PatternTuple):
            return PatternTuple(tuple(self._pattern(s) for s in p.patterns))
        return p

    def lift_function(self, f: Function) -> Function:
        params = tuple(self.new_var(p) for p in f.params)
        return Function(params, self.block(f.body), lift_type(f.ret_type), f.type_params)

    def _global_closure(self, gv: GlobalVar) -> Function:
        """A global used as a value: a closure passing this scope's backpropagator chain along."""
        target = self.mod[gv]
        params = tuple(Var(p.name_hint, lift_type(p.type_annotation)) for p in target.params)
        return Function(params, Call(self.global_name(gv), (*params, self.bp)))

    def _lift_call(self, e: Call) -> Expr:
        if isinstance(e.op, Op):
            return self._lift_op_call(e)
        args = tuple(self.lift(a) for a in e.args)
        type_args = tuple(lift_type(t) for t in e.type_args)
        if isinstance(e.op, GlobalVar):
            return self.emit(Call(self.global_name(e.op), (*args, self.bp), e.attrs, type_args))
        callee = e.op if isinstance(e.op, Constructor) else self.lift(e.op)
        return self.emit(Call(callee, args, e.attrs, type_args))

    def _lift_op_call(self, e: Call) -> Expr:
        """Compute the op on primals, give the result fresh gradient cells, push a backpropagator."""
        name = e.op.name
        lifted = [self.lift(a) for a in e.args]
        primals: list[Expr] = []
        for i, (a, orig) in enumerate(zip(lifted, e.args)):
            t = orig.checked_type
            if isinstance(t, TupleType):  # an op over a tuple of tensors (concatenate, stack)
                value: Expr = Tuple(tuple(TupleGetItem(TupleGetItem(a, j), 0) for j in range(len(t.fields))))
            else:
                value = TupleGetItem(a, 0)
            x = self.emit(value, f"x{i}_")
            x.set_checked_type(t)
            primals.append(x)
        fwd = Call(e.op, tuple(primals), e.attrs, e.type_args)
        out_t = e.checked_type
        fwd.set_checked_type(out_t)
        y = self.emit(fwd, "y")
        y.set_checked_type(out_t)
        if isinstance(out_t, TupleType):
            cells = [self.emit(RefCreate(op_call("zeros_like", TupleGetItem(y, j))), "r")
                     for j in range(len(out_t.fields))]
            result = self.emit(Tuple(tuple(Tuple((TupleGetItem(y, j), r)) for j, r in enumerate(cells))))
            out_grad: Expr = Tuple(tuple(RefRead(r) for r in cells))
        else:
            cell = self.emit(RefCreate(op_call("zeros_like", y)), "r")
            result = self.emit(Tuple((y, cell)))
            out_grad = RefRead(cell)
        wanted = [i for i, orig in enumerate(e.args) if is_float(orig.checked_type)]
        if not wanted or not is_float(out_t):
            return result  # nothing differentiable flows through this call
        rule = get_op(name).gradient
        if rule is None:
            raise GradientError(f"gradient: operator {name} has no gradient rule")
        g = Var("g")
        g.set_checked_type(out_t)
        grads = rule(fwd, g)
        if len(grads) != len(e.args):
            raise GradientError(f"gradient: the rule of {name} returned {len(grads)} gradients "
                                f"for {len(e.args)} arguments")
        body: list[tuple[Var, Expr]] = [(g, out_grad)]
        for i in wanted:
            gi = Var(f"g{i}_")
            body.append((gi, substitute(grads[i], {fwd: y})))
            body.extend(_accumulate(lifted[i], gi, e.args[i].checked_type))
        prev = self.emit(RefRead(self.bp), "prev")
        backprop = Function((), bind_lets(body, Call(prev, ())), UNIT)
        self.emit(RefWrite(self.bp, backprop), "push")
        return result


def _accumulate(lifted_arg: Expr, grad: Expr, t: Type) -> list[tuple[Var, Expr]]:
    """Statements adding `grad` into the gradient cell(s) of a lifted argument."""
    if isinstance(t, TupleType):
        out = []
        for j, ft in enumerate(t.fields):
            if is_float(ft):
                out.extend(_accumulate(TupleGetItem(lifted_arg, j), TupleGetItem(grad, j), ft))
        return out
    cell = TupleGetItem(lifted_arg, 1)
    return [(Var("_"), RefWrite(cell, op_call("add", RefRead(cell), grad)))]


def gradient_higher_order(mod: IRModule, fn: Function, entry: str) -> tuple[Function, dict[GlobalVar, Any]]:
    """The gradient wrapper of typed `fn` and the lifted globals it calls (see the module docstring)."""
    lifter = _Lifter(mod)
    params = tuple(Var(p.name_hint, p.type_annotation) for p in fn.params)
    lifter.scopes.append(_Scope())
    bp = lifter.bp = lifter.emit(RefCreate(Function((), Tuple(()), UNIT)), "bp")
    cells = []
    for old, new in zip(fn.params, params):
        pair = lifter.emit(Tuple((new, RefCreate(op_call("zeros_like", new)))), new.name_hint + "_")
        lifter.vars[old] = pair
        cells.append(pair)
    out = lifter.lift(fn.body)
    out_t = fn.body.checked_type
    if isinstance(out_t, TupleType):
        primal: Expr = Tuple(tuple(TupleGetItem(TupleGetItem(out, j), 0) for j in range(len(out_t.fields))))
        seeded = [TupleGetItem(out, j) for j in range(len(out_t.fields))]
    else:  # a tensor (`gradient` checks the type)
        primal = TupleGetItem(out, 0)
        seeded = [out]
    for field in seeded:  # added, not written: a value returned twice is seeded twice
        cell = TupleGetItem(field, 1)
        seed = op_call("add", RefRead(cell), op_call("ones_like", TupleGetItem(field, 0)))
        lifter.emit(RefWrite(cell, seed), "seed")
    lifter.emit(Call(RefRead(bp), ()), "backward")
    grads = Tuple(tuple(RefRead(TupleGetItem(c, 1)) for c in cells))
    body = bind_lets(lifter.scopes[-1].bindings, Tuple((primal, grads)))
    lifter.scopes.pop()
    grad_fn = Function(params, body, None, fn.type_params, fn.attrs)

    extra: dict[GlobalVar, Any] = {}
    while lifter.todo:
        gv = lifter.todo.pop()
        target = mod[gv]
        local_bp = Var("bp", BP_TYPE)
        lifter.bp = local_bp
        lifted = lifter.lift_function(target)
        extra[lifter.lifted_globals[gv]] = Function(
            (*lifted.params, local_bp), lifted.body, lifted.ret_type, target.type_params, target.attrs)
    return grad_fn, extra
