"""Automatic differentiation: `gradient(f)` builds, in the IR, a function computing `(f(x), (df/dx1, ...))`.

Two strategies, chosen by `mode`:

* **first order** (`gradient_fo`, here): for dataflow programs — op calls, tuples, projections and
  lets, the common case of a network's forward pass. The forward computation is let-bound node by
  node, then the adjoints are accumulated in reverse topological order with each op's
  `OpDef.gradient` rule. The result is plain dataflow code: no closure per node, nothing that
  a later pass could not fuse.
* **higher order** (`autorelay.transform.gradient_ho`): for everything else — `if`, `match`,
  closures, recursion through globals, ADTs. As in the Relay paper, every tensor is paired with a
  reference cell holding its gradient, and every op call pushes a backpropagator closure onto a
  chain held in a reference; running the chain after the forward pass fills the cells.

`mode="auto"` picks first order when the function body is dataflow and higher order otherwise.
In both, the output cotangent is `ones_like(output)` (as Relay does), so a non-scalar output is
differentiated as the sum of its elements.
"""

from __future__ import annotations

from typing import Any

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
    flatten_lets,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op.registry import call as op_call
from autorelay.op.registry import get as get_op
from autorelay.utils.deep import deep

__all__ = ["GradientError", "gradient", "gradient_first_order", "is_dataflow"]

FLOAT_DTYPES = ("float16", "float32", "float64")


class GradientError(TypeCheckError):
    """A program that cannot be differentiated (a missing gradient rule, a non-tensor parameter …)."""


@deep
def gradient(fn_or_mod: Function | IRModule, entry: str = "main", mode: str = "auto") -> Function | IRModule:
    """The gradient program of a function of tensor parameters.

    Given a `Function`, returns a `Function` with the same parameters whose body evaluates to
    `(value, (grad_x1, ..., grad_xn))`. Given an `IRModule`, differentiates `@entry` and returns a
    module in which `@entry` is replaced by its gradient (plus any helper globals the
    higher-order form needs); the other globals are kept.
    """
    if mode not in ("auto", "first_order", "higher_order"):
        raise ValueError(f"gradient: mode must be 'auto', 'first_order' or 'higher_order', not {mode!r}")
    mod, fn = typed_entry(fn_or_mod, entry)
    for p in fn.params:
        if not isinstance(p.checked_type, TensorType):
            raise GradientError(
                f"gradient: parameter %{p.name_hint} of @{entry} has type {p.checked_type}; "
                "only tensor parameters can be differentiated")
    out_t = fn.body.checked_type
    fields = out_t.fields if isinstance(out_t, TupleType) else (out_t,)
    if not all(isinstance(t, TensorType) for t in fields):
        raise GradientError(f"gradient: @{entry} returns {out_t}; it must return a tensor or a tuple of "
                            "tensors (each seeded with ones_like)")
    if mode == "auto":
        mode = "first_order" if is_dataflow(fn) else "higher_order"
    if mode == "first_order":
        if not is_dataflow(fn):
            raise GradientError(
                "gradient: first_order mode handles dataflow programs only (op calls, tuples, lets); "
                "use mode='higher_order' for control flow, closures or calls")
        grad_fn = gradient_first_order(fn)
        extra: dict = {}
    else:
        from autorelay.transform.gradient_ho import gradient_higher_order

        grad_fn, extra = gradient_higher_order(mod, fn, entry)
    if isinstance(fn_or_mod, Function):
        if extra:
            raise GradientError("gradient: a lone Function cannot call globals; pass the module")
        return grad_fn
    return fn_or_mod.with_functions(extra).with_function(entry, grad_fn)


