"""Transform and indexing ops: type relations (Relay's reshape codes, symbolic dims, negative axes,
size-0 dims, errors naming op and shapes), references against hand-written NumPy expressions or
explicit loops, and gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Call, Op, Var
from autorelay.ir.types import AnyDim, SymDim, TensorType, TupleType
from autorelay.op.check import (
    check_gradient,
    eval_dataflow,
    infer_op_type,
    numerical_gradient,
    run_op,
    value_type,
)
from autorelay.op.registry import get

N, T = SymDim("n"), SymDim("t")
Q = AnyDim()
rng = np.random.default_rng(3)


def tt(*shape, dtype="float32"):
    return TensorType(shape, dtype)


# ---- reshape --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, newshape, out",
    [
        ((2, 3, 4), (6, 1, -1), (6, 1, 4)),
        ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
        ((2, 3, 4), (2, 0, 0), (2, 3, 4)),
        ((2, 3, 4), (-1,), (24,)),
        ((2, 3, 4), (0, -2), (2, 3, 4)),
        ((2, 3, 4), (-2, 1, 1), (2, 3, 4, 1, 1)),
        ((2, 3, 4), (-3, 4), (6, 4)),
        ((2, 3, 4, 5), (-3, -3), (6, 20)),
        ((2, 3, 4), (0, -3), (2, 12)),
        ((2, 3, 4), (-4, 1, 2, -2), (1, 2, 3, 4)),
        ((2, 3, 4), (2, -4, -1, 3, -2), (2, 1, 3, 4)),
        ((0, 3), (-1, 3), (0, 3)),
        ((), (1, 1), (1, 1)),
    ],
)
def test_reshape_codes(shape, newshape, out):
    assert infer_op_type("reshape", [tt(*shape)], newshape=newshape) == tt(*out)
    x = rng.standard_normal(shape)
    np.testing.assert_array_equal(run_op("reshape", x, newshape=newshape), np.reshape(x, out))
    check_gradient("reshape", [x], {"newshape": newshape})


@pytest.mark.parametrize(
    "shape, newshape, out",
    [
        ((N, 6), (0, -1, 2), (N, 3, 2)),
        ((N, 6), (-1, 6), (N, 6)),
        ((N, T, 100), (-1, 100), (Q, 100)),
        ((N, 6), (-1,), (Q,)),
        ((N, 1, 4), (0, -3), (N, 4)),
        ((N, T, 4), (-3, 0), (Q, 4)),
        ((Q, 3), (0, 3, 1), (Q, 3, 1)),
    ],
)
def test_reshape_symbolic(shape, newshape, out):
    assert infer_op_type("reshape", [tt(*shape)], newshape=newshape) == tt(*out)


@pytest.mark.parametrize(
    "shape, newshape, pattern",
    [
        (
            (2, 3),
            (4, 2),
            r"reshape: cannot reshape data of shape \(2, 3\), newshape \(4, 2\): 6 elements vs 8",
        ),
        ((2, 3), (-1, -1), r"reshape: newshape has more than one -1"),
        ((2, 3), (-1, 4), r"reshape: data of shape \(2, 3\), newshape \(-1, 4\): 6 elements do not divide"),
        ((2, 3), (0, 0, 0), r"reshape: newshape reads past the rank of the input"),
        ((6,), (-4, 4, 2), r"reshape: -4 splits extent 6 into 4 x 2"),
        ((N, 3), (0, 4), r"reshape: cannot reshape data of shape \(n, 3\)"),
    ],
)
def test_reshape_errors(shape, newshape, pattern):
    with pytest.raises(TypeCheckError, match=pattern):
        infer_op_type("reshape", [tt(*shape)], newshape=newshape)


# ---- transpose / squeeze / expand_dims / reverse ---------------------------------------------


def test_transpose():
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(run_op("transpose", x, axes=[1, -1, 0]), np.einsum("abc->bca", x))
    np.testing.assert_array_equal(run_op("transpose", x), np.einsum("abc->cba", x))
    assert infer_op_type("transpose", [tt(N, 3, 0)], axes=[2, 0, 1]) == tt(0, N, 3)
    with pytest.raises(TypeCheckError, match=r"transpose: axes=\(0, 0, 1\) is not a permutation"):
        infer_op_type("transpose", [tt(2, 3, 4)], axes=[0, 0, 1])
    check_gradient("transpose", [x], {"axes": [1, -1, 0]})


def test_squeeze():
    x = rng.standard_normal((1, 3, 1))
    assert run_op("squeeze", x).shape == (3,)
    np.testing.assert_array_equal(run_op("squeeze", x, axis=[-1]), x[:, :, 0])
    assert infer_op_type("squeeze", [tt(1, N, 1)], axis=[0]) == tt(N, 1)
    assert infer_op_type("squeeze", [tt(1, N, 1)]) == tt(N)
    with pytest.raises(TypeCheckError, match=r"squeeze: axis 1 of data \(1, 3, 1\) has extent 3, not 1"):
        infer_op_type("squeeze", [tt(1, 3, 1)], axis=[1])
    with pytest.raises(TypeCheckError, match=r"squeeze: axis=3 is out of range"):
        infer_op_type("squeeze", [tt(1, 3, 1)], axis=[3])
    check_gradient("squeeze", [x], {"axis": [0]})


@pytest.mark.parametrize(
    "axis, num, out", [(1, 2, (2, 1, 1, 3)), (-1, 1, (2, 3, 1)), (0, 0, (2, 3)), (2, 1, (2, 3, 1))]
)
def test_expand_dims(axis, num, out):
    x = rng.standard_normal((2, 3))
    y = run_op("expand_dims", x, axis=axis, num_newaxis=num)
    assert y.shape == out and np.array_equal(y.reshape(2, 3), x)
    assert infer_op_type("expand_dims", [tt(2, 3)], axis=axis, num_newaxis=num) == tt(*out)
    check_gradient("expand_dims", [x], {"axis": axis, "num_newaxis": num})


def test_expand_dims_out_of_range():
    with pytest.raises(TypeCheckError, match=r"expand_dims: axis=3 is out of range for a tensor of rank 2"):
        infer_op_type("expand_dims", [tt(2, 3)], axis=3)


def test_reverse():
    x = rng.standard_normal((2, 3))
    np.testing.assert_array_equal(run_op("reverse", x, axis=-1), x[:, ::-1])
    assert infer_op_type("reverse", [tt(N, 3)], axis=0) == tt(N, 3)
    check_gradient("reverse", [x], {"axis": 1})


# ---- concatenate / split / stack -------------------------------------------------------------


def check_tuple_input_gradient(name: str, fields: list[np.ndarray], **attrs) -> None:
    """Finite differences for an op whose single argument is a tuple of tensors."""
    opdef = get(name)
    v = Var("data")
    v.set_checked_type(value_type(tuple(fields)))
    c = Call(Op(name), (v,), opdef.make_attrs(attrs))
    out = run_op(name, tuple(fields), **attrs)
    c.set_checked_type(value_type(out))
    w = rng.standard_normal(out.shape)
    g = Var("g")
    (grad_expr,) = opdef.gradient(c, g)
    grads = eval_dataflow(grad_expr, {v: tuple(fields), g: w})
    for i in range(len(fields)):

        def objective(*xs, i=i):
            args = list(fields)
            args[i] = xs[0]
            return float(np.sum(run_op(name, tuple(args), **attrs) * w))

        np.testing.assert_allclose(grads[i], numerical_gradient(objective, [fields[i]], 0, 1e-4), rtol=1e-5)


def test_concatenate():
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 1))
    out = run_op("concatenate", (a, b), axis=-1)
    np.testing.assert_array_equal(out[:, :3], a)
    np.testing.assert_array_equal(out[:, 3:], b)
    tup = TupleType((tt(N, T, 100), tt(N, T, 100)))
    assert infer_op_type("concatenate", [tup], axis=-1) == tt(N, T, 200)
    assert infer_op_type("concatenate", [TupleType((tt(N, 3), tt(2, 3)))], axis=0) == tt(Q, 3)
    assert infer_op_type("concatenate", [TupleType((tt(Q, 3), tt(2, 0)))], axis=1) == tt(2, 3)
    with pytest.raises(
        TypeCheckError,
        match=r"concatenate: data.1 of shape \(3, 1\) does not match data.0 "
        r"of shape \(2, 3\) on axis 0",
    ):
        infer_op_type("concatenate", [TupleType((tt(2, 3), tt(3, 1)))], axis=1)
    with pytest.raises(TypeCheckError, match=r"concatenate: data.1 is .*int32.*ranks and dtypes must match"):
        infer_op_type("concatenate", [TupleType((tt(2, 3), tt(2, 3, dtype="int32")))])
    check_tuple_input_gradient("concatenate", [a, b, rng.standard_normal((2, 2))], axis=1)


@pytest.mark.parametrize(
    "spec, axis, sizes",
    [(3, 0, [2, 2, 2]), ([1, 4], 0, [1, 3, 2]), ([2, 9], -2, [2, 4, 0]), (1, 1, [3])],
)
def test_split(spec, axis, sizes):
    x = rng.standard_normal((6, 3))
    parts = run_op("split", x, indices_or_sections=spec, axis=axis)
    assert [p.shape[axis] for p in parts] == sizes
    np.testing.assert_array_equal(np.concatenate(parts, axis=axis), x)
    t = infer_op_type("split", [tt(6, 3)], indices_or_sections=spec, axis=axis)
    assert t == TupleType(tuple(TensorType(p.shape) for p in parts))
    check_gradient("split", [x], {"indices_or_sections": spec, "axis": axis})


def test_split_symbolic_and_errors():
    t = infer_op_type("split", [tt(N, 4)], indices_or_sections=[1, 3])
    assert t == TupleType((tt(1, 4), tt(2, 4), tt(Q, 4)))
    assert infer_op_type("split", [tt(N, 4)], indices_or_sections=2) == TupleType((tt(Q, 4), tt(Q, 4)))
    with pytest.raises(TypeCheckError, match=r"split: axis 0 of data \(5, 4\) does not split into 2"):
        infer_op_type("split", [tt(5, 4)], indices_or_sections=2)


def test_stack():
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    out = run_op("stack", (a, b), axis=-1)
    assert out.shape == (2, 3, 2) and np.array_equal(out[..., 0], a) and np.array_equal(out[..., 1], b)
    assert infer_op_type("stack", [TupleType((tt(N, 3), tt(N, 3)))], axis=1) == tt(N, 2, 3)
    with pytest.raises(TypeCheckError, match=r"stack: data.1 of shape \(2, 4\) does not match"):
        infer_op_type("stack", [TupleType((tt(2, 3), tt(2, 4)))])
    check_tuple_input_gradient("stack", [a, b], axis=1)


# ---- tile / repeat --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, reps", [((2, 3), (2, 1)), ((2, 3), (2, 1, 3)), ((2, 3), (3,)), ((0, 2), (2, 2))]
)
def test_tile(shape, reps):
    x = rng.standard_normal(shape)
    out = run_op("tile", x, reps=reps)
    nd = max(len(reps), x.ndim)
    xs = x.reshape((1,) * (nd - x.ndim) + shape)
    r = (1,) * (nd - len(reps)) + reps
    for idx in np.ndindex(*out.shape):
        assert out[idx] == xs[tuple(i % d for i, d in zip(idx, xs.shape))]
    assert out.shape == tuple(a * b for a, b in zip(xs.shape, r))
    assert infer_op_type("tile", [tt(*shape)], reps=reps) == tt(*out.shape)
    if x.size:
        check_gradient("tile", [x], {"reps": reps})


def test_repeat():
    x = rng.standard_normal((2, 3))
    out = run_op("repeat", x, repeats=2, axis=-1)
    np.testing.assert_array_equal(out, [[v for v in row for _ in range(2)] for row in x])
    assert infer_op_type("repeat", [tt(N, 3)], repeats=2, axis=0) == tt(Q, 3)
    assert infer_op_type("repeat", [tt(N, 3)], repeats=2, axis=1) == tt(N, 6)
    check_gradient("repeat", [x], {"repeats": 3, "axis": 0})
    assert infer_op_type("tile", [tt(N, 3)], reps=[1, 2]) == tt(N, 6)


# ---- layout_transform -----------------------------------------------------------------------


def test_layout_transform_nchw_nhwc():
    x = rng.standard_normal((2, 3, 4, 5))
    y = run_op("layout_transform", x, src_layout="NCHW", dst_layout="NHWC")
    np.testing.assert_array_equal(y, np.einsum("nchw->nhwc", x))
    back = run_op("layout_transform", y, src_layout="NHWC", dst_layout="NCHW")
    np.testing.assert_array_equal(back, x)
    assert infer_op_type("layout_transform", [tt(N, 3, 4, 5)], src_layout="NCHW", dst_layout="NHWC") == tt(
        N, 4, 5, 3
    )


def test_layout_transform_channel_blocking():
    x = rng.standard_normal((2, 16, 3, 2))
    y = run_op("layout_transform", x, src_layout="NCHW", dst_layout="NCHW8c")
    assert y.shape == (2, 2, 3, 2, 8)
    for n, c, h, w in np.ndindex(*x.shape):
        assert y[n, c // 8, h, w, c % 8] == x[n, c, h, w]
    z = run_op("layout_transform", y, src_layout="NCHW8c", dst_layout="NHWC4c")
    for n, c, h, w in np.ndindex(*x.shape):
        assert z[n, h, w, c // 4, c % 4] == x[n, c, h, w]
    np.testing.assert_array_equal(run_op("layout_transform", y, src_layout="NCHW8c", dst_layout="NCHW"), x)
    t = infer_op_type("layout_transform", [tt(N, 16, 3, 2)], src_layout="NCHW", dst_layout="NCHW8c")
    assert t == tt(N, 2, 3, 2, 8)
    with pytest.raises(
        TypeCheckError, match=r"layout_transform: .*extent 12 of axis C is not divisible by .*8"
    ):
        infer_op_type("layout_transform", [tt(1, 12, 3, 3)], src_layout="NCHW", dst_layout="NCHW8c")
    with pytest.raises(TypeCheckError, match=r"layout_transform: .*NCHW.*rank"):
        infer_op_type("layout_transform", [tt(1, 12, 3)], src_layout="NCHW", dst_layout="NHWC")
    check_gradient("layout_transform", [x[:1, :8]], {"src_layout": "NCHW", "dst_layout": "NCHW4c"})


# ---- strided_slice / take / gather / one_hot --------------------------------------------------


@pytest.mark.parametrize(
    "attrs, oracle",
    [
        ({"begin": [1, 0], "end": [3, 4], "strides": [1, 2]}, lambda x: x[1:3, 0:4:2]),
        ({"begin": [-1], "end": [0], "strides": [-1]}, lambda x: x[-1:0:-1]),
        ({"begin": [2], "end": [-100], "strides": [-2]}, lambda x: x[2::-2]),
        ({"begin": [1], "end": [2**31 - 1], "axes": [1]}, lambda x: x[:, 1:]),
        ({"begin": [1, 1], "end": [2, -1], "slice_mode": "size"}, lambda x: x[1:3, 1:]),
        ({"begin": [3], "end": [1]}, lambda x: x[3:1]),
    ],
)
def test_strided_slice(attrs, oracle):
    x = rng.standard_normal((4, 5))
    out = run_op("strided_slice", x, **attrs)
    np.testing.assert_array_equal(out, oracle(x))
    assert infer_op_type("strided_slice", [tt(4, 5)], **attrs) == tt(*oracle(x).shape)
    check_gradient("strided_slice", [x], attrs)


def test_strided_slice_symbolic_and_errors():
    t = infer_op_type("strided_slice", [tt(N, 5)], begin=[0, 1], end=[2**31 - 1, 3])
    assert t == tt(N, 2)
    assert infer_op_type("strided_slice", [tt(N, 5)], begin=[1], end=[3]) == tt(Q, 5)
    with pytest.raises(TypeCheckError, match=r"strided_slice: stride 0 on axis 0 \(data \(4, 5\)\)"):
        infer_op_type("strided_slice", [tt(4, 5)], begin=[0], end=[1], strides=[0])


@pytest.mark.parametrize("mode", ["clip", "wrap", "fast"])
def test_take(mode):
    x = rng.standard_normal((3, 4))
    ind = np.array([[0, 3], [-1, 5]]) if mode != "fast" else np.array([[0, 3], [1, 2]])
    n = x.shape[1]
    fixed = {"clip": np.clip(ind, 0, n - 1), "wrap": ind % n, "fast": ind}[mode]
    out = run_op("take", x, ind, axis=1, mode=mode)
    for i, a, b in np.ndindex(3, 2, 2):
        assert out[i, a, b] == x[i, fixed[a, b]]
    flat = run_op("take", x, ind, mode=mode)
    fixed_flat = {"clip": np.clip(ind, 0, 11), "wrap": ind % 12, "fast": ind}[mode]
    np.testing.assert_array_equal(flat, x.reshape(-1)[fixed_flat])
    assert infer_op_type("take", [tt(N, 4), tt(2, 2, dtype="int32")], axis=1) == tt(N, 2, 2)
    assert infer_op_type("take", [tt(N, 4), tt(7, dtype="int64")]) == tt(7)
    check_gradient("take", [x, ind], {"axis": 1, "mode": mode}, wrt=[0])
    check_gradient("take", [x, ind], {"axis": -2, "mode": "clip" if mode == "fast" else mode}, wrt=[0])
    check_gradient("take", [x, ind], {"mode": mode}, wrt=[0])


def test_take_fast_refuses_indices_it_does_not_promise_to_handle():
    """`fast` assumes indices in range (the kernels clamp rather than check): the oracle refuses a
    negative or too large one instead of answering as NumPy would (a negative index wraps there)."""
    x = rng.standard_normal((5, 3))
    for bad, shown in (([-1, 2], -1), ([7, 2], 7)):
        with pytest.raises(IndexError, match=rf"mode 'fast' needs indices in \[0, 5\), got {shown}"):
            run_op("take", x, np.array(bad), axis=0, mode="fast")


def test_take_errors():
    with pytest.raises(
        TypeCheckError, match=r"take: argument indices must have an integer dtype, got float32"
    ):
        infer_op_type("take", [tt(3, 4), tt(2)], axis=0)
    with pytest.raises(TypeCheckError, match=r"take: axis=2 is out of range"):
        infer_op_type("take", [tt(3, 4), tt(2, dtype="int32")], axis=2)


def test_gather():
    x = rng.standard_normal((3, 4))
    ind = rng.integers(0, 3, (2, 4))
    out = run_op("gather", x, ind, axis=0)
    for i, j in np.ndindex(*ind.shape):
        assert out[i, j] == x[ind[i, j], j]
    assert infer_op_type("gather", [tt(3, 4), tt(2, 4, dtype="int32")], axis=0) == tt(2, 4)
    with pytest.raises(TypeCheckError, match=r"gather: indices of shape \(2,\) must have the rank of data"):
        infer_op_type("gather", [tt(3, 4), tt(2, dtype="int32")], axis=0)
    check_gradient("gather", [x, rng.integers(0, 3, (5, 4))], {"axis": 0}, wrt=[0])
    check_gradient("gather", [x, rng.integers(0, 4, (3, 2))], {"axis": -1}, wrt=[0])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    ind = np.array([[0, 2, 5], [1, -1, 2]])
    out = run_op("one_hot", ind, np.array(3.0), np.array(-1.0), depth=4, axis=axis, dtype="float64")
    eye = np.vstack([np.eye(4), np.zeros((1, 4))])  # out-of-range rows are all off
    dense = eye[np.where((ind >= 0) & (ind < 4), ind, 4)] * 4 - 1  # 1 -> 3, 0 -> -1
    np.testing.assert_array_equal(out, np.moveaxis(dense, -1, axis if axis >= 0 else 2))
    t = infer_op_type("one_hot", [tt(N, 3, dtype="int32"), tt(), tt()], depth=4, axis=axis, dtype="int8")
    assert t == tt(*{-1: (N, 3, 4), 0: (4, N, 3), 1: (N, 4, 3)}[axis], dtype="int8")
    check_gradient(
        "one_hot",
        [ind, np.array(3.0), np.array(-1.0)],
        {"depth": 4, "axis": axis, "dtype": "float64"},
        wrt=[1, 2],
    )


def test_one_hot_errors():
    with pytest.raises(TypeCheckError, match=r"one_hot: on_value must be a scalar, got shape \(2,\)"):
        infer_op_type("one_hot", [tt(3, dtype="int32"), tt(2), tt()], depth=4)


def test_layout_transform_kernel_blocking():
    w = rng.standard_normal((8, 4, 3, 3))
    y = run_op("layout_transform", w, src_layout="OIHW", dst_layout="OIHW2i4o")
    assert y.shape == (2, 2, 3, 3, 2, 4)
    for o, i, h, x in np.ndindex(*w.shape):
        assert y[o // 4, i // 2, h, x, i % 2, o % 4] == w[o, i, h, x]
    with pytest.raises(TypeCheckError, match=r"layout_transform: dst_layout='NCHW': unexpected axis N"):
        infer_op_type("layout_transform", [tt(8, 4, 3, 3)], src_layout="OIHW", dst_layout="NCHW")
