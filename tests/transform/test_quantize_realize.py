"""quantize_model: the plan's layers become qnn ops with correct boundaries, int8 stays int8
between int8 ops, the interpreter and the compiled model agree bit for bit, and the quantized
net stays close to the float one."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from quantize_nets import images, small_net

import autorelay
from autorelay.frontend import zoo
from autorelay.ir.visitor import post_order
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import Pipeline, bind_params
from autorelay.transform.quantize import Quantize, QuantizePlan, calibrate, quantize_model
from autorelay.transform.util import op_histogram, op_name

BATCH = 4


@pytest.fixture(scope="module")
def cal():
    batches = [{"data": images(BATCH, seed=s)} for s in range(6)]
    return calibrate(small_net(BATCH), None, batches, method="max", progress=False)


def _calls(mod, name):
    return [n for n in post_order(mod["main"].body) if op_name(n) == name]


def test_plan_keeps_fp32_layers_in_float(cal):
    mod = small_net(BATCH)
    qmod, qparams = quantize_model(mod, None, cal, QuantizePlan({"conv2d_3": "fp32", "dense_0": "fp32"}))
    ops = op_histogram(qmod)
    assert ops["nn.conv2d"] == 1 and ops["qnn.conv2d"] == 6
    assert ops["nn.dense"] == 1 and "qnn.dense" not in ops
    assert qparams["conv2d_3_weight"].dtype == np.float32 and qparams["dense_0_weight"].dtype == np.float32
    assert qparams["conv2d_2_weight"].dtype == np.int8 and qparams["conv2d_2_bias"].dtype == np.int32
    # the float depthwise conv reads a dequantized value and the int8 conv after it a quantized one
    (fconv,) = _calls(qmod, "nn.conv2d")
    assert fconv.attrs["groups"] == 8
    assert all(a.checked_type.dtype == "float32" for a in fconv.args)
    q_inputs = [op_name(c.args[0]) for c in _calls(qmod, "qnn.conv2d")]
    # two quantizes: the image, and the fp32 depthwise conv's output (read by both 1x1 branches)
    assert ops["qnn.quantize"] == 2 and q_inputs.count("qnn.quantize") == 3


def test_a_join_with_an_fp32_input_runs_in_float(cal):
    qmod, _ = quantize_model(small_net(BATCH), None, cal, QuantizePlan({"conv2d_2": "fp32"}))
    ops = op_histogram(qmod)
    assert "qnn.add" not in ops and ops["add"] >= 1 and ops["qnn.concatenate"] == 1
    (fconv,) = _calls(qmod, "nn.conv2d")
    # conv2d_1 is read by the fp32 conv only: its int32 accumulator is dequantized, then the relu
    assert op_name(fconv.args[0]) == "nn.relu" and op_name(fconv.args[0].args[0]) == "qnn.dequantize"
    assert fconv.args[0].args[0].args[0].checked_type.dtype == "int32"
    (join,) = [a for a in _calls(qmod, "add") if a.args[0].checked_type == a.args[1].checked_type]
    assert join.checked_type.dtype == "float32"
    # the depthwise conv after the float add quantizes its input again
    dw = [c for c in _calls(qmod, "qnn.conv2d") if c.attrs["groups"] == 8]
    assert len(dw) == 1 and op_name(dw[0].args[0]) == "qnn.quantize"


def test_int8_layers_chain_without_dequantize_quantize_pairs(cal):
    qmod, _ = quantize_model(small_net(BATCH), None, cal, QuantizePlan())
    ops = op_histogram(qmod)
    assert ops["qnn.conv2d"] == 7 and ops["qnn.dense"] == 1
    assert ops["qnn.add"] == 1 and ops["qnn.concatenate"] == 1
    # float enters twice (the image; the dense layer after the float average pool), leaves twice
    assert ops["qnn.quantize"] == 2 and ops["qnn.dequantize"] == 2
    for q in _calls(qmod, "qnn.quantize"):
        assert op_name(q.args[0]) != "qnn.dequantize"
    (pool,) = _calls(qmod, "nn.max_pool2d")  # max pooling runs on the uint8 values
    assert pool.checked_type.dtype == "uint8"
    for r in _calls(qmod, "qnn.requantize"):  # the fused epilogue: requantize(bias_add(qnn.conv2d))
        assert op_name(r.args[0]) == "nn.bias_add" and r.checked_type.dtype == "uint8"
    conv = _calls(qmod, "qnn.conv2d")[0]
    assert conv.args[5].checked_type.shape == (8,)  # per-channel weight scales


@pytest.mark.parametrize("pipeline", ["default", "nchwc16"])
def test_interpreter_and_build_are_bit_identical(pipeline):
    mod = small_net(BATCH, head=False)
    batches = [{"data": images(BATCH, seed=s)} for s in range(4)]
    cal = calibrate(mod, None, batches, method="percentile", progress=False)
    qmod, qparams = quantize_model(mod, None, cal)
    x = images(BATCH, seed=50)
    want = evaluate(bind_params(qmod, qparams), x)
    exe = autorelay.build(qmod, target="llvm", params=qparams, pipeline=pipeline)
    got = exe(x)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # every int8 layer is one compiled kernel: conv + bias + requantize (+ clip / qnn.add) fused
    assert exe.report.fallbacks == []
    if pipeline != "default":  # channel blocking adds layout transforms between the same kernels
        return
    names = [r.name for r in exe.report.rows if r.kind == "kernel"]
    assert sum(n.startswith("conv2d_bias_add_requantize") for n in names) == 6, names


# (mean, max) error bounds in logit steps; KL trades clipped outliers for resolution, so on a random
# (untrained) net it is looser.
BOUNDS = {"max": (1.5, 4), "percentile": (1.5, 4), "kl": (4, 12)}


@pytest.mark.parametrize("method", sorted(BOUNDS))
def test_quantized_net_is_close_to_float(method):
    mod = small_net(BATCH)
    batches = [{"data": images(BATCH, seed=s)} for s in range(8)]
    cal = calibrate(mod, None, batches, method=method, progress=False)
    qmod, qparams = quantize_model(mod, None, cal)
    x = images(BATCH, seed=77)
    want = np.asarray(evaluate(mod, x))
    got = np.asarray(evaluate(bind_params(qmod, qparams), x))
    lo, hi = cal.range("dense_0:out")
    step = (hi - lo) / 255  # one uint8 step of the logits' calibrated range
    err = np.abs(got - want)
    mean_bound, max_bound = BOUNDS[method]
    in_steps = (err.mean() / step, err.max() / step)
    assert in_steps[0] < mean_bound and in_steps[1] < max_bound, in_steps


def test_quantize_model_errors(cal):
    mod = small_net(BATCH)
    with pytest.raises(ValueError, match="conv2d_42"):
        quantize_model(mod, None, cal, QuantizePlan({"conv2d_42": "fp32"}))
    other, params = zoo.get("mlp", in_features=16)
    with pytest.raises(ValueError, match="other layers"):
        quantize_model(other, params, cal)


def test_zoo_resnet_all_layers_quantize():
    mod, params = zoo.get("resnet-18", image_size=32)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    cal = calibrate(mod, params, [{"data": x}], progress=False)
    qmod, _ = quantize_model(mod, params, cal)
    ops = op_histogram(qmod)
    assert ops["qnn.conv2d"] == 20 and ops["qnn.dense"] == 1 and "nn.conv2d" not in ops
    assert ops["qnn.add"] == 7  # the last block's add is read by the float average pool only


def test_quantize_pass_in_a_pipeline_matches_quantize_model(cal):
    mod = small_net(BATCH)
    plan = QuantizePlan({"conv2d_0": "fp32"})
    qmod, qparams = quantize_model(mod, None, cal, plan)
    piped = Pipeline([Quantize(cal, plan)])(mod)
    x = images(BATCH, seed=3)
    np.testing.assert_array_equal(np.asarray(evaluate(piped, x)),
                                  np.asarray(evaluate(bind_params(qmod, qparams), x)))


def test_narrow_scheme_on_avx2_is_bit_identical_and_takes_vpmaddubsw():
    """`cpu-narrow` (7-bit weights), chosen for an AVX2 target without VNNI: the compiled model equals
    the interpreter bit for bit, and its convolutions use the byte multiply-add."""
    from autorelay.codegen import resolve_target
    from autorelay.codegen.llvm.host import host_supports
    from autorelay.transform.quantize.scheme import scheme_for_target

    avx2, vnni = resolve_target("llvm -mcpu=znver3"), resolve_target("llvm -mcpu=znver5")
    assert scheme_for_target(avx2).name == "cpu-narrow" and scheme_for_target(avx2).weight_qmax == 63
    assert scheme_for_target(vnni).name == "cpu"
    mod = small_net(BATCH, channels=16, head=False)
    batches = [{"data": images(BATCH, seed=s)} for s in range(4)]
    cal = calibrate(mod, None, batches, method="max", progress=False)
    qmod, qparams = quantize_model(mod, None, cal, scheme=scheme_for_target(avx2))
    weights = [np.asarray(qparams[c.args[1].name_hint]) if hasattr(c.args[1], "name_hint")
               else np.asarray(c.args[1].data) for c in _calls(qmod, "qnn.conv2d")]
    assert weights and max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == 63
    exe = autorelay.build(qmod, target=avx2, params=qparams, pipeline="nchwc")
    assert "llvm.x86.avx2.pmadd.ub.sw" in "\n".join(k.llvm_ir for k in exe.kernels)
    wide, wide_params = quantize_model(mod, None, cal)  # 8-bit weights: vpmaddubsw could saturate
    wide_exe = autorelay.build(wide, target=avx2, params=wide_params, pipeline="nchwc")
    assert "pmadd.ub.sw" not in "\n".join(k.llvm_ir for k in wide_exe.kernels)
    if host_supports(avx2):
        x = images(BATCH, seed=51)
        want = evaluate(bind_params(qmod, qparams), x)
        np.testing.assert_array_equal(np.asarray(exe(x)), np.asarray(want))


@pytest.mark.parametrize("body", [
    "%0 = nn.conv2d(%x, %w, channels=4, kernel_size=[1, 1]); concatenate((%0, %x), axis=1)",
    "%0 = nn.conv2d(%x, %w, channels=4, kernel_size=[1, 1]); (%0, %x)",
])
def test_a_layer_without_bias_read_by_a_tuple_quantizes(body):
    """A bias-free layer whose only reader is a tuple (a concatenation's inputs, the returned
    tuple) has no bias to fold; it used to fail annotation with a bare assertion."""
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 3, 8, 8), float32], '
                          '%w: Tensor[(4, 3, 1, 1), float32]) { ' + body + " }")
    gen = np.random.default_rng(0)
    params = {"w": gen.standard_normal((4, 3, 1, 1)).astype("float32")}
    batches = [{"x": gen.standard_normal((1, 3, 8, 8)).astype("float32")} for _ in range(2)]
    qmod, qparams = quantize_model(mod, params, calibrate(mod, params, batches, progress=False))
    assert op_histogram(qmod)["qnn.conv2d"] == 1
    x = batches[0]["x"]
    want = evaluate(bind_params(autorelay.infer_types(mod), params), x)
    got = evaluate(bind_params(qmod, qparams), x)
    first = lambda v: np.asarray(v[0] if isinstance(v, tuple) else v)
    assert np.abs(first(got) - first(want)).max() < 0.05 * np.abs(first(want)).max()


def test_a_linear_layer_on_token_rows_quantizes():
    """PyTorch's nn.Linear on (batch, tokens, features) exports as MatMul with an initializer and
    an Add: it imports as a dense layer, which quantizes along its last axis with the bias folded
    (it used to stay float without a word), compiled equal to the interpreter."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from autorelay.frontend import from_onnx

    gen = np.random.default_rng(0)
    inits = [numpy_helper.from_array(gen.standard_normal((16, 8)).astype("float32"), "w"),
             numpy_helper.from_array(gen.standard_normal(8).astype("float32"), "b")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    batches = [{"x": gen.standard_normal((2, 5, 16)).astype("float32")} for _ in range(4)]
    qmod, qparams = quantize_model(mod, params, calibrate(mod, params, batches, progress=False))
    ops = op_histogram(qmod)
    assert ops["qnn.dense"] == 1 and "nn.dense" not in ops and "add" not in ops, ops
    x = batches[0]["x"]
    want = np.asarray(evaluate(bind_params(autorelay.infer_types(mod), params), x))
    got = np.asarray(evaluate(bind_params(qmod, qparams), x))
    assert np.abs(got - want).max() < 0.03 * np.abs(want).max()
    exe = autorelay.build(qmod, params=qparams)
    assert not exe.report.fallbacks
    np.testing.assert_array_equal(np.asarray(exe(x)), got)


def test_calibration_on_degenerate_data_warns():
    """All-zero or astronomically large calibration inputs leave ranges no 8-bit step resolves:
    said, not silently turned into a model that outputs zeros."""
    mod = small_net(1)
    for data in (np.zeros_like(images(1, seed=0)), np.full_like(images(1, seed=0), 1e30)):
        with pytest.warns(UserWarning, match="calibration saw only zeros"):
            calibrate(mod, None, [{"data": data}], progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calibrate(mod, None, [{"data": images(1, seed=0)}], progress=False)