def typed_entry(fn_or_mod: Function | IRModule, entry: str) -> tuple[IRModule, Function]:
    """Run type inference so gradient rules can read argument types; return the typed entry."""
    from autorelay.typing import infer_types

    if isinstance(fn_or_mod, Function):
        mod = IRModule.from_expr(fn_or_mod, entry)
    elif isinstance(fn_or_mod, IRModule):
        mod = fn_or_mod
    else:
        raise TypeError(f"gradient expects a Function or an IRModule, got {type(fn_or_mod).__name__}")
    if entry not in mod:
        raise GradientError(f"gradient: no global function @{entry} in the module")
    mod = infer_types(mod)
    return mod, mod[entry]


def is_dataflow(fn: Function) -> bool:
    """Only op calls, tuples, projections, lets, variables and constants (no control flow)."""
    for node in post_order(fn.body):
        if isinstance(node, Var | Constant | Op | Tuple | TupleGetItem | Let):
            continue
        if isinstance(node, Call) and isinstance(node.op, Op):
            continue
        return False
    return True


def is_float(t: Type) -> bool:
    if isinstance(t, TensorType):
        return t.dtype in FLOAT_DTYPES
    if isinstance(t, TupleType):
        return any(is_float(f) for f in t.fields)
    return False


def typed(expr: Expr, t: Type) -> Expr:
    if not expr.has_checked_type:
        expr.set_checked_type(t)
    return expr


