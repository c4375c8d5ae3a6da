"""ONNX Det, compiled: against NumPy's `det` (LAPACK's LU) on batches of random, permutation
(every sign), singular and ill-ordered matrices (a zero on the diagonal: pivoting must swap)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend.onnx import OnnxImportError, from_onnx  # noqa: E402

pytestmark = pytest.mark.cpu

ELEM = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE}


def _det_model(shape: tuple, dtype: str = "float32") -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["d"])], "det",
                              [helper.make_tensor_value_info("x", ELEM[dtype], shape)],
                              [helper.make_tensor_value_info("d", ELEM[dtype], shape[:-2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(x: np.ndarray) -> np.ndarray:
    mod, params = from_onnx(_det_model(x.shape, str(x.dtype)))
    exe = autorelay.build(mod, params=params, threads=1)
    assert not exe.report.fallbacks, exe.report
    return np.asarray(exe(x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 5, 5), (2, 3, 6, 6)])
def test_random_matrices_match_numpy(shape, dtype):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    want = np.linalg.det(x.astype("float64"))
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(_run(x), want, rtol=tol, atol=tol)


def test_permutation_singular_and_zero_diagonal_matrices():
    perms = [np.eye(4)[list(p)] for p in itertools.permutations(range(4))]  # det +1 or -1
    singular = np.array([[1.0, 2, 3, 4], [2, 4, 6, 8], [0, 1, 0, 1], [3, 1, 4, 1]])  # rows 0, 1 dependent
    zero_col = np.array([[1.0, 0, 3, 4], [2, 0, 6, 1], [5, 0, 0, 1], [3, 0, 4, 2]])
    zero_diag = np.array([[0.0, 2, 1, 0], [3, 0, 2, 1], [1, 1, 0, 2], [2, 1, 3, 0]])  # pivoting must swap
    x = np.stack(perms + [singular, zero_col, zero_diag]).astype("float32")
    got = _run(x)
    np.testing.assert_array_equal(got[:24], np.linalg.det(np.stack(perms)))
    assert got[25] == 0.0 and np.isfinite(got).all()
    np.testing.assert_allclose(got[24:], np.linalg.det(x[24:].astype("float64")), atol=1e-5)


def test_a_non_square_input_is_refused():
    with pytest.raises(OnnxImportError, match=r"Det needs square matrices.*\(2, 3\)"):
        from_onnx(_det_model((2, 3)))
