"""The VM against the reference interpreter: every recurrent zoo model, and the language constructs
(closures, references, match, deep recursion without Python stack growth)."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import numpy as np
import pytest
from runtime_programs import LIST, PATTERNS, f32, interpret_main

import autorelay
from autorelay.frontend import zoo
from autorelay.runtime import vm
from autorelay.runtime.values import ConstructorValue, RefValue, from_list, to_list, values_equal


@contextmanager
def small_python_stack(limit: int = 120):
    """Any Python recursion per program call level would blow this limit at depth 10,000."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize("name", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("blocks", [True, False])
def test_recurrent_loops_match_the_interpreter(name: str, blocks: bool) -> None:
    mod, params = zoo.get(name, seq_len=6)
    xs = f32(6, 1, 128)
    # without blocks: every kernel called on its own, parallel segments split over two threads
    exe = vm.compile(mod, params=params, blocks=blocks, threads=1 if blocks else 2)
    assert bool(exe.blocks) == blocks
    want = interpret_main(mod, params, xs)
    np.testing.assert_allclose(exe(xs), want, rtol=1e-4, atol=1e-5)
    if name == "lstm":  # and the independent NumPy formula
        np.testing.assert_allclose(exe(xs), zoo.rnn.lstm_reference(xs, params), rtol=1e-4, atol=1e-5)
    assert all(r.source in ("default", "builtin") for r in exe.report.rows)  # every kernel compiled


def test_char_rnn_generates_the_interpreters_sequence_and_results_are_not_clobbered() -> None:
    mod, params = zoo.get("char-rnn", steps=12)
    exe = vm.compile(mod, params=params)
    starts = [np.eye(64, dtype="float32")[[k]] for k in (3, 17)]
    outs = [exe(s) for s in starts]  # the first result must survive the second run (buffer pools)
    for s, out in zip(starts, outs):
        want = interpret_main(mod, params, s)
        assert isinstance(out, ConstructorValue) and len(to_list(out)) == 12
        assert values_equal(out, want)
    assert [int(c[0]) for c in to_list(outs[0])] != [int(c[0]) for c in to_list(outs[1])]


def _tree(mod, rng, depth: int, fanout: int) -> ConstructorValue:
    rose = mod.get_constructor("Rose")
    x = rng.standard_normal((1, 64)).astype("float32")
    kids = [_tree(mod, rng, depth - 1, fanout) for _ in range(fanout)] if depth else []
    return ConstructorValue(rose, (x, from_list(mod, kids)))


def test_tree_lstm_over_an_adt_tree_matches_the_interpreter() -> None:
    mod, params = zoo.get("tree-lstm")
    tree = _tree(mod, np.random.default_rng(1), 2, 3)
    exe = vm.compile(mod, params=params)
    np.testing.assert_allclose(exe(tree), interpret_main(mod, params, tree), rtol=1e-4, atol=1e-5)


def test_reference_kernel_provider_gives_the_same_answers() -> None:
    mod, params = zoo.get("gru", seq_len=4)
    xs = f32(4, 1, 128, seed=3)
    exe = vm.compile(mod, params=params, kernels="reference")
    np.testing.assert_allclose(exe(xs), interpret_main(mod, params, xs), rtol=1e-5, atol=1e-6)
    assert {r.source for r in exe.report.rows} == {"reference"}


def test_closures_capture_only_what_they_use_and_can_be_returned() -> None:
    mod = autorelay.parse(LIST + """
def @main(%l: List[Tensor[(), float32]], %c: Tensor[(), float32]) {
  let %k = multiply(%c, 2f);
  @map(fn (%x: Tensor[(), float32]) { add(multiply(%x, %c), %k) }, %l)
}
def @adder(%k: Tensor[(2), float32]) {
  let %scale = multiply(%k, 2f);
  fn (%v: Tensor[(2), float32]) { add(%v, %scale) }
}
""")
    exe = vm.compile(mod)
    vals = [np.array(v, "float32") for v in (1.0, 2.0, 3.0)]
    out = exe(from_list(mod, vals), np.float32(10.0))
    assert [float(v) for v in to_list(out)] == [30.0, 40.0, 50.0]
    clo = exe.call("adder", np.array([1.0, 2.0], "float32"))
    assert isinstance(clo, vm.VMClosure) and len(clo.captured) == 1


def test_recursion_10000_deep_does_not_grow_the_python_stack() -> None:
    mod = autorelay.parse(LIST + """
def @count(%i: Tensor[(), int32], %n: Tensor[(), int32], %acc: Tensor[(), int32]) -> Tensor[(), int32] {
  if (less(%i, %n)) { @count(add(%i, 1), %n, add(%acc, %i)) } else { %acc }
}
""")
    exe = vm.compile(mod, kernels="reference")
    lst = from_list(mod, [np.float32(i) for i in range(10_000)])
    with small_python_stack():
        n = exe.call("length", lst)  # non-tail: 10,000 VM frames
        total = exe.call("count", 0, 10_000, 0)  # tail calls: one frame; ints become int32
    assert int(n) == 10_000 and n.dtype == np.int32
    assert int(total) == sum(range(10_000))


