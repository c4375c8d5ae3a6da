"""Quantized models split between the CPU and the accelerator: the partitioner offloads exactly
the layers the accelerator computes like the CPU, and `build(target="vta")` gives the CPU int8
path's outputs bit for bit (the independent oracle: the same quantized graph compiled for the CPU
alone, and the reference interpreter on the partitioned graph)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import autorelay
import tuning_db
from autorelay.ir import Function, IRModule, TensorType, Var, const
from autorelay.op.check import run_op
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.target import TargetError
from autorelay.transform import bind_params
from autorelay.transform.quantize import calibrate, quantize_model
from autorelay.transform.util import op_histogram
from autorelay.vta import VTAConfig
from autorelay.vta.partition import partition
from autorelay.vta.programs import DenseKnobs, rounding_shift, run_dense
from autorelay.vta.tasks import conv_knobs_from

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transform"))
from quantize_nets import images, small_net

pytestmark = pytest.mark.vta


@pytest.fixture(scope="module")
def net():
    """small_net with 16 channels (so its inner convolutions are offloadable), quantized for vta."""
    mod = small_net(1, channels=16, image=12)
    cal = calibrate(mod, None, [{"data": images(1, 12, seed=s)} for s in range(4)], method="max",
                    progress=False)
    qmod, qparams = quantize_model(mod, None, cal, scheme="vta")
    return qmod, qparams


def test_power_of_two_requantize_is_the_rounding_shift():
    """The CPU's fixed-point requantize with ratio 2**-k equals (acc + 2**(k-1)) >> k, which the ALU
    program computes as ((acc >> (k-1)) + 1) >> 1, over the whole int32 range."""
    rng = np.random.default_rng(1)
    acc = np.concatenate([rng.integers(-2**31, 2**31, 4000), np.arange(-70, 70),
                          [-2**31, 2**31 - 1]]).astype(np.int32)
    for k in range(0, 25):
        got = run_op("qnn.requantize", acc, np.float32(2.0 ** -k), np.int32(0), np.float32(1.0), np.int32(0),
                     rounding="UPWARD", out_dtype="int32")
        np.testing.assert_array_equal(got, rounding_shift(acc, k), err_msg=f"shift {k}")
    # the accelerator itself: one dense row whose accumulators hit halves and large magnitudes
    x = np.eye(16, dtype=np.int8)[:1] * 127
    w = rng.integers(-128, 128, (32, 16)).astype(np.int8)
    b = rng.integers(-2**24, 2**24, 32).astype(np.int32)
    for k in (1, 2, 7, 15, 16, 17, 23):
        out, _ = run_dense(x, w, b, k, -128, 127, DenseKnobs(1, 2, 1, 1))
        want = np.clip(rounding_shift(x.astype(np.int64) @ w.T.astype(np.int64) + b, k), -128, 127)
        np.testing.assert_array_equal(out, want, err_msg=f"shift {k}")


def test_partition_offloads_what_the_accelerator_can_run(net):
    qmod, qparams = net
    parted, report = partition(bind_params(qmod, qparams))
    ops = op_histogram(parted)
    where = [(op, on) for op, on, _ in report.layers]
    # stem (3 channels), depthwise (groups) and the last conv (read in float) stay on the CPU
    assert where == [("qnn.conv2d", False), ("qnn.conv2d", True), ("qnn.conv2d", True), ("qnn.conv2d", False),
                     ("qnn.conv2d", True), ("qnn.conv2d", True), ("qnn.conv2d", False), ("qnn.dense", False)]
    assert ops["vta.conv2d"] == 4 and ops["qnn.conv2d"] == 3
    reasons = " ".join(why for _, _, why in report.layers)
    assert "input channels" in reasons and "groups" in reasons and "offloaded" in reasons
    for seed in range(3):
        x = images(1, 12, seed=50 + seed)
        want = np.asarray(evaluate(bind_params(qmod, qparams), x))
        np.testing.assert_array_equal(np.asarray(evaluate(parted, x)), want)


def test_the_cpu_scheme_is_not_offloaded(net):
    """uint8 activations with zero points and per-channel multipliers are not the GEMM core's
    arithmetic: nothing is offloaded, and the report says why."""
    mod = small_net(1, channels=16, image=12)
    cal = calibrate(mod, None, [{"data": images(1, 12, seed=0)}], method="max", progress=False)
    qmod, qparams = quantize_model(mod, None, cal)
    _, report = partition(bind_params(qmod, qparams))
    assert report.offloaded == 0 and any("int8" in why for _, _, why in report.layers)


def test_build_vta_matches_the_cpu_int8_path_bit_for_bit(net):
    qmod, qparams = net
    cpu = autorelay.build(qmod, "llvm", params=qparams)
    vta = autorelay.build(qmod, "vta", params=qparams)
    steps = [r for r in vta.report.rows if r.kind == "external"]
    assert len(steps) == 4 and all(r.source == "vta default" for r in steps)
    assert not vta.report.fallbacks
    parted, _ = partition(bind_params(qmod, qparams))
    for seed in range(4):
        x = images(1, 12, seed=100 + seed)
        got = vta(x)
        np.testing.assert_array_equal(got, cpu(x))
        np.testing.assert_array_equal(got, np.asarray(evaluate(parted, x)))  # the split vs the interpreter
    sim = vta.accelerator_time()
    assert sim["layers"] == 4 and sim["cycles"] > 0 and 0 < sim["utilization"] <= 1
    with pytest.raises(ValueError, match="offloaded"):
        vta.save("/dev/null")


def test_int8_dense_chain_is_offloaded():
    """A dense whose result feeds another int8 dense keeps an int8 requantize epilogue: vta.dense."""
    rng = np.random.default_rng(3)
    x = Var("x", TensorType((2, 40), "float32"))
    h = call("nn.relu", call("nn.bias_add", call("nn.dense", x, const(rng.standard_normal((24, 40))
                                                                           .astype("float32") * 0.2)),
                             const(rng.standard_normal(24).astype("float32"))))
    y = call("nn.dense", h, const(rng.standard_normal((10, 24)).astype("float32") * 0.2))
    mod = IRModule.from_expr(Function((x,), y))
    batches = [{"x": rng.standard_normal((2, 40)).astype("float32")} for _ in range(4)]
    qmod, qparams = quantize_model(mod, None, calibrate(mod, None, batches, progress=False), scheme="vta")
    cpu = autorelay.build(qmod, "llvm", params=qparams)
    vta = autorelay.build(qmod, "vta", params=qparams)
    assert [r.name.startswith("vta_dense") for r in vta.report.rows if r.kind == "external"] == [True]
    for _ in range(3):
        data = rng.standard_normal((2, 40)).astype("float32")
        np.testing.assert_array_equal(vta(data), cpu(data))


def test_tuned_knobs_are_used_and_misfits_fall_back(net, tmp_path):
    from autorelay.vta.conv import ConvShape
    from search.tune import tune_task
    from search.tuners import make_tuner
    from search.vta_tuning import VTAMeasurer, vta_conv_task

    qmod, qparams = net
    db = tuning_db.open(f"sqlite:///{tmp_path / 'log.sqlite'}")
    task = vta_conv_task(ConvShape(16, 6, 6, 16, 3, 3, 1, 1))  # the block's 3x3 convolutions
    tune_task(task, make_tuner("random", task, 0), 6, db, VTAMeasurer(), batch=3)
    exe = autorelay.build(qmod, "vta", params=qparams, device_schedules=db.schedule_source(str(task.target)))
    sources = sorted(r.source for r in exe.report.rows if r.kind == "external")
    # the 3x3 convs were tuned; the 1x1 ones get a similar workload's knobs (checked to fit)
    assert sources == ["vta transferred", "vta transferred", "vta tuned", "vta tuned"]
    x = images(1, 12, seed=7)
    np.testing.assert_array_equal(exe(x), autorelay.build(qmod, "llvm", params=qparams)(x))
    # another accelerator is another target: nothing of this log applies, every layer is default
    small = VTAConfig(inp_buffer_bytes=1024)
    path = tmp_path / "small.json"
    path.write_text(small.to_json())
    exe = autorelay.build(qmod, f"vta -config={path}", params=qparams,
                          device_schedules=db.schedule_source("vta"))
    assert {r.source for r in exe.report.rows if r.kind == "external"} == {"vta default"}
    np.testing.assert_array_equal(exe(x), autorelay.build(qmod, "llvm", params=qparams)(x))
    # a logged config that does not fit the buffers is refused, not run
    picked = db.schedule_source(str(task.target)).lookup(task.key).config
    big = conv_knobs_from(picked, task.shape, VTAConfig())
    assert big is not None and conv_knobs_from(picked, task.shape, VTAConfig(inp_buffer_bytes=16)) is None


def test_bad_vta_targets_are_clear_errors(net, tmp_path):
    qmod, qparams = net
    with pytest.raises(TargetError, match="unknown option"):
        autorelay.build(qmod, "vta -clock=3", params=qparams)
    with pytest.raises(TargetError, match="cannot read"):
        autorelay.build(qmod, f"vta -config={tmp_path / 'missing.json'}", params=qparams)
    bad = tmp_path / "bad.json"
    bad.write_text('{"block_in": 16, "lanes": 3}')
    with pytest.raises(TargetError, match="lanes"):
        autorelay.build(qmod, f"vta -config={bad}", params=qparams)


def test_a_batch_runs_image_by_image_and_unfit_layers_stay_on_the_cpu():
    """The core's BATCH is 1: a batch of 3 runs each offloaded convolution three times and still
    equals the CPU path; a layer no tiling fits (tiny buffers) is reported and left on the CPU."""
    mod = small_net(3, channels=16, image=10)
    cal = calibrate(mod, None, [{"data": images(3, 10, seed=s)} for s in range(3)], method="max",
                    progress=False)
    qmod, qparams = quantize_model(mod, None, cal, scheme="vta")
    cpu = autorelay.build(qmod, "llvm", params=qparams)
    vta = autorelay.build(qmod, "vta", params=qparams)
    assert vta.partition.offloaded == 4
    x = images(3, 10, seed=9)
    np.testing.assert_array_equal(vta(x), cpu(x))
    tiny = VTAConfig(inp_buffer_bytes=16, acc_buffer_bytes=64)  # one input tile, one accumulator row
    _, report = partition(bind_params(qmod, qparams), tiny)
    assert report.offloaded == 0 and any("fits" in why for _, _, why in report.layers)


def test_dynamic_shapes_need_explicit_shapes():
    from autorelay.build_module import BuildError
    from autorelay.ir.types import SymDim

    x = Var("x", TensorType((SymDim("n"), 8), "float32"))
    mod = IRModule.from_expr(Function((x,), call("nn.dense", x, const(np.ones((4, 8), "float32")))))
    with pytest.raises(BuildError, match="static input shapes; x is dynamic"):
        autorelay.build(mod, "vta")
    exe = autorelay.build(mod, "vta", shapes={"x": (3, 8)})
    np.testing.assert_allclose(exe(np.ones((3, 8), "float32")), np.full((3, 4), 8.0))


def test_zoo_resnet18_offloaded_equals_the_cpu_int8_path():
    """The zoo's ResNet-18 (at 32 px to stay fast): every 3x3 and 1x1 convolution after the stem is
    offloaded, and the split model's outputs equal the CPU int8 path's exactly."""
    from search.models import load_model
    from search.quant_data import random_batches

    model = load_model("resnet-18", image_size=32)
    cal = calibrate(model.mod, model.params, random_batches(model, 2, seed=0).batches, progress=False)
    qmod, qparams = quantize_model(model.mod, model.params, cal, scheme="vta")
    vta = autorelay.build(qmod, "vta", params=qparams)
    cpu = autorelay.build(qmod, "llvm", params=qparams, pipeline="nchwc")
    assert vta.partition.offloaded == 18
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 32, 32)).astype("float32")
        np.testing.assert_array_equal(vta(x), cpu(x))
