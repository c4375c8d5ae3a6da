"""FoldConstant: constant sub-graphs evaluated with the op references; effects never folded."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

import autorelay
from autorelay.ir import (
    Constant,
    Function,
    If,
    IRModule,
    Let,
    RefCreate,
    RefRead,
    TensorType,
    TupleGetItem,
    Var,
    const,
)
from autorelay.op import registry
from autorelay.op.registry import OpDef, OpPattern, call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import FoldConstant, Pipeline, SimplifyInference


def _effectful_op() -> str:
    """A test-only op with a side effect (it counts its evaluations)."""
    name = "test_transform.tick"
    if not registry.exists(name):
        counter = {"n": 0}

        def ref(attrs, x):
            counter["n"] += 1
            return x + np.float32(counter["n"])

        registry.register(OpDef(name=name, arg_names=("x",), type_rel=lambda ts, a: ts[0],
                                pattern=OpPattern.OPAQUE, reference=ref, effectful=True))
    return name


def test_folds_constant_arithmetic_with_the_reference():
    x = Var("x", TensorType((2, 3)))
    a = const(np.arange(6, dtype="float32").reshape(2, 3))
    k = call("exp", call("multiply", a, const(0.5)))
    mod = IRModule.from_expr(Function((x,), call("add", x, k)))
    out = FoldConstant()(typed(mod))
    assert ops(out) == {"add": 1}
    folded = [n for n in out["main"].body.args if isinstance(n, Constant)]
    np.testing.assert_allclose(folded[0].data, np.exp(np.arange(6).reshape(2, 3) * 0.5), rtol=1e-6)
    assert folded[0].data.dtype == np.float32
    assert_same_outputs(mod, out)


def test_folds_tuple_results_projections_lets_and_constant_ifs():
    x = Var("x", TensorType((4,)))
    parts = call("split", const(np.arange(8, dtype="float32")), indices_or_sections=2, axis=0)
    t = Var("t")
    cond = call("greater", const(2.0), const(1.0))
    body = Let(t, call("add", TupleGetItem(parts, 1), const(1.0)),
               If(cond, call("multiply", x, t), call("subtract", x, t)))
    mod = IRModule.from_expr(Function((x,), body))
    out = FoldConstant()(typed(mod))
    assert ops(out) == {"multiply": 1}
    assert not isinstance(out["main"].body, Let | If)
    assert_same_outputs(mod, out)


def test_never_folds_effectful_ops_or_reference_operations():
    tick = _effectful_op()
    x = Var("x", TensorType((2,)))
    c = const(np.ones(2, "float32"))
    body = call("add", call(tick, c), call("add", RefRead(RefCreate(c)), x))
    mod = IRModule.from_expr(Function((x,), body))
    out = FoldConstant()(typed(mod))
    assert ops(out)[tick] == 1
    kinds = {type(n).__name__ for n in autorelay.ir.post_order(out["main"])}
    assert {"RefRead", "RefCreate"} <= kinds


def test_primitive_functions_are_left_alone():
    p = Var("p", TensorType((2,)))
    prim = Function((p,), call("add", p, call("negative", const(np.ones(2, "float32")))), None, (),
                    {"Primitive": 1})
    x = Var("x", TensorType((2,)))
    mod = IRModule.from_expr(Function((x,), autorelay.ir.Call(prim, (x,))))
    out = FoldConstant()(typed(mod))
    assert ops(out) == {"add": 1, "negative": 1}


@pytest.mark.parametrize("net", sorted(NETS))
def test_whole_networks(net):
    mod = typed(NETS[net]())
    inferred = Pipeline([SimplifyInference()])(mod)
    out = Pipeline([SimplifyInference(), FoldConstant()])(mod)
    assert sum(ops(out).values()) <= sum(ops(inferred).values())
    if net == "resnet":  # every batch norm's scale/shift arithmetic folds into constants
        assert "sqrt" not in ops(out) and "divide" not in ops(out)
        assert sum(ops(out).values()) < sum(ops(inferred).values())
    assert_same_outputs(mod, out)
    assert evaluate(out, *[np.zeros(p.type_annotation.concrete_shape, "float32")
                           for p in out["main"].params]) is not None


def test_folded_scalars_stay_scalars():
    """A folded 0-d value is a 0-d constant (NumPy's ascontiguousarray would make it 1-d, and the
    module then failed to type-check where a scalar was expected)."""
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main() { (zeros_like(4), add(2f, 3f)) }')
    consts = list(FoldConstant()(autorelay.infer_types(mod))["main"].body.fields)
    assert [c.data.shape for c in consts] == [(), ()]
    assert int(consts[0].data) == 0 and float(consts[1].data) == 5.0