def test_match_with_nested_and_tuple_patterns_and_a_failing_match() -> None:
    mod = autorelay.parse(PATTERNS + """
def @head(%l: List[Tensor[(), float32]]) -> Tensor[(), float32] {
  match? (%l) {
    Cons(%h, _) => %h,
  }
}
""")
    exe = vm.compile(mod, kernels="reference")
    ints = [np.array(v, "int32") for v in (5, 7, 9)]
    assert int(exe.call("first_two", from_list(mod, ints))) == 12
    assert int(exe.call("first_two", from_list(mod, ints[:1]))) == 5
    assert int(exe.call("first_two", from_list(mod, []))) == -1
    assert tuple(int(v) for v in exe.call("swap", (ints[0], ints[1]))) == (7, 5)
    with pytest.raises(vm.VMRuntimeError, match="match in head: no clause matches"):
        exe.call("head", from_list(mod, []))


def test_references_and_a_recursive_let_closure_rnn() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @refs(%x: Tensor[(), float32]) {
  let %r = ref(%x);
  let %_ = ref_write(%r, add(ref_read(%r), 1f));
  let %_2 = ref_write(%r, multiply(ref_read(%r), 3f));
  (ref_read(%r), %r)
}
def @main(%h0: Tensor[(1, 8), float32], %w: Tensor[(8, 8), float32], %xs: Tensor[(300, 1, 8), float32]) {
  let %loop = fn (%i: Tensor[(), int32], %h: Tensor[(1, 8), float32]) -> Tensor[(1, 8), float32] {
    if (less(%i, 300)) {
      let %x = take(%xs, %i, axis=0);
      %loop(add(%i, 1), tanh(add(nn.dense(%h, %w), %x)))
    } else {
      %h
    }
  };
  %loop(0, %h0)
}
""")
    exe = vm.compile(mod)
    value, ref = exe.call("refs", np.float32(1.0))
    assert float(value) == 6.0 and isinstance(ref, RefValue) and float(ref.value) == 6.0
    h0, w, xs = f32(1, 8), f32(8, 8, seed=1) * 0.5, f32(300, 1, 8, seed=2)
    h = h0
    for i in range(300):
        h = np.tanh(h @ w.T + xs[i])
    np.testing.assert_allclose(exe(h0, w, xs), h, rtol=1e-4, atol=1e-5)


def test_bad_inputs_name_the_input_and_both_shapes() -> None:
    mod, params = zoo.get("rnn", seq_len=3)
    exe = vm.compile(mod, params=params, kernels="reference")
    with pytest.raises(vm.VMError, match=r"input 'data': expected shape \(3, 1, 128\), got \(3, 128\)"):
        exe(np.zeros((3, 128), "float32"))
    with pytest.raises(vm.VMError, match=r"expects 1 input"):
        exe()
    with pytest.raises(vm.VMError, match=r"runs on the VM .* only graph executables"):
        exe.save("rnn.arx")


def test_bytecode_turns_self_tail_calls_into_jumps() -> None:
    mod, params = zoo.get("rnn", seq_len=3)
    text = vm.compile(mod, params=params, kernels="reference").disassemble()
    loop = text[text.index("rnn_loop:"):]
    assert "TAILCALLG" in loop and "CALLG" not in loop.replace("TAILCALLG", "")


def test_weights_passed_as_inputs_are_packed_per_call_and_pooled_buffers_stay_correct() -> None:
    mod, params = zoo.get("gru", seq_len=5)
    exe = vm.compile(mod)  # unbound weights: compiled packing kernels re-pack them on every call
    assert [r for r in exe.report.rows if r.kind == "relayout"], "no weight is read blocked"
    xs = f32(5, 1, 128, seed=4)
    for scale in (1.0, -0.5):  # the second call's weights, not the first call's packed copy
        weights = {k: v * np.float32(scale) for k, v in params.items()}
        inputs = [weights[p.name_hint] for p in mod["main"].params[1:]]
        np.testing.assert_allclose(exe(xs, *inputs), interpret_main(mod, weights, xs), rtol=1e-4, atol=1e-5)
    # a kernel result held for two iterations (Fibonacci on tensors) must not be overwritten
    fib = autorelay.parse("""#[version = "0.0.5"]
