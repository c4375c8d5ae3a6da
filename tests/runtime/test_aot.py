"""The ahead-of-time compiler: recurrent loops and the generative char-rnn compiled to native code,
checked against the reference interpreter and NumPy; unsupported programs name the construct."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_programs import f32, interpret_main

import autorelay
from autorelay.frontend import zoo
from autorelay.runtime import aot
from autorelay.runtime.values import to_list, values_equal


@pytest.mark.parametrize("name", ["lstm", "gru", "rnn"])
def test_recurrent_loops_match_the_interpreter(name: str) -> None:
    mod, params = zoo.get(name, seq_len=7)
    exe = aot.compile(mod, params=params)
    xs, xs2 = f32(7, 1, 128), f32(7, 1, 128, seed=5)
    out = exe(xs)
    out2 = exe(xs2)  # a second run must not disturb the first result
    np.testing.assert_allclose(out, interpret_main(mod, params, xs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out2, interpret_main(mod, params, xs2), rtol=1e-4, atol=1e-5)
    if name == "lstm":
        np.testing.assert_allclose(out, zoo.rnn.lstm_reference(xs, params), rtol=1e-4, atol=1e-5)
    assert "@aot_" + name + "_loop" in exe.llvm_ir and "br label %loop" in exe.llvm_ir


def test_char_rnn_generates_the_interpreters_sequence() -> None:
    mod, params = zoo.get("char-rnn", steps=40)  # > 16: the list record must grow by realloc
    exe = aot.compile(mod, params=params)
    for k in (3, 17):
        start = np.eye(64, dtype="float32")[[k]]
        out = exe(start)
        assert len(to_list(out)) == 40
        assert values_equal(out, interpret_main(mod, params, start))
    assert {r.source for r in exe.report.rows} <= {"default", "builtin"}


def test_loops_that_swap_parameters_and_branch_into_values() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @loop(%i: Tensor[(), int32], %a: Tensor[(4), float32], %b: Tensor[(4), float32]) -> Tensor[(4), float32] {
  if (less(%i, 5)) {
    let %m = if (less(%i, 2)) { multiply(%a, 2f) } else { add(%a, 1f) };
    @loop(add(%i, 1), %b, %m)
  } else {
    subtract(%a, %b)
  }
}
def @main(%a: Tensor[(4), float32], %b: Tensor[(4), float32]) -> Tensor[(4), float32] {
  @loop(0, %a, %b)
}
""")
    a, b = f32(4), f32(4, seed=1)
    x, y = a.copy(), b.copy()
    for i in range(5):
        m = x * 2 if i < 2 else x + 1
        x, y = y, m
    np.testing.assert_allclose(aot.compile(mod)(a, b), x - y, rtol=1e-6)


@pytest.mark.parametrize(("source", "message"), [
    ("""def @main(%x: Tensor[(), int32]) -> Tensor[(), int32] {
  if (less(%x, 10)) { add(%x, @main(add(%x, 1))) } else { %x }
}""", "recursive call of @main that is not in tail position"),
    ("""def @main(%x: Tensor[(2), float32]) {
  let %f = fn (%y: Tensor[(2), float32]) { add(%y, %x) };
  %f(%x)
}""", "closure"),
    ("""def @main(%x: Tensor[(), float32]) { let %r = ref(%x); ref_read(%r) }""", "references"),
])
def test_unsupported_programs_name_the_construct(source: str, message: str) -> None:
    mod = autorelay.parse('#[version = "0.0.5"]\n' + source)
    with pytest.raises(aot.AotError, match=message):
        aot.compile(mod)


def test_tree_lstm_is_rejected_with_the_construct_named() -> None:
    mod, params = zoo.get("tree-lstm")
    with pytest.raises(aot.AotError, match=r"input %tree of @main has type Tree\[.*static tensors only"):
        aot.compile(mod, params=params)


def test_bad_input_shape_names_the_input_and_both_shapes() -> None:
    mod, params = zoo.get("rnn", seq_len=3)
    exe = aot.compile(mod, params=params)
    with pytest.raises(aot.AotError, match=r"input 'data': expected shape \(3, 1, 128\), got \(2, 1, 128\)"):
        exe(np.zeros((2, 1, 128), "float32"))


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
def test_a_weight_passed_as_an_argument_is_packed_on_every_call(target: str) -> None:
    """The RNN with its weights left as inputs: each step's dense layer reads its weight blocked,
    so a packing kernel packs the argument on every call (new weights on the second call must be
    used, not the first call's packed copy)."""
    mod, params = zoo.get("rnn", seq_len=4)
    exe = aot.compile(mod, target=target)
    assert [r.detail for r in exe.report.rows if r.kind == "relayout"], "no weight is read blocked"
    xs = f32(4, 1, 128)
    for scale in (1.0, -0.5):
        weights = {k: v * np.float32(scale) for k, v in params.items()}
        out = exe(*[xs if n == "data" else weights[n] for n in exe.input_names])
        np.testing.assert_allclose(out, interpret_main(mod, weights, xs), rtol=1e-4, atol=1e-5)
