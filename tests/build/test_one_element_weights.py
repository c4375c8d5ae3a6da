"""A layer whose bound weight has a single element (a 1x1 convolution from one channel to one, a
dense layer of one unit on one feature): the lowering makes such a constant an inline scalar, so
the templates must not try to pack it. Every executor compiles it (no fallback) and matches the
reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

PROGRAMS = {
    "conv": ("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 1, 5, 5), float32], %w: Tensor[(1, 1, 1, 1), float32]) {
  nn.conv2d(%x, %w, strides=[2, 2], channels=1, kernel_size=[1, 1])
}""", (1, 1, 5, 5), (1, 1, 1, 1)),
    "dense": ("""#[version = "0.0.5"]
def @main(%x: Tensor[(3, 1), float32], %w: Tensor[(1, 1), float32]) { nn.dense(%x, %w, units=1) }""",
              (3, 1), (1, 1)),
}


@pytest.mark.parametrize("executor", ["graph", "vm", "aot"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_one_element_bound_weight(name, executor):
    src, xs, ws = PROGRAMS[name]
    mod = autorelay.parse(src)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ws).astype("float32")
    exe = autorelay.build(mod, params={"w": w}, executor=executor)
    np.testing.assert_allclose(exe(x), autorelay.evaluate(mod, x, w), rtol=1e-6, atol=1e-6)
    if executor == "graph":
        assert not exe.report.fallbacks, exe.report