def @main(%i: Tensor[(), int32], %a: Tensor[(3), float32], %b: Tensor[(3), float32]) {
  if (less(%i, 30)) { @main(add(%i, 1), %b, add(%a, %b)) } else { (%a, %b) }
}
""")
    a, b = np.array([0.0, 1.0, 2.0], "float32"), np.array([1.0, 1.0, 0.5], "float32")
    out = vm.compile(fib)(np.int32(0), a, b)
    x, y = a.astype(np.float64), b.astype(np.float64)
    for _ in range(30):
        x, y = y, x + y
    np.testing.assert_allclose(out[0], x, rtol=1e-6)
    np.testing.assert_allclose(out[1], y, rtol=1e-6)


def test_values_dead_after_a_non_tail_call_are_dropped_before_it() -> None:
    from autorelay.runtime.vm import bytecode as bc

    mod, params = zoo.get("char-rnn", steps=50)
    exe = vm.compile(mod, params=params)
    sample = next(f for f in exe.functions if f.name == "sample")
    call = next(ins for ins in sample.code if ins[0] == bc.CALLG)
    assert {1, 2} <= set(call[4])  # %h and %x are not needed once @sample(...) is called
    exe(np.eye(64, dtype="float32")[[2]])
    # so every kernel output but argmax's (which the list keeps) reuses its pooled buffers
    assert len(exe.blocks) == 1 and len(exe.blocks[0].outs) == 4
    assert 50 <= exe.blocks[0].allocated <= 50 + 3 * 3


def test_a_kernel_block_returns_bool_tuple_and_plain_outputs() -> None:
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%a: Tensor[(4), float32], %b: Tensor[(4), float32]) {
  let %s = split(exp(%a), indices_or_sections=2);
  (less(%a, %b), multiply(add(%a, %b), %b), %s, add(%s.1, 1f))
}
""")
    exe = vm.compile(mod)
    assert len(exe.blocks) == 1
    a, b = f32(4), f32(4, seed=1)
    lt, prod, (s0, s1), s1p = exe(a, b)
    assert lt.dtype == np.bool_ and np.array_equal(lt, a < b)
    np.testing.assert_allclose(prod, (a + b) * b, rtol=1e-6)
    np.testing.assert_allclose(np.concatenate([s0, s1]), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(s1p, np.exp(a)[2:] + 1, rtol=1e-6)
    second = exe(b, a)  # the first results are still held, so the block allocates fresh buffers
    assert np.array_equal(lt, a < b) and np.array_equal(second[0], b < a)


def test_prepare_pushes_invariant_weights_into_recursive_globals_only() -> None:
    from autorelay.transform.prepare import prepare

    def names(mod):
        return {g.name_hint: [p.name_hint for p in f.params] for g, f in mod.functions.items()}

    assert names(prepare(*zoo.get("lstm")))["lstm_loop"] == ["i", "xs", "h", "c"]
    tree = names(prepare(*zoo.get("tree-lstm")))  # mutually recursive: both lose their weights
    assert tree["tree_lstm"] == ["tree"] and tree["child_sum"] == ["children", "xf"]
    mod = autorelay.parse("""#[version = "0.0.5"]
def @loop(%i: Tensor[(), int32], %w: Tensor[(2), float32], %v: Tensor[(2), float32]) -> Tensor[(2), float32] {
  if (less(%i, 3)) { @loop(add(%i, 1), multiply(%w, 2f), %v) } else { add(%w, %v) }
}
def @main(%w: Tensor[(2), float32], %v: Tensor[(2), float32]) { @loop(0, %w, %v) }
""")
    w, v = np.array([1.0, 2.0], "float32"), np.array([0.5, 0.25], "float32")
    prepared = prepare(mod, {"w": w, "v": v})
    assert names(prepared)["loop"] == ["i", "w"]  # %w changes in the loop, %v does not
    np.testing.assert_allclose(vm.compile(mod, params={"w": w, "v": v})(), w * 8 + v)


REF_PROGRAMS = {
    # a read bound before a write: it must keep the value from before the write
    "read_then_write": ("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %r = ref(%x);
  let %old = ref_read(%r);
  let %_ = ref_write(%r, multiply(ref_read(%r), 3f));
  (%old, ref_read(%r))
}""", [np.array([1, 2, 3], "float32")]),
    # a closure over a reference: the reference is created once, not once per call
    "counter_closure": ("""#[version = "0.0.5"]
def @main(%x: int32) -> int32 {
  let %r = ref(%x);
  let %inc = fn () { ref_write(%r, add(ref_read(%r), 1)) };
  let %a = %inc();
  let %b = %inc();
  ref_read(%r)
}""", [np.array(5, "int32")]),
}


@pytest.mark.parametrize("name", sorted(REF_PROGRAMS))
@pytest.mark.parametrize("pipeline", ["default", "O0"])
def test_references_keep_their_order_and_identity_through_the_pipelines(name, pipeline) -> None:
    """The graph normal form and the inlining passes move pure expressions to their uses; a
    reference's creation and its reads must stay where they are bound (a read moved past a write
    saw the written value; a creation moved into a closure made a fresh reference per call)."""
    text, args = REF_PROGRAMS[name]
    mod = autorelay.parse(text)
    want = autorelay.evaluate(autorelay.infer_types(mod), *args)
    got = autorelay.build(mod, executor="vm", pipeline=pipeline)(*args)
    assert values_equal(got, want), (got, want)
    assert name != "counter_closure" or int(got) == 7
