"""PartialEvaluate: static values unroll recursion over known-length ADTs and specialise control
flow; dynamic control flow stays; meaning is preserved."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

import autorelay
from autorelay.frontend import zoo
from autorelay.ir import Call, Function, GlobalVar, If, Match, post_order
from autorelay.runtime.interpreter import evaluate
from autorelay.runtime.values import to_list
from autorelay.transform import PartialEvaluate, bind_params

RNN = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil, }
def @gen(%h: Tensor[(1, 6), float32], %w: Tensor[(6, 6), float32], %n: Tensor[(), int32])
    -> List[Tensor[(1, 6), float32]] {
  if (equal(%n, 0)) { Nil } else {
    let %h2 = tanh(nn.dense(%h, %w));
    Cons(%h2, @gen(%h2, %w, subtract(%n, 1)))
  }
}
def @sum(%l: List[Tensor[(1, 6), float32]]) -> Tensor[(1, 6), float32] {
  match (%l) { Cons(%x, %rest) => add(%x, @sum(%rest)), Nil => zeros(shape=[1, 6], dtype="float32") }
}
def @main(%h0: Tensor[(1, 6), float32], %w: Tensor[(6, 6), float32], %n: Tensor[(), int32]) {
  @sum(@gen(%h0, %w, %n))
}
"""


def _control(fn: Function) -> list:
    return [n for n in post_order(fn) if isinstance(n, If | Match)
            or (isinstance(n, Call) and isinstance(n.op, GlobalVar))]


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    h0 = rng.standard_normal((1, 6)).astype("float32")
    return h0, (rng.standard_normal((6, 6)) * 0.5).astype("float32")


def test_generative_rnn_with_a_known_step_count_becomes_straight_line():
    mod = autorelay.parse(RNN)
    out = PartialEvaluate(static_args=(("n", np.array(5)),))(mod)
    main = out["main"]
    assert [p.name_hint for p in main.params] == ["h0", "w"]
    assert _control(main) == []  # no if, no match, no call of @gen/@sum: pure dataflow
    assert ops(main) == {"nn.dense": 5, "tanh": 5, "add": 5}
    h0, w = _inputs()
    want = evaluate(mod, h0, w, np.array(5, "int32"))
    np.testing.assert_allclose(evaluate(out, h0, w), want, rtol=1e-5, atol=1e-6)
    autorelay.infer_types(out)  # the residual program is well typed


def test_dynamic_step_count_keeps_the_recursion():
    mod = autorelay.parse(RNN)
    out = PartialEvaluate()(mod)
    assert any(isinstance(n, Call) and isinstance(n.op, GlobalVar) for n in post_order(out["main"]))
    h0, w = _inputs(1)
    for n in (0, 3):
        np.testing.assert_allclose(evaluate(out, h0, w, np.array(n, "int32")),
                                   evaluate(mod, h0, w, np.array(n, "int32")), rtol=1e-5, atol=1e-6)


def test_constant_weights_do_not_unroll_a_dynamic_recursion():
    mod = autorelay.parse(RNN)
    h0, w = _inputs(2)
    out = PartialEvaluate(static_args=(("w", w),), max_unroll=50)(mod)
    assert [p.name_hint for p in out["main"].params] == ["h0", "n"]
    assert any(isinstance(n, Call) and isinstance(n.op, GlobalVar) for n in post_order(out["main"]))
    assert sum(ops(out["main"]).values()) < 10  # no speculative unrolling of @gen
    np.testing.assert_allclose(evaluate(out, h0, np.array(4, "int32")),
                               evaluate(mod, h0, w, np.array(4, "int32")), rtol=1e-5, atol=1e-6)


