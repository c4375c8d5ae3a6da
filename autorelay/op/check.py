"""Checking one operator in isolation: evaluate small dataflow graphs with the NumPy references and
compare an op's gradient rule against central finite differences.

This needs nothing but the registry, so every op family can be verified on its own — the same
oracle that the interpreter and every backend are later tested against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem, Var
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import post_order
from autorelay.op.registry import get


def value_type(value: Any) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(value_type(v) for v in value))
    arr = np.asarray(value)
    return TensorType(tuple(int(d) for d in arr.shape), str(arr.dtype))


def run_op(name: str, *args: np.ndarray, **attrs: Any) -> Any:
    """Run one op's reference on arrays, with attributes validated and defaulted like the IR does."""
    opdef = get(name)
    if opdef.reference is None:
        raise NotImplementedError(f"{name} has no reference implementation")
    return opdef.reference(opdef.make_attrs(attrs), *args)


def infer_op_type(name: str, arg_types: Sequence[Type], **attrs: Any) -> Type:
    """The result type of one op call from its argument types (no solver, just the relation)."""
    opdef = get(name)
    out = opdef.type_rel(list(arg_types), opdef.make_attrs(attrs))
    return out[1] if isinstance(out, tuple) else out


def eval_dataflow(expr: Expr, env: Mapping[Var, Any]) -> Any:
    """Evaluate a graph of op calls, tuples and projections over bound vars and constants.

    Each node's `checked_type` is set from its value, so gradient rules that read argument types
    work here as they do after type inference.
    """
    values: dict[int, Any] = {}
    for node in post_order(expr):
        if isinstance(node, Var):
            if node not in env:
                raise KeyError(f"unbound variable %{node.name_hint}")
            v = env[node]
        elif isinstance(node, Constant):
            v = node.data
        elif isinstance(node, Op):
            continue
        elif isinstance(node, Tuple):
            v = tuple(values[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            v = values[id(node.tuple_value)][node.index]
        elif isinstance(node, Call) and isinstance(node.op, Op):
            opdef = get(node.op.name)
            v = opdef.reference(node.attrs, *(values[id(a)] for a in node.args))
        else:
            raise TypeError(f"eval_dataflow handles op graphs only, not {type(node).__name__}")
        if not node.has_checked_type:
            node.set_checked_type(value_type(v))
        values[id(node)] = v
    return values[id(expr)]


def numerical_gradient(f, args: list[np.ndarray], index: int, eps: float) -> np.ndarray:
    """Central differences of the scalar function `f(*args)` with respect to `args[index]`."""
    x = args[index].astype(np.float64)
    grad = np.zeros_like(x)
    flat = grad.reshape(-1)
    for i in range(x.size):
        plus, minus = x.copy(), x.copy()
        plus.reshape(-1)[i] += eps
        minus.reshape(-1)[i] -= eps
        a_plus = list(args)
        a_minus = list(args)
        a_plus[index] = plus
        a_minus[index] = minus
        flat[i] = (f(*a_plus) - f(*a_minus)) / (2 * eps)
    return grad


def check_gradient(
    name: str,
    inputs: Sequence[np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    wrt: Sequence[int] | None = None,
    eps: float = 1e-3,
    rtol: float = 1e-2,
    atol: float = 1e-3,
    seed: int = 0,
) -> None:
    """Assert that `name`'s gradient rule matches finite differences of its reference.

    The scalar objective is `sum(out * w)` for a fixed random cotangent `w` (summed over tuple
    fields), so every output element contributes with a distinct weight. Inputs are evaluated in
    float64 for the numerical side to keep rounding out of the comparison.
    """
    attrs = dict(attrs or {})
    opdef = get(name)
    if opdef.gradient is None:
        raise AssertionError(f"{name} has no gradient rule")
    rng = np.random.default_rng(seed)
    inputs = [np.asarray(x) for x in inputs]
    wrt = list(range(len(inputs))) if wrt is None else list(wrt)

    out = run_op(name, *inputs, **attrs)
    outs = out if isinstance(out, tuple) else (out,)
    cotangents = [rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype) for o in outs]

    def objective(*xs: np.ndarray) -> float:
        casted = [x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x for x in xs]
        res = run_op(name, *casted, **attrs)
        res = res if isinstance(res, tuple) else (res,)
        return float(sum(np.sum(np.asarray(r, np.float64) * w) for r, w in zip(res, cotangents)))

    params = [Var(f"x{i}", value_type(x)) for i, x in enumerate(inputs)]
    call = Call(Op(name), tuple(params), opdef.make_attrs(attrs))
    grad_var = Var("out_grad")
    env: dict[Var, Any] = dict(zip(params, inputs))
    env[grad_var] = tuple(cotangents) if isinstance(out, tuple) else cotangents[0]
    for p, x in zip(params, inputs):
        p.set_checked_type(value_type(x))
    call.set_checked_type(value_type(out))
    grad_var.set_checked_type(value_type(env[grad_var]))
    grads = opdef.gradient(call, grad_var)
    if len(grads) != len(inputs):
        raise AssertionError(f"{name}: gradient rule returned {len(grads)} grads for {len(inputs)} args")
    for i in wrt:
        analytic = np.asarray(eval_dataflow(grads[i], env))
        numeric = numerical_gradient(objective, inputs, i, eps)
        if analytic.shape != numeric.shape:
            raise AssertionError(
                f"{name}: gradient of argument {i} has shape {analytic.shape}, expected {numeric.shape}"
            )
        np.testing.assert_allclose(
            analytic, numeric, rtol=rtol, atol=atol, err_msg=f"{name}: gradient of argument {i}"
        )
