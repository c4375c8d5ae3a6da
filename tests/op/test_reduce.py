"""Reductions, cumsum, argsort and topk: type relations (axis/keepdims/exclude, negative axes,
symbolic dims, errors), references against Python oracles over explicitly gathered rows, and
gradients against finite differences."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Call, Op, Var
from autorelay.ir.types import SymDim, TensorType, TupleType
from autorelay.op.check import check_gradient, eval_dataflow, infer_op_type, run_op
from autorelay.op.registry import get

N = SymDim("n")
rng = np.random.default_rng(7)


def rows(x: np.ndarray, axes: list[int]):
    """Yield (kept index, list of reduced elements in row-major order) by explicit enumeration."""
    kept = [i for i in range(x.ndim) if i not in axes]
    for kidx in itertools.product(*(range(x.shape[i]) for i in kept)):
        row = []
        for ridx in itertools.product(*(range(x.shape[i]) for i in axes)):
            full = [0] * x.ndim
            for i, v in zip(kept, kidx):
                full[i] = v
            for i, v in zip(axes, ridx):
                full[i] = v
            row.append(x[tuple(full)].item())
        yield kidx, row


def reduce_oracle(x, axes, keepdims, fn, dtype):
    kept = [i for i in range(x.ndim) if i not in axes]
    out = np.empty(tuple(x.shape[i] for i in kept), dtype=dtype)
    for kidx, row in rows(x, axes):
        out[kidx] = fn(row)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


ORACLES = {
    "sum": math.fsum,
    "mean": lambda r: math.fsum(r) / len(r),
    "max": max,
    "min": min,
    "prod": math.prod,
    "argmax": lambda r: r.index(max(r)),
    "argmin": lambda r: r.index(min(r)),
}

# (axis attr, exclude, the axes reduced for a rank-3 input)
AXES = [
    (None, False, [0, 1, 2]),
    (1, False, [1]),
    (-1, False, [2]),
    ([0, -1], False, [0, 2]),
    ([1], True, [0, 2]),
    ([], False, []),
]


@pytest.mark.parametrize(
    "name, axis, exclude, axes",
    # an arg-reduction over no axes has no meaning, so that combination is left out
    [(n, *a) for n in sorted(ORACLES) for a in AXES if a[2] or not n.startswith("arg")],
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_reference(name, axis, exclude, axes, keepdims):
    x = rng.uniform(0.5, 1.5, (2, 3, 4))
    out = run_op(name, x, axis=axis, keepdims=keepdims, exclude=exclude)
    dtype = "int32" if name.startswith("arg") else "float64"
    expected = reduce_oracle(x, axes, keepdims, ORACLES[name], dtype)
    assert out.dtype == np.dtype(dtype) and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    t = infer_op_type(name, [TensorType((2, 3, 4), "float64")], axis=axis, keepdims=keepdims, exclude=exclude)
    assert t == TensorType(expected.shape, dtype)


def test_integer_reductions_stay_integer():
    x = np.array([[1, 2, 4], [-3, 5, 7]], dtype="int16")
    assert run_op("sum", x, axis=1).dtype == np.int16
    np.testing.assert_array_equal(run_op("sum", x, axis=1), [7, 9])
    np.testing.assert_array_equal(run_op("mean", x, axis=1), [2, 3])  # 7/3 and 9/3, truncated
    np.testing.assert_array_equal(run_op("max", x, axis=0), [1, 5, 7])


def test_argmax_ties_and_last_index():
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype="float32")
    np.testing.assert_array_equal(run_op("argmax", x, axis=1), [1, 0])
    np.testing.assert_array_equal(run_op("argmax", x, axis=1, select_last_index=True), [2, 1])
    np.testing.assert_array_equal(run_op("argmin", x, axis=1, select_last_index=True), [0, 2])


def test_all_any():
    x = np.array([[True, False], [True, True]])
    np.testing.assert_array_equal(run_op("all", x, axis=1), [False, True])
    np.testing.assert_array_equal(run_op("any", x, axis=0), [True, True])


@pytest.mark.parametrize(
    "shape, attrs, out",
    [
        ((N, 3, 4), {"axis": 1}, (N, 4)),
        ((N, 3, 4), {"axis": [1], "exclude": True}, (3,)),
        ((N, 3, 4), {"axis": -1, "keepdims": True}, (N, 3, 1)),
        ((0, 3), {"axis": 0}, (3,)),
        ((), {}, ()),
    ],
)
def test_reduce_type_relation(shape, attrs, out):
    assert infer_op_type("sum", [TensorType(shape)], **attrs) == TensorType(out)
    assert infer_op_type("argmin", [TensorType(shape)], **attrs) == TensorType(out, "int32")


def test_sum_over_empty_axis_is_zero():
    np.testing.assert_array_equal(run_op("sum", np.zeros((0, 3)), axis=0), [0, 0, 0])
    with pytest.raises(ValueError, match="max: cannot reduce over an empty axis"):
        run_op("max", np.zeros((0, 3)), axis=0)


@pytest.mark.parametrize(
    "attrs, pattern",
    [
        ({"axis": 3}, r"sum: axis=3 is out of range for a tensor of rank 3"),
        ({"axis": [-4]}, r"sum: axis=-4 is out of range"),
        ({"axis": [0, -3]}, r"sum: axis=\(0, -3\) names an axis twice"),
    ],
)
def test_reduce_axis_errors(attrs, pattern):
    with pytest.raises(TypeCheckError, match=pattern):
        infer_op_type("sum", [TensorType((2, 3, 4))], **attrs)


def test_reduce_dtype_error():
    with pytest.raises(TypeCheckError, match=r"sum: argument data must have a numeric dtype, got bool"):
        infer_op_type("sum", [TensorType((2,), "bool")])


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize(
    "attrs", [{}, {"axis": 1}, {"axis": [0, 2], "keepdims": True}, {"axis": 1, "exclude": True}]
)
def test_reduce_gradient(name, attrs):
    x = rng.uniform(0.5, 1.5, (2, 3, 2))
    check_gradient(name, [x], attrs)


@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("axis, keepdims", [(1, False), ([0, 2], True), (None, False)])
def test_variance(unbiased, axis, keepdims):
    x = rng.standard_normal((3, 4, 2))
    axes = [1] if axis == 1 else [0, 1, 2] if axis is None else [0, 2]
    m = np.mean(x, axis=tuple(axes), keepdims=True)
    n = math.prod(x.shape[a] for a in axes)

    def var(row):
        mu = math.fsum(row) / len(row)
        return math.fsum((v - mu) ** 2 for v in row) / (n - 1 if unbiased else n)

    out = run_op("variance", x, m, axis=axis, keepdims=keepdims, unbiased=unbiased)
    np.testing.assert_allclose(out, reduce_oracle(x, axes, keepdims, var, "float64"), rtol=1e-10)
    t = infer_op_type("variance", [TensorType((3, 4, 2)), TensorType(m.shape)], axis=axis, keepdims=keepdims)
    assert t.shape == out.shape
    check_gradient("variance", [x, m], {"axis": axis, "keepdims": keepdims, "unbiased": unbiased})


def test_variance_mean_shape_error():
    with pytest.raises(TypeCheckError, match=r"variance: mean of shape \(3, 4\) must have the reduced shape"):
        infer_op_type("variance", [TensorType((3, 4)), TensorType((3, 4))], axis=1)


# ---- cumsum ---------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, -1, None])
@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum(axis, exclusive):
    x = rng.integers(-5, 5, (3, 4)).astype("int32")
    out = run_op("cumsum", x, axis=axis, exclusive=exclusive)
    lines = [x.reshape(-1)] if axis is None else list(np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis]))
    acc = []
    for line in lines:
        vals = list(itertools.accumulate(line.tolist()))
        acc.append([0, *vals[:-1]] if exclusive else vals)
    if axis is None:
        expected = np.array(acc[0])
    else:
        moved = np.moveaxis(x, axis, -1).shape
        expected = np.moveaxis(np.array(acc).reshape(moved), -1, axis)
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.int32
    assert run_op("cumsum", x, axis=axis, dtype="float64").dtype == np.float64
    t = infer_op_type("cumsum", [TensorType((N, 4), "int32")], axis=axis)
    assert t.shape == ((N, 4) if axis is not None else (t.shape[0],)) and t.dtype == "int32"
    check_gradient("cumsum", [rng.standard_normal((3, 4))], {"axis": axis, "exclusive": exclusive})


def test_cumsum_flattened_static_type():
    assert infer_op_type("cumsum", [TensorType((3, 4))]) == TensorType((12,))
    with pytest.raises(TypeCheckError, match="cumsum: axis=2 is out of range"):
        infer_op_type("cumsum", [TensorType((3, 4))], axis=2)


# ---- argsort / topk -------------------------------------------------------------------------


def sort_oracle(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Python's sorted() is stable in both directions, which is the contract we test."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape, dtype="int64")
    for idx in np.ndindex(*moved.shape[:-1]):
        line = moved[idx].tolist()
        out[idx] = sorted(range(len(line)), key=lambda i: line[i], reverse=not ascending)
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("ascending", [True, False])
def test_argsort(axis, ascending):
    x = rng.integers(0, 4, (5, 6)).astype("float32")  # many ties
    out = run_op("argsort", x, axis=axis, is_ascend=ascending, dtype="int64")
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, sort_oracle(x, axis, ascending))
    assert infer_op_type("argsort", [TensorType((N, 6))], axis=axis) == TensorType((N, 6), "int32")


@pytest.mark.parametrize("k, axis, ascending", [(2, -1, False), (3, 0, True), (0, 1, False)])
def test_topk(k, axis, ascending):
    x = rng.standard_normal((4, 5))
    values, indices = run_op("topk", x, k=k, axis=axis, is_ascend=ascending)
    order = sort_oracle(x, axis, ascending)
    kk = x.shape[axis] if k < 1 else k
    expected_idx = np.take(order, range(kk), axis=axis)
    np.testing.assert_array_equal(indices, expected_idx)
    np.testing.assert_array_equal(values, np.take_along_axis(x, expected_idx, axis=axis))
    shape = list(x.shape)
    shape[axis] = kk
    t = infer_op_type("topk", [TensorType((4, 5))], k=k, axis=axis)
    assert t == TupleType((TensorType(tuple(shape)), TensorType(tuple(shape), "int32")))
    assert infer_op_type("topk", [TensorType((4, 5))], k=k, axis=axis, ret_type="indices").dtype == "int32"
    check_gradient("topk", [x], {"k": k, "axis": axis, "is_ascend": ascending})
    check_gradient("topk", [x], {"k": k, "axis": axis, "ret_type": "values"})


def test_topk_errors():
    with pytest.raises(TypeCheckError, match=r"topk: k=6 exceeds extent 5 of axis 1 of data \(4, 5\)"):
        infer_op_type("topk", [TensorType((4, 5))], k=6)
    with pytest.raises(TypeCheckError, match="topk: ret_type must be"):
        infer_op_type("topk", [TensorType((4, 5))], ret_type="all")


@pytest.mark.parametrize(
    "name, attrs", [("mean", {"axis": 1}), ("variance", {"axis": [0, 2], "unbiased": True})]
)
def test_gradient_rules_are_shape_polymorphic(name, attrs):
    """With symbolic argument types the rules must build the same gradient as with static ones."""
    x = rng.standard_normal((3, 4, 2))
    inputs = [x] if name == "mean" else [x, np.mean(x, axis=(0, 2), keepdims=True)]
    results = []
    for symbolic in (False, True):
        params = [Var(f"a{i}") for i in range(len(inputs))]
        for p, v in zip(params, inputs):
            shape = tuple(SymDim(f"d{k}") if symbolic else d for k, d in enumerate(v.shape))
            p.set_checked_type(TensorType(shape, "float64"))
        opdef = get(name)
        c = Call(Op(name), tuple(params), opdef.make_attrs(attrs))
        out = run_op(name, *inputs, **attrs)
        g = Var("g")
        grads = opdef.gradient(c, g)
        env = {**dict(zip(params, inputs)), g: np.ones_like(out)}
        results.append([np.asarray(eval_dataflow(e, env)) for e in grads])
    for static, poly in zip(*results):
        np.testing.assert_allclose(poly, static, rtol=1e-12)


def test_exclude_with_no_axis_reduces_everything_like_relay():
    x = rng.standard_normal((2, 3))
    np.testing.assert_allclose(run_op("sum", x, exclude=True), math.fsum(x.reshape(-1).tolist()))
    assert infer_op_type("max", [TensorType((2, 3))], exclude=True) == TensorType(())