def test_known_length_list_of_unknown_tensors_is_unrolled():
    mod = autorelay.parse(RNN.split("def @main")[0] + """
def @main(%a: Tensor[(1, 6), float32], %b: Tensor[(1, 6), float32], %c: Tensor[(1, 6), float32]) {
  let %f = fn (%y: Tensor[(1, 6), float32]) { multiply(%y, %y) };
  @sum(Cons(%f(%a), Cons(%b, Cons(%f(%c), Nil))))
}""")
    out = PartialEvaluate()(mod)
    assert _control(out["main"]) == []
    assert not any(isinstance(n, Function) for n in post_order(out["main"].body))  # closure inlined
    assert ops(out["main"]) == {"multiply": 2, "add": 3}
    args = [np.random.default_rng(i).standard_normal((1, 6)).astype("float32") for i in range(3)]
    np.testing.assert_allclose(evaluate(out, *args), evaluate(mod, *args), rtol=1e-6)


def test_static_arguments_select_branches_and_fold():
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3,), float32], %k: Tensor[(), float32]) {
  if (greater(%k, 0f)) { nn.relu(multiply(%x, add(%k, 1f))) } else { negative(%x) }
}""")
    for k, expect in ((2.0, {"nn.relu": 1, "multiply": 1}), (-1.0, {"negative": 1})):
        out = PartialEvaluate(static_args=(("k", k),))(mod)
        assert ops(out) == expect and _control(out["main"]) == []
        x = np.array([1, -2, 3], "float32")
        np.testing.assert_allclose(evaluate(out, x), evaluate(mod, x, np.array(k, "float32")))
    with pytest.raises(ValueError, match="no parameter"):
        PartialEvaluate(static_args=(("q", 1.0),))(mod)


def test_char_rnn_from_the_zoo_unrolls():
    mod, params = zoo.get("char-rnn", steps=4, vocab=8, hidden=8)
    mod = bind_params(mod, params)
    out = PartialEvaluate()(mod)
    assert _control(out["main"]) == []
    assert ops(out["main"])["argmax"] == 4
    start = np.eye(8, dtype="float32")[:1]
    got = [np.asarray(v).tolist() for v in to_list(evaluate(out, start))]
    want = [np.asarray(v).tolist() for v in to_list(evaluate(mod, start))]
    assert got == want and len(got) == 4


@pytest.mark.parametrize("net", sorted(NETS))
def test_whole_networks_keep_their_meaning(net):
    mod = typed(NETS[net]())
    out = PartialEvaluate()(mod)
    assert ops(out) == ops(mod)  # nothing static to fold beyond constants already there
    assert_same_outputs(mod, out)


def test_tree_lstm_over_a_known_tree_shape_becomes_dataflow():
    from autorelay.frontend.zoo.treelstm import tree_lstm_reference
    from autorelay.ir import Call as C
    from autorelay.ir import IRModule, TensorType, TupleGetItem, Var

    mod, params = zoo.get("tree-lstm", input_size=4, hidden=4)
    rose, cons, nil = (mod.get_constructor(n) for n in ("Rose", "Cons", "Nil"))
    xs = [Var(f"x{i}", TensorType((1, 4))) for i in range(3)]
    leaf = lambda x: C(rose, (x, C(nil, ())))
    tree = C(rose, (xs[0], C(cons, (leaf(xs[1]), C(cons, (leaf(xs[2]), C(nil, ())))))))
    weights = [Var(p.name_hint, p.type_annotation) for p in mod["main"].params[1:]]
    main = Function((*xs, *weights), TupleGetItem(C(GlobalVar("tree_lstm"), (tree, *weights)), 0))
    fixed = bind_params(IRModule({**{g: f for g, f in mod.functions.items() if g.name_hint != "main"},
                                  GlobalVar("main"): main}, mod.type_definitions), params)
    out = PartialEvaluate()(fixed)
    assert _control(out["main"]) == []  # both recursions (over the tree and the child lists) unrolled
    rng = np.random.default_rng(3)
    vals = [rng.standard_normal((1, 4)).astype("float32") for _ in range(3)]
    want = tree_lstm_reference((vals[0], [(vals[1], []), (vals[2], [])]), params)
    np.testing.assert_allclose(evaluate(out, *vals), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(evaluate(fixed, *vals), want, rtol=1e-4, atol=1e-5)
