"""quantize_model with bf16 layers: bf16 weights folded with `to_bf16`, activations converted at the
layer's input, float32 out; plans mixing int8, bf16 and fp32 layers build without fallback kernels
and stay within bf16's rounding of the float model."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.ir import Function, IRModule, TensorType, Var, const
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op.bf16 import round_bf16, to_bf16
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import bind_params
from autorelay.transform.quantize import QuantizePlan, calibrate, quantize_model
from autorelay.transform.util import op_histogram, op_name

BATCH = 2


def cnn(seed: int = 0) -> IRModule:
    """conv-bias-relu, conv-relu, flatten, dense-bias-relu, dense: layers conv2d_0, conv2d_1,
    dense_0, dense_1."""
    rng = np.random.default_rng(seed)

    def w(*shape, s=None):
        s = np.sqrt(2.0 / np.prod(shape[1:])) if s is None else s
        return const((rng.standard_normal(shape) * s).astype("float32"))

    x = Var("data", TensorType((BATCH, 3, 10, 10)))
    y = call("nn.conv2d", x, w(16, 3, 3, 3), padding=[1, 1], channels=16, kernel_size=[3, 3])
    y = call("nn.relu", call("nn.bias_add", y, w(16, s=0.1)))
    y = call("nn.relu", call("nn.conv2d", y, w(32, 16, 3, 3), strides=[2, 2], padding=[1, 1]))
    y = call("nn.batch_flatten", y)
    y = call("nn.relu", call("nn.bias_add", call("nn.dense", y, w(64, 32 * 25)), w(64, s=0.1)))
    y = call("nn.bias_add", call("nn.dense", y, w(10, 64)), w(10, s=0.1))
    return IRModule.from_expr(Function((x,), y))


def images(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, 3, 10, 10)).astype("float32")


@pytest.fixture(scope="module")
def cal():
    return calibrate(cnn(), None, [{"data": images(s)} for s in range(4)], method="max", progress=False)


def _bf16_tolerance(want: np.ndarray, depth: int) -> float:
    """Each bf16 rounding (a layer's input or weight, 8-bit significand) is a relative error of at
    most 2**-9, two per layer, so a product is within 2**-8 per layer and `depth` layers compound to
    depth * 2**-8; sums of mixed signs can cancel, which a factor 2 on the largest output covers."""
    return 2 * depth * 2.0 ** -8 * float(np.abs(want).max())


def test_bf16_layers_become_bf16_ops_with_folded_weights(cal):
    mod = cnn()
    plan = QuantizePlan({"conv2d_1": "bf16", "dense_0": "bf16", "dense_1": "fp32"}, default="int8")
    qmod, qparams = quantize_model(mod, None, cal, plan)
    ops = op_histogram(qmod)
    assert ops["bf16.conv2d"] == 1 and ops["bf16.dense"] == 1 and ops["bf16.quantize"] == 2
    assert ops["qnn.conv2d"] == 1 and ops["nn.dense"] == 1 and "nn.conv2d" not in ops
    # the float model's conv2d_1 weight, folded with the oracle's rounding
    conv1 = [c for c in post_order(mod["main"].body) if op_name(c) == "nn.conv2d"][1]
    np.testing.assert_array_equal(qparams["conv2d_1_weight"], to_bf16(conv1.args[1].data))
    assert qparams["dense_0_weight"].dtype == np.uint16
    bconv = next(c for c in post_order(qmod["main"].body) if op_name(c) == "bf16.conv2d")
    assert bconv.checked_type.dtype == "float32" and op_name(bconv.args[0]) == "bf16.quantize"
    assert tuple(bconv.attrs["strides"]) == (2, 2)


def test_all_bf16_matches_a_float_model_on_rounded_weights(cal):
    """Independent oracle: the float model evaluated by the interpreter with every weight and every
    layer input rounded to bf16 in NumPy; only the float32 accumulation order differs."""
    mod = cnn()
    qmod, qparams = quantize_model(mod, None, cal, QuantizePlan.uniform("bf16"))
    x = images(9)
    got = np.asarray(evaluate(bind_params(qmod, qparams), x))
    # the oracle: the same net with rounded weights and an explicit rounding before each layer
    fmod = cnn()

    class Round(ExprMutator):
        def visit_call(self, c):
            c = super().visit_call(c)
            if op_name(c) in ("nn.conv2d", "nn.dense"):
                data = call("bf16.dequantize", call("bf16.quantize", c.args[0]))
                return c.replace(args=(data, const(round_bf16(c.args[1].data))))
            return c

    oracle = IRModule.from_expr(Function(fmod["main"].params, Round().visit(fmod["main"].body)))
    want = np.asarray(evaluate(oracle, x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("plan", [
    QuantizePlan.uniform("bf16"),
    QuantizePlan({"conv2d_0": "int8", "conv2d_1": "bf16", "dense_0": "bf16", "dense_1": "fp32"}),
    QuantizePlan({"conv2d_0": "bf16", "conv2d_1": "int8", "dense_0": "fp32", "dense_1": "bf16"}),
], ids=["bf16", "int8-bf16-fp32", "bf16-int8-fp32"])
def test_mixed_plan_builds_without_fallbacks_and_stays_close(cal, plan):
    mod = cnn()
    qmod, qparams = quantize_model(mod, None, cal, plan)
    exe = autorelay.build(qmod, params=qparams)
    assert exe.report.fallbacks == [], [(r.name, r.detail) for r in exe.report.fallbacks]
    # each bf16 layer is one kernel on a bf16 template (conv2d_0's 3 input channels gain a zero one)
    templates = {"conv2d_0": "conv2d_nchw_bf16", "conv2d_1": "conv2d_nchw_bf16", "dense_0": "dense_bf16",
                 "dense_1": "dense_bf16"}
    bf16 = [name for name in templates if plan.precision(name) == "bf16"]
    ops = op_histogram(qmod)
    assert ops.get("bf16.conv2d", 0) + ops.get("bf16.dense", 0) == len(bf16)
    kernels = [r.detail.split()[0] for r in exe.report.rows if r.kind == "kernel"]
    for name in bf16:
        assert kernels.count(templates[name]) >= 1, (name, kernels)
    x = images(11)
    want = np.asarray(evaluate(mod, x))
    got = np.asarray(exe.run(data=x))
    interp = np.asarray(evaluate(bind_params(qmod, qparams), x))
    np.testing.assert_allclose(got, interp, rtol=1e-4, atol=1e-4 * float(np.abs(interp).max()))
    if "int8" not in plan.precisions.values() and plan.default != "int8":
        assert np.abs(got - want).max() <= _bf16_tolerance(want, 4)
    else:  # an int8 layer's 8-bit steps dominate: within a few steps of the logits' range
        assert np.abs(got - want).max() <= 0.1 * float(np.abs(want).max())
