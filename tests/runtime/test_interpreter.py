"""The reference interpreter on every language construct, checked against NumPy / Python oracles."""

from __future__ import annotations

import time

import numpy as np
import pytest
from runtime_programs import LIST, PATTERNS, f32

import autorelay
from autorelay.errors import InterpreterError
from autorelay.ir import (
    Call,
    Constant,
    Function,
    IRModule,
    Let,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    bind_lets,
    const,
)
from autorelay.op.registry import call
from autorelay.runtime.interpreter import Interpreter, evaluate
from autorelay.runtime.values import Closure, ConstructorValue, RefValue, from_list, to_list


def test_dataflow_matches_numpy() -> None:
    x = Var("x", TensorType((3, 4), "float32"))
    y = Var("y", TensorType((4,), "float32"))
    body = call("tanh", call("add", call("multiply", x, y), call("exp", y)))
    a, b = f32(3, 4), f32(4, seed=1)
    out = evaluate(Function((x, y), body), a, b)
    np.testing.assert_allclose(out, np.tanh(a * b + np.exp(b)), rtol=1e-6)
    assert out.dtype == np.float32


def test_graph_form_sharing_is_evaluated_once() -> None:
    # add(e, e) nested 80 times: 2**80 evaluations without per-activation memoisation.
    x = Var("x", TensorType((), "float32"))
    e = x
    for _ in range(80):
        e = call("add", e, e)
    out = evaluate(Function((x,), e), np.float32(1.0))
    assert float(out) == pytest.approx(2.0**80, rel=1e-6)


def test_let_tuple_projection_and_plain_expressions() -> None:
    a = Var("a")
    t = Var("t")
    body = Let(a, const(2.0), Let(t, Tuple((a, call("multiply", a, const(3.0)))), TupleGetItem(t, 1)))
    assert float(evaluate(body)) == 6.0
    tup = evaluate(Tuple((const(1), Tuple((const(2.5),)))))
    assert isinstance(tup, tuple) and int(tup[0]) == 1 and float(tup[1][0]) == 2.5


def test_if_picks_a_branch_and_rejects_non_bool_conditions() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(), float32]) {
  if (less(%x, 0f)) { negative(%x) } else { %x }
}
def @bad(%x: Tensor[(), float32]) { if (%x) { 1 } else { 2 } }
""")
    assert float(evaluate(mod, np.float32(-3.0))) == 3.0
    assert float(evaluate(mod, np.float32(2.0))) == 2.0
    with pytest.raises(InterpreterError, match=r"if: the condition must be a boolean scalar"):
        Interpreter(mod).call("bad", np.float32(1.0))


def test_closures_capture_variables_and_can_be_called_from_python() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @adder(%k: Tensor[(2), float32]) {
  let %scale = multiply(%k, 2f);
  fn (%v: Tensor[(2), float32]) { add(%v, %scale) }
}
""")
    interp = Interpreter(mod)
    k = np.array([1.0, 2.0], "float32")
    clo = interp.call("adder", k)
    assert isinstance(clo, Closure)
    assert [v.name_hint for v in clo.env] == ["scale"]  # only the free variable is captured
    np.testing.assert_allclose(interp.apply(clo, np.array([10.0, 20.0], "float32")), [12.0, 24.0])


def test_recursion_through_globals_on_a_10000_element_list() -> None:
    mod = autorelay.parse(LIST)
    items = [np.float32(i) for i in range(10_000)]
    lst = from_list(mod, items)
    t0 = time.perf_counter()
    n = Interpreter(mod).call("length", lst)
    assert int(n) == 10_000 and n.dtype == np.int32
    assert time.perf_counter() - t0 < 10.0


def test_higher_order_global_with_a_closure_and_list_conversion() -> None:
    mod = autorelay.parse(LIST + """
def @main(%l: List[Tensor[(), float32]], %c: Tensor[(), float32]) {
  @map(fn (%x: Tensor[(), float32]) { multiply(%x, %c) }, %l)
}
""")
    vals = [np.array(v, "float32") for v in (1.0, 2.0, 3.0)]
    out = evaluate(mod, from_list(mod, vals), np.float32(10.0))
    assert isinstance(out, ConstructorValue) and out.constructor.name == "Cons"
    assert [float(v) for v in to_list(out)] == [10.0, 20.0, 30.0]
    assert repr(from_list(mod, vals[:2])) == "Cons(1.0, Cons(2.0, Nil))"
    assert to_list(from_list(mod, [])) == []


def test_nested_and_tuple_patterns() -> None:
    mod = autorelay.parse(PATTERNS)
    interp = Interpreter(mod)
    ints = [np.array(v, "int32") for v in (5, 7, 9)]
    assert int(interp.call("first_two", from_list(mod, ints))) == 12
    assert int(interp.call("first_two", from_list(mod, ints[:1]))) == 5
    assert int(interp.call("first_two", from_list(mod, []))) == -1
    swapped = interp.call("swap", (ints[0], ints[1]))
    assert (int(swapped[0]), int(swapped[1])) == (7, 5)


