"""Elementwise, broadcasting and helper ops: type relations (incl. symbolic and size-0 shapes and
errors), references against independent oracles (Python `math`/`operator` on each element,
SciPy), and gradient rules against finite differences."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from scipy import special

from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Call, Op, Var
from autorelay.ir.types import AnyDim, SymDim, TensorType
from autorelay.op.check import check_gradient, eval_dataflow, infer_op_type, run_op, value_type
from autorelay.op.registry import all_ops, get
from autorelay.op.shape_utils import dims_equal, fmt_shape, merge_dims, normalize_axes, normalize_axis, prod

N, M = SymDim("n"), SymDim("m")
rng = np.random.default_rng(42)


def elementwise(fn, *arrays, dtype):
    """Apply a Python scalar function element by element (after NumPy broadcasting)."""
    b = np.broadcast_arrays(*arrays)
    flat = [fn(*(v.item() for v in vals)) for vals in zip(*(a.reshape(-1) for a in b))]
    return np.array(flat, dtype=dtype).reshape(b[0].shape)


# ---- unary ----------------------------------------------------------------------------------

UNARY = {
    # name: (python oracle, input sampler)
    "negative": (operator.neg, lambda s: rng.standard_normal(s)),
    "abs": (abs, lambda s: rng.standard_normal(s)),
    "exp": (math.exp, lambda s: rng.standard_normal(s)),
    "log": (math.log, lambda s: rng.uniform(0.1, 3, s)),
    "sqrt": (math.sqrt, lambda s: rng.uniform(0.1, 3, s)),
    "rsqrt": (lambda v: 1 / math.sqrt(v), lambda s: rng.uniform(0.1, 3, s)),
    "tanh": (math.tanh, lambda s: rng.standard_normal(s)),
    "sigmoid": (lambda v: 1 / (1 + math.exp(-v)), lambda s: rng.standard_normal(s) * 3),
    "erf": (math.erf, lambda s: rng.standard_normal(s)),
    "sin": (math.sin, lambda s: rng.standard_normal(s)),
    "cos": (math.cos, lambda s: rng.standard_normal(s)),
    "tan": (math.tan, lambda s: rng.uniform(-1.2, 1.2, s)),
    "atan": (math.atan, lambda s: rng.standard_normal(s) * 3),
    "log2": (math.log2, lambda s: rng.uniform(0.1, 3, s)),
    "log10": (math.log10, lambda s: rng.uniform(0.1, 3, s)),
    "trunc": (math.trunc, lambda s: rng.standard_normal(s) * 3),
    "floor": (math.floor, lambda s: rng.standard_normal(s) * 3),
    "ceil": (math.ceil, lambda s: rng.standard_normal(s) * 3),
    "round": (round, lambda s: np.concatenate([rng.standard_normal(s).reshape(-1) * 3, [0.5, 1.5, -2.5]])),
    "sign": (lambda v: (v > 0) - (v < 0), lambda s: rng.standard_normal(s)),
    "copy": (lambda v: v, lambda s: rng.standard_normal(s)),
    "zeros_like": (lambda v: 0.0, lambda s: rng.standard_normal(s)),
    "ones_like": (lambda v: 1.0, lambda s: rng.standard_normal(s)),
}
SMOOTH = ["negative", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos", "copy"]
SMOOTH += ["tan", "atan", "log2", "log10"]


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_reference(name, dtype):
    oracle, sample = UNARY[name]
    x = sample((3, 4)).astype(dtype)
    out = run_op(name, x)
    assert out.dtype == np.dtype(dtype) and out.shape == x.shape
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, elementwise(oracle, x, dtype="float64"), rtol=tol, atol=tol)


def test_unary_integer_and_bool_ops():
    x = np.array([-3, 0, 7], dtype="int32")
    for name, expected in [
        ("negative", [3, 0, -7]),
        ("abs", [3, 0, 7]),
        ("sign", [-1, 0, 1]),
        ("floor", [-3, 0, 7]),
        ("round", [-3, 0, 7]),
    ]:
        out = run_op(name, x)
        assert out.dtype == np.int32 and out.tolist() == expected, name
    assert run_op("logical_not", np.array([True, False])).tolist() == [False, True]
    assert run_op("erf", np.array([0.5], "float32")).dtype == np.float32  # scipy keeps the dtype
    np.testing.assert_allclose(run_op("erf", np.array([0.5])), special.erf(0.5))


def test_float_classification():
    x = np.array([1.0, np.nan, np.inf, -np.inf], "float32")
    for name, expected in [("isnan", [0, 1, 0, 0]), ("isinf", [0, 0, 1, 1]), ("isfinite", [1, 0, 0, 0])]:
        out = run_op(name, x)
        assert out.dtype == np.bool_ and out.tolist() == [bool(v) for v in expected], name
        assert infer_op_type(name, [TensorType((N, 2))]) == TensorType((N, 2), "bool")


@pytest.mark.parametrize("shape", [(), (0, 3), (N, 1, AnyDim())])
@pytest.mark.parametrize("name", ["exp", "negative", "copy", "zeros_like"])
def test_unary_type_is_identity(name, shape):
    t = TensorType(shape, "float16")
    assert infer_op_type(name, [t]) == t


@pytest.mark.parametrize("name, dtype", [("exp", "int32"), ("sqrt", "bool"), ("logical_not", "float32")])
def test_unary_dtype_errors(name, dtype):
    with pytest.raises(TypeCheckError, match=rf"{name}: .*data.*{dtype}"):
        infer_op_type(name, [TensorType((2, 3), dtype)])


@pytest.mark.parametrize("name", SMOOTH)
def test_unary_gradient(name):
    _, sample = UNARY[name]
    x = sample((2, 3))
    if name == "abs":
        x = x + np.sign(x) * 0.1  # keep away from the kink
    check_gradient(name, [x])


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc", "sign", "zeros_like", "ones_like"])
def test_piecewise_constant_gradient_is_zero(name):
    check_gradient(name, [rng.uniform(0.1, 0.4, (2, 3)) + np.arange(3)])


# ---- binary ---------------------------------------------------------------------------------

BINARY = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
    "power": operator.pow,
    "maximum": max,
    "minimum": min,
    "mod": math.fmod,
    "floor_mod": operator.mod,
    "floor_divide": lambda a, b: math.floor(a / b),
}
COMPARE = {
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3))])
def test_binary_reference_float(name, shapes):
    a = rng.uniform(0.5, 3, shapes[0])
    b = rng.uniform(0.5, 3, shapes[1])
    out = run_op(name, a, b)
    expected = elementwise(BINARY[name], a, b, dtype="float64")
    assert out.shape == expected.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-12)


INT_ORACLE = {
    "divide": lambda a, b: math.trunc(a / b),  # truncation toward zero, like TVM's truncdiv
    "mod": lambda a, b: int(math.fmod(a, b)),
    "floor_divide": operator.floordiv,
    "floor_mod": operator.mod,
    "add": operator.add,
    "multiply": operator.mul,
    "maximum": max,
}


@pytest.mark.parametrize("name", sorted(INT_ORACLE))
def test_binary_reference_int_stays_int(name):
    a = np.array([[-7, -6, 0, 5, 7, 9]], dtype="int32")
    b = np.array([[2], [-3]], dtype="int32")
    out = run_op(name, a, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, elementwise(INT_ORACLE[name], a, b, dtype="int64"))


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons_return_bool(name):
    a = rng.integers(0, 3, (4, 3)).astype("float32")
    b = rng.integers(0, 3, (3,)).astype("float32")
    out = run_op(name, a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, elementwise(COMPARE[name], a, b, dtype="bool"))
    assert infer_op_type(name, [TensorType((4, 3)), TensorType((3,))]) == TensorType((4, 3), "bool")


@pytest.mark.parametrize(
    "name, fn", [("logical_and", operator.and_), ("logical_or", operator.or_), ("logical_xor", operator.xor)]
)
def test_logical(name, fn):
    a = np.array([[True, False]])
    b = np.array([[True], [False]])
    np.testing.assert_array_equal(run_op(name, a, b), elementwise(fn, a, b, dtype="bool"))
    with pytest.raises(TypeCheckError, match=name):
        infer_op_type(name, [TensorType((2,), "int32"), TensorType((2,), "int32")])


@pytest.mark.parametrize(
    "lhs, rhs, out",
    [
        ((2, 3), (3,), (2, 3)),
        ((4, 1, 3), (2, 1), (4, 2, 3)),
        ((0, 3), (1, 3), (0, 3)),
        ((0,), (1,), (0,)),
        ((), (2, 5), (2, 5)),
        ((N, 1), (1, 5), (N, 5)),
        ((N, 3), (N, 1), (N, 3)),
        ((N,), (M,), (AnyDim(),)),
        ((N,), (3,), (3,)),
        ((AnyDim(), 1), (4, 7), (4, 7)),
    ],
)
def test_broadcast_type_relation(lhs, rhs, out):
    assert infer_op_type("add", [TensorType(lhs), TensorType(rhs)]) == TensorType(out)
    assert infer_op_type("less", [TensorType(rhs), TensorType(lhs)]).shape == out


@pytest.mark.parametrize(
    "lhs, rhs, texts",
    [
        ((2, 3), (4, 3), ("(2, 3)", "(4, 3)")),
        ((0,), (2,), ("(0,)", "(2,)")),
        ((3, N), (2, 1), ("(3, n)", "(2, 1)")),
    ],
)
def test_broadcast_mismatch_names_op_and_shapes(lhs, rhs, texts):
    with pytest.raises(TypeCheckError) as err:
        infer_op_type("multiply", [TensorType(lhs), TensorType(rhs)])
    assert str(err.value).startswith("multiply: cannot broadcast lhs of shape " + texts[0])
    assert "rhs of shape " + texts[1] in str(err.value)


def test_binary_dtype_mismatch():
    with pytest.raises(TypeCheckError, match=r"add: lhs has dtype float32 but rhs has dtype int32"):
        infer_op_type("add", [TensorType((2,)), TensorType((2,), "int32")])


GRAD_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((3, 1), (1, 2))]


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum"])
@pytest.mark.parametrize("shapes", GRAD_SHAPES)
def test_binary_gradient(name, shapes):
    """Against a numerical gradient. The inputs come from two offset grids in [0.5, 2], so no element
    of `a` ties one of `b` (maximum's and minimum's derivative jumps there; values drawn from a shared
    generator in whatever order the test workers ran sometimes fell within the step of one)."""
    gen = np.random.default_rng(GRAD_SHAPES.index(shapes))
    a = 0.5 + 0.25 * gen.integers(0, 7, shapes[0])
    b = 0.625 + 0.25 * gen.integers(0, 6, shapes[1])
    check_gradient(name, [a, b])


def test_floor_divide_and_comparison_gradients_are_zero():
    check_gradient("floor_divide", [np.array([[2.3, -1.4]]), np.array([0.7, 1.1])])
    a, b = Var("a", TensorType((2, 3))), Var("b", TensorType((3,)))
    for p, v in ((a, np.ones((2, 3))), (b, np.ones(3))):
        p.set_checked_type(value_type(v))
    grads = get("less").gradient(Call(Op("less"), (a, b)), Var("g"))
    env = {a: np.ones((2, 3)), b: np.ones(3)}
    assert [np.asarray(eval_dataflow(e, env)).tolist() for e in grads] == [[[0.0] * 3] * 2, [0.0] * 3]


@pytest.mark.parametrize("name", ["mod", "floor_mod"])
def test_mod_gradient(name):
    b = rng.uniform(1, 2, (3,))
    a = b * (np.array([[2], [-3]]) + rng.uniform(0.2, 0.8, (2, 3)))  # quotients away from integers
    check_gradient(name, [a, b])


# ---- where / cast / clip / constants / broadcast helpers ------------------------------------


def test_where():
    c = rng.standard_normal((3, 1)) > 0
    x = rng.standard_normal((1, 4))
    y = rng.standard_normal((4,))
    expected = elementwise(lambda cc, a, b: a if cc else b, c, x, y, dtype="float64")
    np.testing.assert_array_equal(run_op("where", c, x, y), expected)
    t = infer_op_type("where", [TensorType((N, 1), "bool"), TensorType((1, 4)), TensorType((4,))])
    assert t == TensorType((N, 4))
    with pytest.raises(TypeCheckError, match=r"where: .*condition.*\(2,\).*\(3,\)"):
        infer_op_type("where", [TensorType((2,), "bool"), TensorType((3,)), TensorType((3,))])
    # A non-bool condition means "nonzero is true", as in Relay.
    assert run_op("where", np.array([0, 2, -1], "int32"), np.ones(3), np.zeros(3)).tolist() == [0, 1, 1]
    with pytest.raises(TypeCheckError, match=r"where: x has dtype float32 but y has dtype int32"):
        infer_op_type("where", [TensorType((3,)), TensorType((3,)), TensorType((3,), "int32")])
    check_gradient("where", [c, x, y], wrt=[1, 2])


def test_cast_and_cast_like():
    x = np.array([-1.7, 0.2, 2.9])
    np.testing.assert_array_equal(run_op("cast", x, dtype="int32"), [math.trunc(v) for v in x])
    assert run_op("cast_like", x, np.zeros(1, "float16")).dtype == np.float16
    assert infer_op_type("cast", [TensorType((N, 2))], dtype="int8") == TensorType((N, 2), "int8")
    with pytest.raises(TypeCheckError, match="cast: unknown dtype 'float8'"):
        infer_op_type("cast", [TensorType((2,))], dtype="float8")
    check_gradient("cast", [x.astype("float32")], {"dtype": "float64"}, atol=1e-2)


def test_clip():
    x = rng.standard_normal((4, 5))
    np.testing.assert_array_equal(
        run_op("clip", x, a_min=-0.5, a_max=0.5), elementwise(lambda v: min(max(v, -0.5), 0.5), x, dtype="f8")
    )
    with pytest.raises(TypeCheckError, match=r"clip: a_min=2 is greater than a_max=1"):
        infer_op_type("clip", [TensorType((2,))], a_min=2, a_max=1)
    x = np.where(np.abs(np.abs(x) - 0.5) < 0.05, 0.0, x)  # keep away from the clip points
    check_gradient("clip", [x], {"a_min": -0.5, "a_max": 0.5})


def test_constant_fills():
    assert run_op("zeros", shape=[2, 0], dtype="int32").shape == (2, 0)
    np.testing.assert_array_equal(run_op("ones", shape=(2, 3)), [[1.0] * 3] * 2)
    out = run_op("full", np.array(7, "int8"), shape=[3])
    assert out.dtype == np.int8 and out.tolist() == [7, 7, 7]
    assert run_op("full", np.array(2.5), shape=[2], dtype="float16").dtype == np.float16
    assert infer_op_type("full", [TensorType((), "int64")], shape=[4, 1]) == TensorType((4, 1), "int64")
    assert infer_op_type("zeros", [], shape=[5], dtype="bool") == TensorType((5,), "bool")
    with pytest.raises(TypeCheckError, match=r"full: fill_value must be a scalar, got shape \(2,\)"):
        infer_op_type("full", [TensorType((2,))], shape=[3])
    with pytest.raises(TypeCheckError, match=r"zeros: shape=\(2, -1\) must be"):
        infer_op_type("zeros", [], shape=[2, -1])
    np.testing.assert_array_equal(run_op("full_like", np.zeros((2, 2), "int32"), np.array(3)), [[3, 3]] * 2)
    check_gradient("full", [np.array(1.5)], {"shape": [2, 3]})
    check_gradient("full_like", [np.ones((2, 2)), np.array(1.5)], wrt=[1])


def test_broadcast_to_and_like():
    x = rng.standard_normal((3, 1))
    out = run_op("broadcast_to", x, shape=[2, 3, 4])
    np.testing.assert_array_equal(out, np.tile(x[None], (2, 1, 4)))
    assert infer_op_type("broadcast_to", [TensorType((3, 1))], shape=[2, 3, 4]) == TensorType((2, 3, 4))
    with pytest.raises(TypeCheckError, match=r"broadcast_to: .*\(3, 1\).*\(2, 4\)"):
        infer_op_type("broadcast_to", [TensorType((3, 1))], shape=[2, 4])
    with pytest.raises(TypeCheckError, match=r"broadcast_to: .*\(3, 1\).*\(3,\)"):
        infer_op_type("broadcast_to", [TensorType((3, 1))], shape=[3])
    like = TensorType((N, 3, 4))
    assert infer_op_type("broadcast_to_like", [TensorType((3, 1)), like]) == like
    check_gradient("broadcast_to", [x], {"shape": [2, 3, 4]})
    check_gradient("broadcast_to_like", [x, np.zeros((2, 3, 4))], wrt=[0])


@pytest.mark.parametrize("data, like", [((2, 3, 4), (3, 1)), ((2, 3), (2, 3)), ((5, 0), (1, 0)), ((4,), ())])
def test_collapse_sum_like(data, like):
    x = rng.standard_normal(data)
    out = run_op("collapse_sum_like", x, np.zeros(like))
    # Oracle: the adjoint of broadcasting, as <x, broadcast(e_i)> for each unit vector e_i of `like`.
    expected = np.zeros(like)
    for idx in np.ndindex(*like):
        e = np.zeros(like)
        e[idx] = 1
        expected[idx] = np.sum(x * np.broadcast_to(e, data))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert infer_op_type("collapse_sum_like", [TensorType(data), TensorType(like)]) == TensorType(like)
    check_gradient("collapse_sum_like", [x, np.zeros(like)], wrt=[0])


def test_collapse_sum_like_error():
    with pytest.raises(TypeCheckError, match=r"collapse_sum_like: .*\(4,\).*\(2, 3\)"):
        infer_op_type("collapse_sum_like", [TensorType((2, 3)), TensorType((4,))])


def test_reshape_like():
    x = rng.standard_normal((2, 6))
    np.testing.assert_array_equal(run_op("reshape_like", x, np.zeros((3, 4))), x.reshape(3, 4))
    with pytest.raises(TypeCheckError, match=r"reshape_like: .*\(2, 6\) \(12 elements\).*\(5,\) \(5"):
        infer_op_type("reshape_like", [TensorType((2, 6)), TensorType((5,))])
    assert infer_op_type("reshape_like", [TensorType((N, 6)), TensorType((N, 2, 3))]) == TensorType((N, 2, 3))
    check_gradient("reshape_like", [x, np.zeros((3, 4))], wrt=[0])


@pytest.mark.parametrize(
    "data, like, attrs, out",
    [
        ((2, 6, 5), (3, 4), {"lhs_begin": 0, "lhs_end": 2}, (3, 4, 5)),
        ((2, 6, 5), (7, 3, 2), {"lhs_begin": 1, "lhs_end": -1, "rhs_begin": 1}, (2, 3, 2, 5)),
        ((2, 6), (1, 12, 9), {"rhs_end": 2}, (1, 12)),
    ],
)
def test_reshape_like_ranges(data, like, attrs, out):
    x = rng.standard_normal(data)
    y = run_op("reshape_like", x, np.zeros(like), **attrs)
    assert y.shape == out and np.array_equal(y.reshape(-1), x.reshape(-1))
    assert infer_op_type("reshape_like", [TensorType(data), TensorType(like)], **attrs) == TensorType(out)
    check_gradient("reshape_like", [x, np.zeros(like)], attrs, wrt=[0])


def test_cast_like_gradient():
    check_gradient("cast_like", [rng.standard_normal((2, 3)), np.zeros((1,), "float32")], wrt=[0], atol=1e-2)


FAMILY_MODULES = {
    "autorelay.op.elemwise", "autorelay.op.elemwise_binary", "autorelay.op.broadcast",
    "autorelay.op.broadcast_like", "autorelay.op.reduce", "autorelay.op.reduce_sort",
    "autorelay.op.transform", "autorelay.op.transform_join", "autorelay.op.transform_index",
}  # fmt: skip
# Ops whose outputs are integers/bools, indices or bit patterns: no gradient rule by design.
NON_DIFFERENTIABLE = {
    "logical_not", "logical_and", "logical_or", "logical_xor", "isnan", "isinf", "isfinite",
    "all", "any", "argmax", "argmin", "argsort", "reinterpret",
}  # fmt: skip


def test_every_family_op_has_reference_and_gradient():
    ours = [op for op in all_ops() if op.type_rel.__module__ in FAMILY_MODULES]
    names = {op.name for op in ours}
    assert {"add", "where", "sum", "topk", "reshape", "concatenate", "strided_slice", "one_hot"} <= names
    assert len(ours) >= 80
    for op in ours:
        assert op.reference is not None, op.name
        assert (op.gradient is None) == (op.name in NON_DIFFERENTIABLE), op.name


def test_shape_utils_helpers():
    assert normalize_axis("op", -1, 3) == 2 and normalize_axis("op", 3, 3, extra=1) == 3
    assert normalize_axes("op", [-1, 0], 3) == [0, 2] and normalize_axes("op", 1, 3, exclude=True) == [0, 2]
    with pytest.raises(TypeCheckError, match=r"op: axis must be an integer, got 1.5"):
        normalize_axis("op", 1.5, 3)
    assert prod([2, 3]) == 6 and prod([N, 2]) is None and prod([N, 0]) == 0 and prod([]) == 1
    assert dims_equal(N, SymDim("n")) and not dims_equal(AnyDim(), AnyDim()) and not dims_equal(2, 3)
    assert merge_dims(AnyDim(), N) == N and merge_dims(N, 4) == 4
    assert fmt_shape((N, AnyDim(), 3)) == "(n, ?, 3)" and fmt_shape((5,)) == "(5,)" and fmt_shape(()) == "()"
