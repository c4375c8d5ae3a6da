"""Higher-order AD (references + backpropagator closures) on programs with control flow.

Every gradient is compared with central finite differences of the original program run by the
interpreter, in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import autorelay
from autorelay.ir import (
    Function,
    IRModule,
    RefCreate,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
    post_order,
)
from autorelay.op.registry import call
from autorelay.runtime.interpreter import Interpreter, evaluate
from autorelay.transform.gradient import GradientError, gradient
from autorelay.typing import infer_types

HEADER = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil, }
"""


def numeric_grads(f: Callable[..., float], args: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray]:
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


def check_module(mod: IRModule, args: list[np.ndarray], mode: str = "auto") -> IRModule:
    grad_mod = gradient(mod, mode=mode)
    # The gradient program is itself well typed: (value, (grad per parameter)).
    typed = infer_types(grad_mod)
    ptypes = [p.checked_type for p in mod["main"].params]
    assert typed["main"].checked_type.ret_type == TupleType((typed["main"].body.checked_type.fields[0],
                                                             TupleType(tuple(ptypes))))
    value, grads = evaluate(grad_mod, *args)
    original = Interpreter(mod)
    np.testing.assert_allclose(value, original.call("main", *args), rtol=1e-12)
    expected = numeric_grads(lambda *a: float(np.sum(original.call("main", *a))), args)
    assert len(grads) == len(args)
    for i, (got, want) in enumerate(zip(grads, expected)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8, err_msg=f"gradient of argument {i}")
    return grad_mod


def f64(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def test_if_takes_the_gradient_of_the_branch_that_ran() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float64], %y: Tensor[(3), float64]) {
  if (greater(sum(%x), 0f64)) { multiply(tanh(%x), %y) } else { exp(multiply(%x, %y)) }
}
""")
    grad_mod = check_module(mod, [np.array([0.5, 1.0, -0.2]), f64(3, seed=1)])
    assert any(isinstance(n, RefCreate) for n in post_order(grad_mod["main"].body))  # higher order chosen
    check_module(mod, [np.array([-0.5, -1.0, 0.2]), f64(3, seed=1)])


def test_recursive_loop_over_a_list_of_tensors() -> None:
    mod = autorelay.parse(HEADER + """
def @sum_sq(%l: List[Tensor[(2), float64]], %w: Tensor[(2), float64]) -> Tensor[(2), float64] {
  match (%l) {
    Cons(%h, %t) => add(multiply(tanh(multiply(%h, %w)), %h), @sum_sq(%t, %w)),
    Nil => zeros(shape=[2], dtype="float64"),
  }
}
def @main(%a: Tensor[(2), float64], %b: Tensor[(2), float64], %w: Tensor[(2), float64]) {
  let %l = Cons(%a, Cons(%b, Cons(multiply(%a, %b), Nil)));
  @sum_sq(%l, %w)
}
""")
    grad_mod = check_module(mod, [f64(2), f64(2, seed=1), f64(2, seed=2)])
    assert "sum_sq__ad" in {g.name_hint for g in grad_mod.functions}


def test_let_bound_closure_used_twice_and_a_recursive_let_loop() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float64], %w: Tensor[(2, 2), float64]) {
  let %layer = fn (%h: Tensor[(2, 2), float64]) { tanh(nn.dense(%h, %w)) };
  let %loop = fn (%i: Tensor[(), int32], %h: Tensor[(2, 2), float64]) -> Tensor[(2, 2), float64] {
    if (less(%i, 5)) { %loop(add(%i, 1), %layer(%h)) } else { %h }
  };
  add(%layer(%layer(%x)), %loop(0, %x))
}
""")
    check_module(mod, [f64(2, 2), f64(2, 2, seed=1) * 0.7])


def test_references_in_the_program() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float64]) {
  let %acc = ref(%x);
  let %_ = ref_write(%acc, multiply(ref_read(%acc), sin(%x)));
  let %_2 = ref_write(%acc, add(ref_read(%acc), %x));
  ref_read(%acc)
}
""")
    check_module(mod, [f64(3)], mode="higher_order")


def test_higher_order_global_and_closure_argument() -> None:
    mod = autorelay.parse(HEADER + """
