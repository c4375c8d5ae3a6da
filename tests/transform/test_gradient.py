"""First-order reverse-mode AD, checked against central finite differences of the interpreter."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import autorelay
from autorelay.ir import (
    Call,
    Function,
    IRModule,
    Let,
    RefCreate,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
    const,
    post_order,
)
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform.gradient import GradientError, gradient, is_dataflow
from autorelay.typing import infer_types


def numeric_grads(f: Callable[..., float], args: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of the scalar `f` with respect to every argument (float64)."""
    out = []
    for k, x in enumerate(args):
        g = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[k][i] += eps
            minus[k][i] -= eps
            g[i] = (f(*plus) - f(*minus)) / (2 * eps)
        out.append(g)
    return out


def check_against_fd(fn: Function, args: list[np.ndarray], mode: str = "auto", rtol: float = 1e-5) -> None:
    grad_fn = gradient(fn, mode=mode)
    typed = infer_types(IRModule.from_expr(grad_fn))["main"]  # the gradient program type-checks
    assert typed.checked_type.ret_type.fields[1] == TupleType(tuple(p.checked_type for p in fn.params))
    value, grads = evaluate(grad_fn, *args)
    np.testing.assert_allclose(value, evaluate(fn, *args), rtol=1e-12)
    expected = numeric_grads(lambda *a: float(np.sum(evaluate(fn, *a))), args)
    assert len(grads) == len(args)
    for i, (got, want) in enumerate(zip(grads, expected)):
        assert got.shape == want.shape and got.dtype == args[i].dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-7, err_msg=f"gradient of argument {i}")


def f64(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * scale


def t64(*shape: int) -> TensorType:
    return TensorType(shape, "float64")


def test_elementwise_and_broadcasting_chain() -> None:
    x, y = Var("x", t64(3, 4)), Var("y", t64(4))
    t = call("multiply", x, y)
    e = call("add", call("tanh", t), call("exp", call("multiply", t, x)))
    e = call("divide", call("sigmoid", e), call("add", call("abs", y), const(1.0, "float64")))
    one = const(1.0, "float64")
    e = call("subtract", call("log", call("add", call("power", e, const(2.0, "float64")), one)),
             call("sqrt", call("add", call("multiply", y, y), const(0.5, "float64"))))
    check_against_fd(Function((x, y), e), [f64(3, 4), f64(4, seed=1)])


def test_network_of_many_ops() -> None:
    """conv -> bias -> relu -> pools -> slice -> dense -> split/concat -> softmax/reductions: 20+ ops."""
    data, w = Var("data", t64(2, 1, 6, 6)), Var("w", t64(3, 1, 3, 3))
    b, d = Var("b", t64(3)), Var("d", t64(5, 12))
    h = call("nn.conv2d", data, w, padding=(1, 1), channels=3, kernel_size=(3, 3))
    h = call("nn.relu", call("nn.bias_add", h, b))
    h = call("nn.max_pool2d", h, pool_size=(2, 2), strides=(2, 2))
    h = call("nn.avg_pool2d", h, pool_size=(2, 2), strides=(1, 1), padding=(1, 1))
    h = call("nn.batch_flatten", call("strided_slice", h, begin=(0, 0, 0, 0), end=(2, 3, 2, 2)))
    h = call("tanh", call("nn.dense", h, d))
    parts = call("split", h, indices_or_sections=(2,), axis=1)
    left, right = TupleGetItem(parts, 0), TupleGetItem(parts, 1)
    s = call("concatenate", Tuple((call("transpose", left), call("transpose", right))), axis=0)
    loss = call("add", call("mean", call("multiply", s, s)), call("sum", call("sin", right), axis=(1,)))
    entropy = call("sum", call("multiply", call("nn.softmax", h), call("nn.log_softmax", h)), axis=(1,))
    loss = call("subtract", loss, call("sigmoid", entropy))
    fn = Function((data, w, b, d), loss)
    assert sum(isinstance(n, Call) for n in post_order(fn.body)) >= 20
    check_against_fd(fn, [f64(2, 1, 6, 6), f64(3, 1, 3, 3, seed=1), f64(3, seed=2),
                          f64(5, 12, seed=3, scale=0.3)], rtol=1e-4)


def test_shared_nodes_lets_and_unused_parameters() -> None:
    x, unused = Var("x", t64(2, 2)), Var("unused", t64(3))
    shared = call("exp", x)  # used three times, without a let
    z = Var("z")
    body = Let(z, call("multiply", shared, shared), call("add", z, call("negative", shared)))
    fn = Function((x, unused), body)
    check_against_fd(fn, [f64(2, 2), f64(3, seed=1)])
    _, (_, g_unused) = evaluate(gradient(fn), f64(2, 2), f64(3))
    np.testing.assert_array_equal(g_unused, np.zeros(3))


def test_tuple_valued_op_with_one_field_used_and_non_float_paths() -> None:
    x = Var("x", t64(4, 3))
    parts = call("split", x, indices_or_sections=2, axis=0)
    first = TupleGetItem(parts, 0)
    # An integer-valued path (argmax) feeds `take` but carries no gradient.
    idx = call("argmax", x, axis=(1,))
    picked = call("take", call("reshape", x, newshape=(-1,)), idx)
    fn = Function((x,), call("add", call("sum", call("tanh", first)), call("sum", picked)))
    check_against_fd(fn, [f64(4, 3)])


def test_output_is_let_bound_dataflow_without_closures() -> None:
    x = Var("x", t64(3))
    g = gradient(Function((x,), call("multiply", call("exp", x), x)))
    kinds = {type(n) for n in post_order(g.body)}
    assert Function not in kinds and RefCreate not in kinds
    assert is_dataflow(g)
    _, (gx,) = evaluate(g, np.array([0.0, 1.0, 2.0]))
    xs = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(gx, np.exp(xs) * (1 + xs))


def test_module_input_and_lazy_export() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %w: Tensor[(3), float32]) {
  sum(multiply(%x, %w))
}
""")
    out = autorelay.gradient(mod)
    assert isinstance(out, IRModule)
    x, w = np.array([1, 2, 3], "float32"), np.array([4, 5, 6], "float32")
    value, (gx, gw) = evaluate(out, x, w)
    assert float(value) == 32.0
    np.testing.assert_allclose(gx, w)
    np.testing.assert_allclose(gw, x)


def test_tuple_output_seeds_every_field() -> None:
    x = Var("x", t64(2))
    fn = Function((x,), Tuple((call("exp", x), call("multiply", x, x))))
    _, (gx,) = evaluate(gradient(fn), np.array([0.5, -1.0]))
    xs = np.array([0.5, -1.0])
    np.testing.assert_allclose(gx, np.exp(xs) + 2 * xs)


def test_errors() -> None:
    x = Var("x", t64(2))
    with pytest.raises(GradientError, match="only tensor parameters"):
        gradient(Function((Var("t", autorelay.ir.TupleType((t64(2),))),), const(1.0)))
    branchy = Function((x,), autorelay.ir.If(const(True), x, x))
    with pytest.raises(GradientError, match="first_order mode handles dataflow programs only"):
        gradient(branchy, mode="first_order")
    with pytest.raises(ValueError, match="mode must be"):
        gradient(Function((x,), x), mode="fast")
    logical = Function((x,), call("cast", call("logical_not", call("less", x, const(0.0, "float64"))),
                                  dtype="float64"))
    check_against_fd(logical, [np.array([0.3, -0.2])])  # no float path through the bool ops: zero gradient
