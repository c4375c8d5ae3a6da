"""SimplifyExpr (algebraic identities) and SimplifyInference (batch_norm/dropout/layer_norm)."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

from autorelay.ir import Function, IRModule, TensorType, TupleGetItem, Var, const
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import SimplifyExpr, SimplifyInference


def _simplify(body_fn, shape=(2, 3, 4)):
    x = Var("x", TensorType(shape))
    mod = IRModule.from_expr(Function((x,), body_fn(x)))
    out = SimplifyExpr()(typed(mod))
    assert_same_outputs(mod, out)
    return ops(out)


def test_identities_with_units_are_removed_only_when_the_type_is_unchanged():
    zero, one = const(0.0), const(1.0)
    units = lambda x: call("divide", call("multiply", call("add", x, zero), one), one)
    assert _simplify(lambda x: call("nn.relu", units(x))) == {"nn.relu": 1}
    assert _simplify(lambda x: call("add", zero, call("multiply", one, x))) == {}
    # broadcasting against a bigger zero changes the shape: kept
    assert _simplify(lambda x: call("add", x, const(np.zeros((5, 2, 3, 4), "float32"))), ) == {"add": 1}
    # a non-unit constant is kept
    assert _simplify(lambda x: call("multiply", x, const(2.0))) == {"multiply": 1}


def test_reshape_transpose_cast_and_negation_chains():
    assert _simplify(lambda x: call("reshape", call("reshape", x, newshape=[6, 4]), newshape=[3, -1])) \
        == {"reshape": 1}
    assert _simplify(lambda x: call("reshape", x, newshape=[2, 3, 4])) == {}
    assert _simplify(lambda x: call("transpose", call("transpose", x, axes=[1, 0, 2]), axes=[1, 0, 2])) == {}
    assert _simplify(lambda x: call("transpose", call("transpose", x, axes=[1, 2, 0]), axes=[1, 0, 2])) \
        == {"transpose": 1}
    assert _simplify(lambda x: call("transpose", call("transpose", x), axes=[2, 1, 0])) == {}
    assert _simplify(lambda x: call("cast", call("negative", call("negative", x)), dtype="float32")) == {}
    assert _simplify(lambda x: call("cast", x, dtype="float16")) == {"cast": 1}


def test_back_to_back_layout_transforms_cancel():
    def body(x):
        t = call("layout_transform", x, src_layout="NCHW", dst_layout="NCHW4c")
        t = call("layout_transform", t, src_layout="NCHW4c", dst_layout="NHWC")
        return call("layout_transform", t, src_layout="NHWC", dst_layout="NCHW")
    assert _simplify(body, shape=(1, 8, 2, 2)) == {}

    def partial(x):
        t = call("layout_transform", x, src_layout="NCHW", dst_layout="NCHW4c")
        return call("layout_transform", t, src_layout="NCHW4c", dst_layout="NHWC")
    assert _simplify(partial, shape=(1, 8, 2, 2)) == {"layout_transform": 1}


def test_batch_norm_becomes_scale_and_shift():
    rng = np.random.default_rng(0)
    x = Var("x", TensorType((2, 3, 4, 5)))
    g, b, m = (const(rng.standard_normal(4).astype("float32")) for _ in range(3))
    v = const(rng.uniform(0.5, 2, 4).astype("float32"))
    bn = TupleGetItem(call("nn.batch_norm", x, g, b, m, v, axis=2, epsilon=1e-3), 0)
    mod = IRModule.from_expr(Function((x,), bn))
    out = SimplifyInference()(typed(mod))
    assert "nn.batch_norm" not in ops(out)
    xv = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    shape = (1, 1, 4, 1)
    want = (xv - m.data.reshape(shape)) / np.sqrt(v.data.reshape(shape) + 1e-3) * g.data.reshape(shape) \
        + b.data.reshape(shape)
    np.testing.assert_allclose(evaluate(out, xv), want, rtol=1e-5, atol=1e-5)


def test_layer_norm_and_dropout():
    rng = np.random.default_rng(1)
    x = Var("x", TensorType((3, 8)))
    g, b = const(rng.standard_normal(8).astype("float32")), const(rng.standard_normal(8).astype("float32"))
    y = TupleGetItem(call("nn.dropout", call("nn.layer_norm", x, g, b, epsilon=1e-5), rate=0.3), 0)
    mod = IRModule.from_expr(Function((x,), y))
    kept = SimplifyInference()(typed(mod))  # layer_norm stays one op (one kernel), dropout goes
    assert "nn.layer_norm" in ops(kept) and "nn.dropout" not in ops(kept)
    out = SimplifyInference(decompose_layer_norm=True)(typed(mod))
    assert "nn.layer_norm" not in ops(out) and "nn.dropout" not in ops(out)
    xv = rng.standard_normal((3, 8)).astype("float32")
    mu, var = xv.mean(-1, keepdims=True), xv.var(-1, keepdims=True)
    for m in (kept, out):
        np.testing.assert_allclose(evaluate(m, xv), (xv - mu) / np.sqrt(var + 1e-5) * g.data + b.data,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("net", sorted(NETS))
def test_whole_networks(net):
    mod = typed(NETS[net]())
    out = SimplifyExpr()(SimplifyInference()(mod))
    assert not {"nn.batch_norm", "nn.dropout"} & set(ops(out))
    assert_same_outputs(mod, out)
