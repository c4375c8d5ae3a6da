"""A CNN's training step (the gradient of its loss with respect to every weight and the input)
compiles with no NumPy fallback: the gradients of convolutions (data and weights), both poolings,
reflect and edge padding, a bilinear resize, dense layers and ReLU. Checked against the reference
interpreter, whose gradients are the ops' NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.ir.module import IRModule

pytestmark = pytest.mark.cpu

CNN = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 12, 12), float32], %w1: Tensor[(4, 3, 3, 3), float32],
          %w2: Tensor[(5, 4, 3, 3), float32], %d: Tensor[(6, 125), float32]) {
  %p = nn.pad(%x, 0f, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]], pad_mode="reflect");
  %0 = nn.relu(nn.conv2d(%p, %w1));
  %1 = nn.max_pool2d(%0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1]);
  %e = nn.pad(%1, 0f, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]], pad_mode="edge");
  %2 = nn.relu(nn.conv2d(%e, %w2));
  %3 = nn.avg_pool2d(%2, pool_size=[2, 2], strides=[2, 2], padding=[1, 1], count_include_pad=False);
  %4 = image.resize2d(%3, size=[5, 5], method="linear");
  sum(nn.dense(nn.batch_flatten(%4), %d))
}
"""


def test_cnn_training_step_compiles_without_fallback():
    mod = autorelay.infer_types(autorelay.parse(CNN))
    step = autorelay.infer_types(IRModule.from_expr(autorelay.gradient(mod["main"])))
    gen = np.random.default_rng(0)
    args = [gen.standard_normal(p.checked_type.concrete_shape).astype("float32") * 0.5
            for p in mod["main"].params]
    want_value, want_grads = autorelay.evaluate(step, *args)
    exe = autorelay.build(step, executor="graph")
    got_value, got_grads = exe(*args)
    assert exe.report.fallbacks == [], [(r.name, r.detail) for r in exe.report.fallbacks]
    np.testing.assert_allclose(np.asarray(got_value), np.asarray(want_value), rtol=1e-4, atol=1e-4)
    for got, want in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
