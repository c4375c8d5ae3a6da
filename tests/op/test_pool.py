"""Pooling against naive loops, shape relations and finite-difference gradients."""

from __future__ import annotations

import numpy as np
import pytest
from pool_oracle import naive_pool

from autorelay.errors import TypeCheckError
from autorelay.ir.types import AnyDim, SymDim, TensorType
from autorelay.op.check import check_gradient, infer_op_type, run_op

RNG = np.random.default_rng(1)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


CASES = [
    dict(k=(2, 2), s=(2, 2)),
    dict(k=(3, 3), s=(1, 1), pad=(1, 1, 1, 1)),
    dict(k=(3, 2), s=(2, 3), pad=(1, 0, 0, 1), ceil=True),
    dict(k=(2, 2), s=(1, 2), dil=(2, 1), ceil=True),
    dict(k=(3, 3), s=(2, 2), pad=(1, 1, 1, 1), ceil=True, include_pad=True),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_matches_naive_loop(kind, case):
    x = rand(2, 3, 7, 8)
    attrs = dict(pool_size=case["k"], strides=case["s"], padding=case.get("pad", (0, 0, 0, 0)),
                 dilation=case.get("dil", (1, 1)), ceil_mode=case.get("ceil", False))
    if kind == "avg":
        attrs["count_include_pad"] = case.get("include_pad", False)
    got = run_op(f"nn.{kind}_pool2d", x, **attrs)
    ref = naive_pool(x, kind, case["k"], case["s"], case.get("pad", (0, 0, 0, 0)), case.get("dil", (1, 1)),
                     case.get("ceil", False), case.get("include_pad", False))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert infer_op_type(f"nn.{kind}_pool2d", [TensorType(x.shape)], **attrs) == TensorType(ref.shape)


def test_pool_layouts_nhwc_and_blocked():
    x = rand(1, 8, 6, 6)
    ref = naive_pool(x, "max", (3, 3), (2, 2), (1, 1, 1, 1))
    got = run_op("nn.max_pool2d", x.transpose(0, 2, 3, 1), pool_size=3, strides=2, padding=1, layout="NHWC")
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1))
    xb = x.reshape(1, 2, 4, 6, 6).transpose(0, 1, 3, 4, 2)
    got = run_op("nn.avg_pool2d", xb, pool_size=2, strides=2, layout="NCHW4c")
    ref = naive_pool(x, "avg", (2, 2), (2, 2))
    np.testing.assert_allclose(got, ref.reshape(1, 2, 4, 3, 3).transpose(0, 1, 3, 4, 2), rtol=1e-5, atol=1e-6)
    assert infer_op_type("nn.avg_pool2d", [TensorType(xb.shape)], pool_size=2, strides=2,
                         layout="NCHW4c").shape == (1, 2, 3, 3, 4)