def substitute(expr: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """`expr` with the given nodes (by identity) replaced."""
    m = ExprMutator()
    for old, new in mapping.items():
        m.memo[id(old)] = (old, new)
    return m.visit(expr)


# ---- first-order reverse mode ---------------------------------------------------------------


class _Forward:
    """Linearises a dataflow body: every computed node gets a let-bound variable (its 'atom')."""

    def __init__(self) -> None:
        self.atoms: dict[int, Expr] = {}  # id(original node) -> Var or Constant in the new program
        self.keep: list[Expr] = []  # original nodes, so their ids stay unique
        self.bindings: list[tuple[Var, Expr]] = []  # (new var, node rebuilt over atoms)
        self.count = 0

    def atom_of(self, node: Expr) -> Expr:
        return self.atoms[id(node)]

    def lower(self, expr: Expr) -> Expr:
        lets, result = flatten_lets(expr)
        for var, value in lets:
            self.set_atom(var, self.lower_value(value))
        return self.lower_value(result)

    def set_atom(self, node: Expr, atom: Expr) -> None:
        self.atoms[id(node)] = atom
        self.keep.append(node)

    def lower_value(self, expr: Expr) -> Expr:
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in self.atoms:
                continue
            if isinstance(node, Constant):
                self.set_atom(node, typed(node, node.type))
                continue
            if isinstance(node, Var):
                raise GradientError(f"gradient: unbound variable %{node.name_hint}")
            if isinstance(node, Let):
                self.set_atom(node, self.lower(node))
                continue
            kids = _operands(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(kids) if id(k) not in self.atoms)
                continue
            new = _rebuild(node, [self.atom_of(k) for k in kids])
            new.set_checked_type(node.checked_type)
            var = Var(f"v{self.count}")
            self.count += 1
            var.set_checked_type(node.checked_type)
            self.bindings.append((var, new))
            self.set_atom(node, var)
        return self.atom_of(expr)


def _operands(node: Expr) -> list[Expr]:
    if isinstance(node, Call):
        return list(node.args)
    if isinstance(node, Tuple):
        return list(node.fields)
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    raise GradientError(f"gradient: first-order mode cannot differentiate {type(node).__name__}")


def _rebuild(node: Expr, kids: list[Expr]) -> Expr:
    if isinstance(node, Call):
        return Call(node.op, tuple(kids), node.attrs, node.type_args)
    if isinstance(node, Tuple):
        return Tuple(tuple(kids))
    assert isinstance(node, TupleGetItem)
    return TupleGetItem(kids[0], node.index)


class _Adjoints:
    """Gradient contributions per variable; tuple-typed variables keep one list per field."""

    def __init__(self) -> None:
        self.parts: dict[Var, Any] = {}

    def add(self, var: Expr, grad: Expr, field: int | None = None) -> None:
        if not isinstance(var, Var):
            return  # a constant: nothing to accumulate
        if field is None:
            self.parts.setdefault(var, []).append(grad)
        else:
            fields = self.parts.setdefault(var, {})
            fields.setdefault(field, []).append(grad)

    def total(self, var: Var) -> Expr | None:
        """The summed gradient of `var`, or None when nothing flows into it."""
        parts = self.parts.get(var)
        if parts is None:
            return None
        if isinstance(parts, dict):
            t = var.checked_type
            fields = []
            for i, ft in enumerate(t.fields):
                if i in parts:
                    fields.append(sum_exprs(parts[i]))
                else:
                    fields.append(typed(op_call("zeros_like", typed(TupleGetItem(var, i), ft)), ft))
            return Tuple(tuple(fields))
        return sum_exprs(parts)


def sum_exprs(parts: list[Expr]) -> Expr:
    total = parts[0]
    for p in parts[1:]:
        total = op_call("add", total, p)
    return total


def gradient_first_order(fn: Function) -> Function:
    """Reverse-mode AD of a typed dataflow function (see the module docstring)."""
    new_params = []
    fwd = _Forward()
    needs: set[Var] = set()
    for p in fn.params:
        q = Var(p.name_hint, p.type_annotation)
        q.set_checked_type(p.checked_type)
        new_params.append(q)
        fwd.set_atom(p, q)
        if is_float(p.checked_type):
            needs.add(q)
    out = fwd.lower(fn.body)
    # Which variables depend on a parameter through float values: only those get adjoints.
    for var, node in fwd.bindings:
        if is_float(var.checked_type) and any(a in needs for a in _operands(node) if isinstance(a, Var)):
            needs.add(var)

    adj = _Adjoints()
    out_t = out.checked_type
    if isinstance(out_t, TupleType):
        for i, ft in enumerate(out_t.fields):
            if isinstance(ft, TensorType):
                adj.add(out, op_call("ones_like", typed(TupleGetItem(out, i), ft)), field=i)
    else:
        adj.add(out, op_call("ones_like", out))
    body_lets: list[tuple[Var, Expr]] = list(fwd.bindings)
    for var, node in reversed(fwd.bindings):
        if var not in needs:
            continue
        g_expr = adj.total(var)
        if g_expr is None:
            continue
        g = Var(f"g_{var.name_hint}")
        g.set_checked_type(var.checked_type)
        body_lets.append((g, g_expr))
        _backprop(node, var, g, adj, needs)
    grads = []
    for q in new_params:
        total = adj.total(q) if q in needs else None
        grads.append(total if total is not None else op_call("zeros_like", q))
    result = Tuple((out, Tuple(tuple(grads))))
    body: Expr = result
    for var, value in reversed(body_lets):
        body = Let(var, value, body)
    return Function(tuple(new_params), body, None, fn.type_params, fn.attrs)


def _backprop(node: Expr, var: Var, g: Var, adj: _Adjoints, needs: set[Var]) -> None:
    """Push the gradient `g` of `var = node` to node's operands."""
    if isinstance(node, TupleGetItem):
        src = node.tuple_value
        if src in needs:
            adj.add(src, g, field=node.index)
        return
    if isinstance(node, Tuple):
        for i, f in enumerate(node.fields):
            if f in needs:
                adj.add(f, typed(TupleGetItem(g, i), f.checked_type))
        return
    assert isinstance(node, Call) and isinstance(node.op, Op)
    opdef = get_op(node.op.name)
    if opdef.gradient is None:
        raise GradientError(f"gradient: operator {node.op.name} has no gradient rule "
                            f"(needed for %{var.name_hint})")
    grads = opdef.gradient(node, g)
    if len(grads) != len(node.args):
        raise GradientError(f"gradient: the rule of {node.op.name} returned {len(grads)} gradients "
                            f"for {len(node.args)} arguments")
    for a, ga in zip(node.args, grads):
        if a in needs:
            adj.add(a, substitute(ga, {node: var}))
