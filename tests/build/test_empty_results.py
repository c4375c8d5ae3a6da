"""A kernel whose results are all empty (a slice of no rows) has nothing to compute: the graph
executor gives it no step at all (it fell back to NumPy), and the model's results still match the
reference interpreter."""

from __future__ import annotations

import numpy as np

import autorelay


def test_an_empty_slice_needs_no_kernel():
    mod = autorelay.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(4, 5), float32]) {
  %0 = strided_slice(%x, begin=[2], end=[2], axes=[0]);
  (%0, add(%x, 1f), exp(%0))
}''')
    x = np.arange(20, dtype="float32").reshape(4, 5)
    exe = autorelay.build(mod, executor="graph")
    for got, want in zip(exe(x), autorelay.evaluate(mod, x), strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert [r.name for r in exe.report.rows] == ["add"], exe.report


def test_a_program_whose_only_results_are_empty():
    """No step at all, so no storage block is made for any kernel: the empty values still get one
    (they were given the index -1, an error with no block to index)."""
    mod = autorelay.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(4, 5), float32]) {
  %0 = strided_slice(%x, begin=[2], end=[2], axes=[0]);
  (%0, cast(%0, dtype="int64"))
}''')
    x = np.arange(20, dtype="float32").reshape(4, 5)
    got = autorelay.build(mod, executor="graph")(x)
    assert [(g.shape, g.dtype) for g in got] == [((0, 5), np.float32), ((0, 5), np.int64)]
