"""The model zoo: every model type-checks, runs in the reference interpreter, and the recurrent
models match independent NumPy implementations."""

import numpy as np
import pytest

import autorelay
from autorelay.frontend import zoo
from autorelay.frontend.zoo.rnn import lstm_reference
from autorelay.frontend.zoo.treelstm import tree_lstm_reference
from autorelay.ir.types import TensorType
from autorelay.runtime.interpreter import evaluate
from autorelay.runtime.values import ConstructorValue, from_list, to_list

# small instances of each architecture keep the interpreter runs quick
SMALL = {
    "resnet-18": dict(image_size=32), "resnet-34": dict(image_size=32), "resnet-50": dict(image_size=32),
    "resnext-50": dict(image_size=32),
    "mobilenet-v2": dict(image_size=32), "vgg-16": dict(image_size=32), "squeezenet-1.1": dict(image_size=48),
    "dcgan": dict(ngf=8), "inception": dict(image_size=16),
    "transformer": dict(seq_len=8, d_model=32, d_ff=64),
    "lstm": dict(seq_len=4), "gru": dict(seq_len=4), "rnn": dict(seq_len=4), "char-rnn": dict(steps=5),
}
EXPECTED_OUT = {
    "resnet-18": (1, 1000), "resnet-50": (1, 1000), "resnext-50": (1, 1000), "mobilenet-v2": (1, 1000),
    "vgg-16": (1, 1000),
    "squeezenet-1.1": (1, 1000), "nature-dqn": (1, 18), "dcgan": (1, 3, 64, 64), "mlp": (1, 10),
    "transformer": (1, 8, 32), "lstm": (1, 128), "gru": (1, 128), "rnn": (1, 128),
}


def test_names_and_aliases():
    names = zoo.names()
    for required in ["resnet-18", "resnet-34", "resnet-50", "resnext-50", "mobilenet-v2", "vgg-16",
                     "squeezenet-1.1", "nature-dqn", "dcgan", "inception", "mlp", "transformer", "lstm",
                     "gru", "rnn", "char-rnn", "tree-lstm"]:
        assert required in names
    assert zoo.canonical_name("ResNet18") == "resnet-18"
    with pytest.raises(KeyError, match="unknown model"):
        zoo.get("alexnet")


def test_weights_are_deterministic():
    _, p1 = zoo.get("mlp")
    _, p2 = zoo.get("mlp")
    assert p1.keys() == p2.keys()
    assert all(np.array_equal(p1[k], p2[k]) for k in p1)


@pytest.mark.parametrize("name", [n for n in zoo.names() if n != "tree-lstm"])
def test_model_typechecks_and_runs(name):
    mod, params = zoo.get(name, **SMALL.get(name, {}))
    typed = autorelay.infer_types(mod)
    ret = typed["main"].checked_type.ret_type
    if name in EXPECTED_OUT:
        assert isinstance(ret, TensorType) and ret.shape == EXPECTED_OUT[name]
    inputs = zoo.random_inputs(mod, params)
    args = [inputs[p.name_hint] if p.name_hint in inputs else params[p.name_hint] for p in mod["main"].params]
    out = evaluate(typed, *args)
    if isinstance(out, ConstructorValue):
        chars = to_list(out)
        assert len(chars) == SMALL["char-rnn"]["steps"]
        assert all(0 <= int(c[0]) < 64 for c in chars)
    else:
        assert out.shape == tuple(ret.shape) and np.all(np.isfinite(out))
        if name in ("resnet-18", "mobilenet-v2", "mlp", "squeezenet-1.1", "vgg-16"):
            np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-4)  # softmax head


def test_lstm_matches_numpy_oracle():
    mod, params = zoo.get("lstm", seq_len=5, input_size=16, hidden=8)
    xs = np.random.default_rng(3).standard_normal((5, 1, 16)).astype("float32")
    args = [xs] + [params[p.name_hint] for p in mod["main"].params[1:]]
    out = evaluate(autorelay.infer_types(mod), *args)
    np.testing.assert_allclose(out, lstm_reference(xs, params), rtol=1e-5, atol=1e-6)


def test_tree_lstm_matches_numpy_oracle():
    mod, params = zoo.get("tree-lstm", input_size=6, hidden=4)
    typed = autorelay.infer_types(mod)
    rng = np.random.default_rng(0)

    def leaf():
        return (rng.standard_normal((1, 6)).astype("float32"), [])

    py_tree = (rng.standard_normal((1, 6)).astype("float32"),
               [leaf(), (rng.standard_normal((1, 6)).astype("float32"), [leaf(), leaf()])])
    rose = typed.get_constructor("Rose")

    def to_value(t):
        x, kids = t
        return ConstructorValue(rose, (x, from_list(typed, [to_value(k) for k in kids])))

    args = [to_value(py_tree)] + [params[p.name_hint] for p in mod["main"].params[1:]]
    out = evaluate(typed, *args)
    np.testing.assert_allclose(out, tree_lstm_reference(py_tree, params), rtol=1e-5, atol=1e-6)