def test_incomplete_match_failure_names_the_construct_and_location() -> None:
    mod = autorelay.parse(LIST + """
def @head(%l: List[Tensor[(), float32]]) -> Tensor[(), float32] {
  match? (%l) {
    Cons(%h, _) => %h,
  }
}
""")
    assert float(evaluate(mod, from_list(mod, [np.float32(4.0)]), entry="head")) == 4.0
    with pytest.raises(InterpreterError, match=r":\d+:\d+: match\?: no clause matches the value Nil"):
        evaluate(mod, from_list(mod, []), entry="head")


def test_references() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(), float32]) {
  let %r = ref(%x);
  let %_ = ref_write(%r, add(ref_read(%r), 1f));
  let %_2 = ref_write(%r, multiply(ref_read(%r), 3f));
  (ref_read(%r), %r)
}
""")
    value, ref = evaluate(mod, np.float32(1.0))
    assert float(value) == 6.0
    assert isinstance(ref, RefValue) and float(ref.value) == 6.0


def test_recursive_let_closure_runs_a_1000_step_rnn() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%h0: Tensor[(1, 8), float32], %w: Tensor[(8, 8), float32], %xs: Tensor[(1000, 1, 8), float32]) {
  let %loop = fn (%i: Tensor[(), int32], %h: Tensor[(1, 8), float32]) -> Tensor[(1, 8), float32] {
    if (less(%i, 1000)) {
      let %x = take(%xs, %i, axis=0);
      %loop(add(%i, 1), tanh(add(nn.dense(%h, %w), %x)))
    } else {
      %h
    }
  };
  %loop(0, %h0)
}
""")
    h0, w, xs = f32(1, 8), f32(8, 8, seed=1) * 0.5, f32(1000, 1, 8, seed=2)
    out = evaluate(mod, h0, w, xs)
    h = h0
    for i in range(1000):
        h = np.tanh(h @ w.T + xs[i])
    np.testing.assert_allclose(out, h, rtol=1e-4, atol=1e-5)


def test_deep_let_chain_and_deep_program_recursion_without_stack_overflow() -> None:
    x = Var("x", TensorType((), "float32"))
    bindings = []
    cur: Var = x
    for i in range(20_000):
        nxt = Var(f"v{i}")
        bindings.append((nxt, call("add", cur, const(1.0))))
        cur = nxt
    assert float(evaluate(Function((x,), bind_lets(bindings, cur)), np.float32(0.0))) == 20_000.0


def test_argument_shape_and_dtype_mismatch_raise() -> None:
    x = Var("x", TensorType((2, 3), "float32"))
    fn = Function((x,), call("negative", x))
    with pytest.raises(InterpreterError, match=r"%x.*shape mismatch.*\(2, 3\).*\(3, 2\)"):
        evaluate(fn, np.zeros((3, 2), "float32"))
    with pytest.raises(InterpreterError, match=r"dtype mismatch, expected float32, got complex128"):
        evaluate(fn, np.zeros((2, 3), "complex128"))
    # inputs convert as the compiled executors convert them (`input_array`): same-kind casts
    for given in (np.ones((2, 3), "float64"), np.ones((2, 3), "int64")):
        got = evaluate(fn, given)
        assert got.dtype == np.float32 and np.array_equal(got, autorelay.build(IRModule.from_expr(fn))(given))
    n = autorelay.ir.SymDim("n")
    a, b = Var("a", TensorType((n, 2), "float32")), Var("b", TensorType((n,), "float32"))
    sym_fn = Function((a, b), a)
    assert evaluate(sym_fn, np.zeros((3, 2), "float32"), np.zeros(3, "float32")).shape == (3, 2)
    with pytest.raises(InterpreterError, match=r"dimension n is 4 here but 3 in an earlier argument"):
        evaluate(sym_fn, np.zeros((3, 2), "float32"), np.zeros(4, "float32"))
    # Python scalars and lists are converted to the annotated dtype.
    np.testing.assert_array_equal(evaluate(fn, [[1, 2, 3], [4, 5, 6]]), -np.arange(1, 7).reshape(2, 3))


def test_errors_name_the_problem() -> None:
    y = Var("y")
    with pytest.raises(InterpreterError, match="unbound variable %y"):
        evaluate(call("negative", y))
    bad = call("add", Constant(np.zeros((2,), "float32")), Constant(np.zeros((3,), "float32")))
    with pytest.raises(InterpreterError, match=r"add failed on arguments \(2,\), \(3,\)"):
        evaluate(bad)
    with pytest.raises(InterpreterError, match="no global function @nope"):
        Interpreter(IRModule()).call("nope")
    with pytest.raises(InterpreterError, match="non-function"):
        evaluate(Call(const(1.0), ()))


def test_dataflow_overhead_is_small() -> None:
    """About 100 small op calls: the interpreter should add only microseconds per node."""
    x = Var("x", TensorType((4, 4), "float32"))
    e = x
    for _ in range(50):
        e = call("add", e, call("multiply", e, const(0.5)))
    interp = Interpreter(IRModule.from_expr(Function((x,), e)))
    a = np.ones((4, 4), "float32")
    interp.call("main", a)
    t0 = time.perf_counter()
    for _ in range(20):
        out = interp.call("main", a)
    per_node_us = (time.perf_counter() - t0) / 20 / 100 * 1e6
    np.testing.assert_allclose(out, np.full((4, 4), 1.5**50, "float32"), rtol=1e-4)
    assert per_node_us < 100, f"{per_node_us:.1f} us per node"