def @map[A, B](%f: fn (A) -> B, %l: List[A]) -> List[B] {
  match (%l) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil,
  }
}
def @total(%l: List[Tensor[(), float64]]) -> Tensor[(), float64] {
  match (%l) {
    Cons(%h, %t) => add(%h, @total(%t)),
    Nil => 0f64,
  }
}
def @square(%v: Tensor[(), float64]) -> Tensor[(), float64] { multiply(%v, %v) }
def @main(%x: Tensor[(), float64], %y: Tensor[(), float64]) {
  let %l = Cons(%x, Cons(%y, Nil));
  add(@total(@map(@square, %l)), @total(@map(fn (%v: Tensor[(), float64]) { multiply(%v, %x) }, %l)))
}
""")
    check_module(mod, [np.array(0.7), np.array(-1.3)])


def test_modes_agree_on_dataflow_with_tuple_ops() -> None:
    x, y = Var("x", TensorType((2, 3), "float64")), Var("y", TensorType((3,), "float64"))
    parts = call("split", call("sigmoid", call("add", x, y)), indices_or_sections=(1,), axis=1)
    joined = call("concatenate", Tuple((TupleGetItem(parts, 1), call("exp", TupleGetItem(parts, 0)))), axis=1)
    fn = Function((x, y), call("sum", call("multiply", joined, x), axis=(0,)))
    args = [f64(2, 3), f64(3, seed=1)]
    v1, g1 = evaluate(gradient(fn, mode="first_order"), *args)
    v2, g2 = evaluate(gradient(fn, mode="higher_order"), *args)
    np.testing.assert_allclose(v1, v2)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_long_recursion_does_not_overflow() -> None:
    """2,000 loop steps: the backpropagator chain is 4,000 closures deep, called in one go."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(), float64]) {
  let %loop = fn (%i: Tensor[(), int32], %h: Tensor[(), float64]) -> Tensor[(), float64] {
    if (less(%i, 2000)) { %loop(add(%i, 1), multiply(%h, 1.0001f64)) } else { %h }
  };
  %loop(0, %x)
}
""")
    value, (gx,) = evaluate(gradient(mod), np.array(2.0))
    assert float(value) == pytest.approx(2.0 * 1.0001**2000)
    assert float(gx) == pytest.approx(1.0001**2000)


HO_PROGRAMS = {
    "branch": ("def @main(%x: Tensor[(3), float64]) { if (greater(sum(%x), 0f64)) { multiply(%x, %x) } "
               "else { sin(%x) } }", 1),
    "closure_twice": ("def @main(%x: Tensor[(3), float64], %y: Tensor[(3), float64]) { let %f = fn (%z: "
                      "Tensor[(3), float64]) { multiply(%z, %y) }; %f(%f(%x)) }", 2),
    "recursion": ("def @pow(%n: int32, %x: Tensor[(3), float64]) -> Tensor[(3), float64] { "
                  "if (equal(%n, 0)) { ones(shape=[3], dtype=\"float64\") } "
                  "else { multiply(%x, @pow(subtract(%n, 1), %x)) } }\n"
                  "def @main(%x: Tensor[(3), float64]) { @pow(4, %x) }", 1),
}


@pytest.mark.parametrize("name", sorted(HO_PROGRAMS))
def test_higher_order_gradients_built_for_the_vm_match_the_interpreter(name) -> None:
    """Higher-order gradients keep their backpropagators in references: the default pipeline built
    them with every gradient zero (reads moved past the writes) and a recursive one failed to
    build (a folded scalar came out with rank 1)."""
    text, arity = HO_PROGRAMS[name]
    grad = gradient(infer_types(autorelay.parse('#[version = "0.0.5"]\n' + text)))
    args = [np.array([0.5, 1.0, 2.0]), np.array([1.5, -1.0, 3.0])][:arity]
    value, grads = evaluate(grad, *args)
    got_value, got_grads = autorelay.build(grad, executor="vm")(*args)
    np.testing.assert_allclose(got_value, value, rtol=1e-12)
    for g, w in zip(got_grads, grads):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert any(np.abs(w).sum() > 0 for w in grads)


@pytest.mark.parametrize("mode", ["first_order", "higher_order"])
@pytest.mark.parametrize("body, factor", [("(%x, %x)", lambda x: 2 * np.ones_like(x)),
                                          ("let %y = exp(%x); (%y, %x, %y)", lambda x: 2 * np.exp(x) + 1)])
def test_a_value_returned_twice_is_seeded_twice(mode, body, factor):
    """Each output field's cotangent is ones: a value in two fields gets both (the higher-order
    form used to overwrite its cell with the second seed)."""
    src = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float64]) {{ {body} }}'
    mod = infer_types(autorelay.parse(src))
    x = np.array([0.5, -1.0, 2.0])
    grad_mod = gradient(mod, mode=mode)
    np.testing.assert_allclose(evaluate(grad_mod, x)[1][0], factor(x))
    np.testing.assert_allclose(autorelay.build(grad_mod, executor="vm")(x)[1][0], factor(x))


@pytest.mark.parametrize("mode", ["first_order", "higher_order"])
def test_a_nested_tuple_output_is_refused_clearly(mode):
    mod = infer_types(autorelay.parse('#[version = "0.0.5"]\n'
                                      'def @main(%x: Tensor[(3), float64]) { ((%x, %x), %x) }'))
    with pytest.raises(GradientError, match="must return a tensor or a tuple of tensors"):
        gradient(mod, mode=mode)
