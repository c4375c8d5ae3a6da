"""Compute DSL: declarations, the errors bad ones raise, and inlining of injective stages."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.kernel import compile_kernel
from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.tensor import inline_injective, topo_order


def test_axis_names_come_from_the_lambda():
    x = te.placeholder((4, 5), name="X")
    y = te.compute((4, 5), lambda row, col: x[row, col] + 1.0, name="Y")
    assert [a.name for a in y.op.axes] == ["row", "col"]
    z = te.compute((4, 5), lambda *i: x[i] * 2.0, name="Z")
    assert [a.name for a in z.op.axes] == ["i0", "i1"]


def test_bad_declarations_name_the_problem():
    x = te.placeholder((4, 5), name="X")
    with pytest.raises(IndexError, match="tensor X has 2 dims, indexed with 1"):
        te.compute((4,), lambda i: x[i], name="Y")
    with pytest.raises(TypeError, match="float32 vs int32"):
        te.compute((4, 5), lambda i, j: x[i, j] + E.cast(i, "int32"), name="Y")
    with pytest.raises(TypeError, match="use // "):
        te.compute((4, 5), lambda i, j: x[i // 2 / 2, j], name="Y")
    with pytest.raises(ValueError, match="lambda takes 1 indices for a 2-d shape"):
        te.compute((4, 5), lambda i: x[i, 0], name="Y")
    with pytest.raises(ValueError, match="must have positive static dimensions"):
        te.placeholder((4, 0), name="Bad")
    k = te.reduce_axis(5, "k")
    with pytest.raises(ValueError, match="must be the whole body"):
        te.compute((4,), lambda i: te.sum(x[i, k], k) * 2.0, name="Y")
    with pytest.raises(ValueError, match="clash"):
        te.compute((4,), lambda k: te.sum(x[0, k], te.reduce_axis(5, "k")), name="Y")
    with pytest.raises(TypeError, match="no truth value"):
        bool(x[0, 0] > 1.0)
    y = te.compute((4,), lambda i: x[i, 0], name="Y")
    with pytest.raises(ValueError, match="placeholder X is read but not listed"):
        te.make_def([], y)


def test_inline_injective_keeps_the_answer_and_removes_stages():
    x = te.placeholder((6, 7), name="X")
    a = te.compute((6, 7), lambda i, j: x[i, j] * 3.0, name="A")
    b = te.compute((7, 6), lambda i, j: a[j, i] - 1.0, name="B")
    k = te.reduce_axis(6, "k")
    c = te.compute((7,), lambda i: te.sum(b[i, k], k), name="C")
    cdef = te.make_def([x], c)
    inlined = inline_injective(cdef)
    assert [t.name for t in topo_order(inlined.outputs)] == ["X", "C"]
    v = np.random.default_rng(0).standard_normal((6, 7)).astype(np.float32)
    expect = (v * 3 - 1).sum(0)
    np.testing.assert_allclose(compile_kernel(cdef).run(v), expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compile_kernel(inlined).run(v), expect, rtol=1e-5, atol=1e-5)
