"""`dyn.reduce`, `dyn.squeeze`, `dyn.expand_dims`, `dyn.split`, `dyn.arange`: references against
NumPy, type relations (rank from the axes tensor's length, extents `?`), run-time value errors, and
their static forms once specialised."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Function, Var
from autorelay.ir.types import AnyDim, TensorType, TupleType
from autorelay.op.check import infer_op_type, run_op
from autorelay.op.dynamic import DynamicValueError
from autorelay.op.registry import call
from autorelay.runtime.vm.specializing_kernel import specialize
from autorelay.typing.module import infer_expr

Q = AnyDim()
X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")


def i64(*v):
    return np.array(v, dtype="int64")


@pytest.mark.parametrize("reducer", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axes,keep", [((0, 2), True), ((-1,), False), ((), False), ((2, 0, 1), True)])
def test_reduce_reference(reducer, axes, keep):
    got = run_op("dyn.reduce", X, i64(*axes), reducer=reducer, keepdims=keep)
    want = getattr(np, reducer)(X, axis=tuple(axes) or None, keepdims=keep)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_reduce_noop_empty_and_extremes_of_nothing():
    np.testing.assert_array_equal(run_op("dyn.reduce", X, i64(), noop_with_empty_axes=True), X)
    empty = np.zeros((2, 0), "float32")
    np.testing.assert_array_equal(run_op("dyn.reduce", empty, i64(1), reducer="max", keepdims=False),
                                  [-np.inf, -np.inf])
    with pytest.raises(DynamicValueError, match="repeat an axis"):
        run_op("dyn.reduce", X, i64(0, -3))


def test_reduce_types():
    t = TensorType((2, 1, 4), "float32")
    two = TensorType((2,), "int64")
    assert infer_op_type("dyn.reduce", [t, two], keepdims=False) == TensorType((Q,), "float32")
    assert infer_op_type("dyn.reduce", [t, TensorType((Q,), "int64")]) == TensorType((Q, 1, Q), "float32")
    with pytest.raises(TypeCheckError, match="static length"):
        infer_op_type("dyn.reduce", [t, TensorType((Q,), "int64")], keepdims=False)
    with pytest.raises(TypeCheckError, match="needs bool data"):
        infer_op_type("dyn.reduce", [t, TensorType((1,), "int64")], reducer="any")


def test_squeeze_expand_dims_split_arange_references():
    x = np.zeros((1, 3, 1), "float32")
    assert run_op("dyn.squeeze", x, i64(-1, 0)).shape == (3,)
    with pytest.raises(DynamicValueError, match="do not have extent 1"):
        run_op("dyn.squeeze", x, i64(1))
    assert run_op("dyn.expand_dims", x, i64(0, -1)).shape == (1, 1, 3, 1, 1)
    parts = run_op("dyn.split", X, i64(1, 0, 3), axis=2)
    assert [p.shape for p in parts] == [(2, 3, 1), (2, 3, 0), (2, 3, 3)]
    with pytest.raises(DynamicValueError, match="sum to axis 2's extent 4"):
        run_op("dyn.split", X, i64(1, 1), axis=2)
    np.testing.assert_array_equal(run_op("dyn.arange", i64(10)[0], i64(2)[0], i64(-3)[0]), [10, 7, 4])
    with pytest.raises(DynamicValueError, match="delta is 0"):
        run_op("dyn.arange", i64(0)[0], i64(2)[0], i64(0)[0])


def test_split_and_arange_types():
    t = TensorType((2, 6), "float32")
    want = TupleType((TensorType((2, Q), "float32"),) * 3)
    assert infer_op_type("dyn.split", [t, TensorType((3,), "int64")], axis=1) == want
    s = TensorType((), "int32")
    assert infer_op_type("dyn.arange", [s, s, s]) == TensorType((Q,), "int32")


def test_specialised_reduce_is_the_static_op():
    x, a = Var("x", TensorType((2, 3, 4), "float32")), Var("a", TensorType((2,), "int64"))
    fn = Function((x, a), call("dyn.reduce", x, a, reducer="mean", keepdims=False))
    infer_expr(fn)
    static = specialize(fn, [X, i64(2, -3)])
    assert static.body.op.name == "mean" and static.body.attrs["axis"] == (0, 2)
    assert static.body.checked_type == TensorType((3,), "float32")