def test_global_and_adaptive_pooling():
    x = rand(2, 3, 5, 7)
    np.testing.assert_allclose(run_op("nn.global_avg_pool2d", x), x.mean(axis=(2, 3), keepdims=True),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_op("nn.global_max_pool2d", x.transpose(0, 2, 3, 1), layout="NHWC"),
                               x.max(axis=(2, 3), keepdims=True).transpose(0, 2, 3, 1))
    got = run_op("nn.adaptive_avg_pool2d", x, output_size=(2, 3))
    # bins of 5 rows into 2: [0, 3), [2, 5); 7 columns into 3: [0, 3), [2, 5), [4, 7)
    rows, cols = [(0, 3), (2, 5)], [(0, 3), (2, 5), (4, 7)]
    for i, (r0, r1) in enumerate(rows):
        for j, (c0, c1) in enumerate(cols):
            window = x[:, :, r0:r1, c0:c1]
            np.testing.assert_allclose(got[:, :, i, j], window.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
    assert run_op("nn.adaptive_avg_pool2d", x, output_size=1).shape == (2, 3, 1, 1)
    n = SymDim("n")
    assert infer_op_type("nn.global_avg_pool2d", [TensorType((n, 3, 5, 7))]).shape == (n, 3, 1, 1)
    assert infer_op_type("nn.adaptive_avg_pool2d", [TensorType((n, 3, AnyDim(), 7))],
                         output_size=(4, None)).shape == (n, 3, 4, 7)


def test_pool_relation_symbolic_and_errors():
    t = infer_op_type("nn.max_pool2d", [TensorType((SymDim("b"), 4, AnyDim(), 8))], pool_size=2, strides=2)
    assert t.shape[0] == SymDim("b") and isinstance(t.shape[2], AnyDim) and t.shape[3] == 4
    with pytest.raises(TypeCheckError, match=r"nn.max_pool2d.*larger than the padded data \(1, 1, 2, 2\)"):
        infer_op_type("nn.max_pool2d", [TensorType((1, 1, 2, 2))], pool_size=3)
    with pytest.raises(TypeCheckError, match="rank"):
        infer_op_type("nn.avg_pool2d", [TensorType((1, 2, 2))], pool_size=1)
    with pytest.raises(TypeCheckError, match="only padding"):
        infer_op_type("nn.avg_pool2d", [TensorType((1, 1, 4, 4))], pool_size=2, padding=2)
    with pytest.raises(TypeCheckError, match="out_grad"):
        infer_op_type("nn.max_pool2d_grad", [TensorType((1, 1, 3, 3)), TensorType((1, 1, 4, 4))], pool_size=2,
                      strides=2)


@pytest.mark.parametrize("name,attrs", [
    ("nn.max_pool2d", dict(pool_size=2, strides=1, padding=1)),
    ("nn.avg_pool2d", dict(pool_size=3, strides=2, padding=1, ceil_mode=True)),
    ("nn.avg_pool2d", dict(pool_size=2, strides=2, count_include_pad=True, padding=[1, 0])),
    ("nn.global_avg_pool2d", {}),
    ("nn.global_max_pool2d", {}),
    ("nn.adaptive_avg_pool2d", dict(output_size=(2, 3))),
])
def test_pool_gradients(name, attrs):
    # distinct values keep every max unique, so finite differences see a smooth function
    x = (RNG.permutation(40).reshape(1, 2, 4, 5) * 0.1).astype("float32")
    check_gradient(name, [x], attrs)


def test_pool_edge_cases():
    xi = RNG.integers(-100, 100, (1, 2, 4, 4)).astype("int8")
    got = run_op("nn.max_pool2d", xi, pool_size=2, strides=2, padding=1)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, naive_pool(xi, "max", (2, 2), (2, 2), (1, 1, 1, 1)))
    assert run_op("nn.avg_pool2d", rand(0, 3, 4, 4), pool_size=2).shape == (0, 3, 3, 3)
    x1 = rand(2, 3, 1, 1)
    np.testing.assert_array_equal(run_op("nn.global_max_pool2d", x1), x1)
    np.testing.assert_array_equal(run_op("nn.adaptive_avg_pool2d", x1, output_size=1), x1)


@pytest.mark.cpu
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", CASES[1:3])
def test_max_pool2d_of_quantized_data_compiles_and_matches(dtype, case):
    """Max pooling of int8/uint8 data (ONNX Runtime's QOperator models pool quantized tensors):
    compiled — the padded border is the type's least value, never above a real pixel."""
    import autorelay
    from autorelay.ir.expr import Function, Var
    from autorelay.ir.module import IRModule
    from autorelay.op.registry import call

    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (2, 3, 7, 8)).astype(dtype)
    x[0, 0] = info.min  # a channel of nothing but the least value, padded border included
    attrs = dict(pool_size=case["k"], strides=case["s"], padding=case.get("pad", (0, 0, 0, 0)),
                 ceil_mode=case.get("ceil", False))
    v = Var("x", TensorType(x.shape, dtype))
    mod = IRModule.from_expr(Function((v,), call("nn.max_pool2d", v, **attrs)))
    exe = autorelay.build(mod, target="llvm")
    assert not exe.report.fallbacks, str(exe.report)
    ref = naive_pool(x.astype("float64"), "max", case["k"], case["s"], case.get("pad", (0, 0, 0, 0)),
                     ceil=case.get("ceil", False))
    got = np.asarray(exe.run(x=x))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, ref.astype(dtype))
    np.testing.assert_array_equal(run_op("nn.max_pool2d", x, **attrs), got)
