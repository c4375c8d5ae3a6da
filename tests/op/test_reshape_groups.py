"""Reshape maps each output axis through the smallest run of axes it shares with the input: the
runs themselves, and every reshape-like op agreeing with NumPy, including the shapes where axes
merge, split, regroup, or only gain or lose extent-1 axes."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.op.te_compute import reshape_groups

pytestmark = pytest.mark.cpu


def test_runs_pair_axes_with_equal_counts():
    assert reshape_groups((1, 12, 129, 64), (12, 129, 64)) == [([1], [0]), ([2], [1]), ([3], [2])]
    assert reshape_groups((12, 129, 64), (12, 8256)) == [([0], [0]), ([1, 2], [1])]
    assert reshape_groups((2, 3, 4), (4, 3, 2)) == [([0, 1, 2], [0, 1, 2])]
    assert reshape_groups((6, 4), (2, 3, 4)) == [([0], [0, 1]), ([1], [2])]
    assert reshape_groups((1,), (1, 1)) == []
    assert reshape_groups((5,), (6,)) is None


SHAPES = [((1, 12, 9, 16), [12, 9, 16]), ((1, 12, 9, 16), [1, 1, 12, 9, 16]), ((12, 9, 16), [12, 144]),
          ((2, 3, 4, 5), [4, 3, 2, 5]), ((6, 4, 7), [2, 3, 28]), ((6, 1, 4), [24]), ((24,), [2, 1, 3, 4])]


@pytest.mark.parametrize("src,dst", SHAPES)
def test_reshape_kernels_keep_row_major_order(src, dst):
    text = (f'#[version = "0.0.5"]\ndef @main(%x: Tensor[{tuple(src)}, float32]) '
            f'{{ reshape(%x, newshape={dst}) }}')
    x = np.random.default_rng(0).standard_normal(src).astype("float32")
    got = autorelay.build(autorelay.parse(text), threads=1)(x)
    np.testing.assert_array_equal(got, x.reshape(dst))
