"""The packing kernel for non-constant blocked inputs equals the schedule's NumPy re-layout."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.kernel import compile_kernel
from autorelay.lower.relayout import packed_shape, relayout_compute
from autorelay.schedule.relayout import relayout

pytestmark = pytest.mark.cpu

CASES = [
    ((2, 19, 7), [("pack", 1, 16, 3)]),  # batch_matmul's B: N padded 19 -> 32
    ((19, 21), [("pack", 0, 8, 2)]),
    ((5, 7), [("pad", 1, 8), ("pack", 0, 4, 1)]),
    ((3, 10), [("pack", 1, 4, 0)]),
]


@pytest.mark.parametrize(("shape", "ops"), CASES)
def test_packing_kernel_matches_numpy_relayout(shape, ops):
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    want = relayout(x, ops)
    assert packed_shape(shape, ops) == want.shape
    got = compile_kernel(relayout_compute(shape, "float32", ops)).run(x)
    np.testing.assert_array_equal(got, want)
