"""Kernels whose epilogue reads the anchor's output twice (a diamond fused whole, as GELU after a
dense or a conv): one kernel each (besides a weight re-layout), agreeing with NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import autorelay

pytestmark = pytest.mark.cpu

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x: np.ndarray) -> np.ndarray:
    return x * (1 + _erf(x / math.sqrt(2))) * 0.5


GELU = "multiply(multiply(%y, add(erf(divide(%y, 1.41421356f)), 1f)), 0.5f)"
CASES = {
    "dense": ("%x: Tensor[(24, 40), float32], %w: Tensor[(56, 40), float32], %b: Tensor[(56), float32]",
              "add(nn.dense(%x, %w), %b)", [(24, 40), (56, 40), (56,)],
              lambda x, w, b: x @ w.T + b),
    "conv": ("%x: Tensor[(1, 8, 10, 10), float32], %w: Tensor[(16, 8, 3, 3), float32], "
             "%b: Tensor[(16, 1, 1), float32]",
             "add(nn.conv2d(%x, %w, padding=[1, 1], channels=16, kernel_size=[3, 3]), %b)",
             [(1, 8, 10, 10), (16, 8, 3, 3), (16, 1, 1)], None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gelu_epilogue_fuses_into_its_anchor(case):
    params, anchor, shapes, numpy_fn = CASES[case]
    src = f'#[version = "0.0.5"]\ndef @main({params}) {{ let %y = {anchor}; {GELU} }}'
    mod = autorelay.parse(src)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in shapes]
    exe = autorelay.build(mod, threads=2)
    kernels = [r.name for r in exe.report.rows if r.source != "relayout"]
    assert len(kernels) == 1 and "erf" in kernels[0], kernels
    if numpy_fn is not None:
        want = _gelu(numpy_fn(*[a.astype(np.float64) for a in args]))
    else:  # the reference interpreter computes the conv
        want = np.asarray(autorelay.evaluate(mod, *args))
    np.testing.assert_allclose(exe(*args), want, rtol=2e-5, atol=2e-5)
