"""The bundled example programs (the README's `autorelay check` job) parse, type-check and run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autorelay.ir import TensorType
from autorelay.text_format import parse

EXAMPLES = Path(__file__).parents[2] / "autorelay" / "examples"

RESULT_TYPES = {
    "resnet_block.relay": TensorType((1, 16, 32, 32), "float32"),
    "mlp.relay": TensorType((1, 10), "float32"),
    "list_sum.relay": TensorType((), "float32"),
}


def load(name: str):
    path = EXAMPLES / name
    return parse(path.read_text(), source=str(path))


@pytest.mark.parametrize("name", sorted(RESULT_TYPES))
def test_example_type_checks(name):
    infer_types = pytest.importorskip("autorelay.typing").infer_types
    typed = infer_types(load(name))
    assert typed["main"].body.checked_type == RESULT_TYPES[name]


def test_every_bundled_example_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.relay")) == sorted(RESULT_TYPES)


def test_mlp_computes_a_softmax_classifier():
    interp = pytest.importorskip("autorelay.runtime.interpreter")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 784)).astype("float32")
    w1 = (rng.standard_normal((128, 784)) * 0.05).astype("float32")
    b1 = rng.standard_normal(128).astype("float32")
    w2 = (rng.standard_normal((10, 128)) * 0.1).astype("float32")
    b2 = rng.standard_normal(10).astype("float32")
    out = interp.evaluate(load("mlp.relay"), x, w1, b1, w2, b2)
    h = np.maximum(x @ w1.T + b1, 0)
    logits = h @ w2.T + b2
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-6)


def test_list_sum_adds_the_elements():
    interp = pytest.importorskip("autorelay.runtime.interpreter")
    out = interp.evaluate(load("list_sum.relay"), np.float32(2.0), np.float32(-0.25))
    assert float(out) == pytest.approx(2.0 - 0.25 + 1.5)
