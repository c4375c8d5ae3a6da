"""float16 models compile (WidenFloat16: computed in float32, stored in float16) with no NumPy
fallback, on every executor, for both vector widths; results against the reference interpreter
(which computes each op in NumPy's float16) and, for an ONNX model, ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from host_widths import run_here_or_skip

import autorelay
from autorelay.ir.structural import assert_structural_equal
from autorelay.transform.widen_float16 import WidenFloat16

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 10, 10), float16], %w: Tensor[(16, 8, 3, 3), float16],
          %v: Tensor[(10, 64), float16], %i: Tensor[(3), int32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2]);
  %3 = reshape(%2, newshape=[1, 400]);
  %4 = strided_slice(%3, begin=[0, 0], end=[1, 64]);
  %5 = nn.dense(%4, %v);
  %6 = nn.softmax(%5);
  %7 = take(%6, %i, axis=1);
  %8 = sigmoid(%7);
  %9 = concatenate((reshape(%8, newshape=[3]), cast(%i, dtype="float16")), axis=0);
  %10 = mean(%2, axis=[2, 3]);
  (%9, multiply(%10, 0.5f16), argmax(%10, axis=[1]), cast(%10, dtype="float32"))
}
"""


def _inputs(rng):
    return [rng.standard_normal((1, 8, 10, 10)).astype("float16"),
            (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype("float16"),
            (rng.standard_normal((10, 64)) * 0.2).astype("float16"), np.array([0, 7, 3], "int32")]


def _assert_close(got, want):
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        # each op rounds to float16 (about 3 decimal digits); sums add in float32 here, in float16
        # in NumPy, so the two differ by a few float16 steps
        np.testing.assert_allclose(g.astype("float64"), w.astype("float64"), rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("executor", ["graph", "vm", "aot"])
def test_float16_program_compiles_and_matches_the_reference(executor):
    mod = autorelay.parse(PROGRAM)
    args = _inputs(np.random.default_rng(0))
    want = autorelay.evaluate(autorelay.infer_types(mod), *args)
    exe = autorelay.build(mod, executor=executor)
    _assert_close(exe(*args), want)
    report = exe.report if executor != "vm" else exe.provider.report()
    rows = report.rows if hasattr(report, "rows") else report
    assert all(r.source not in ("reference", "fallback") for r in rows), report


@pytest.mark.parametrize("cpu", ["znver3", "skylake-avx512"])
def test_float16_conversions_for_both_vector_widths(cpu):
    mod = autorelay.parse(PROGRAM)
    args = _inputs(np.random.default_rng(1))
    exe = autorelay.build(mod, target=f"llvm -mcpu={cpu}")
    assert not exe.report.fallbacks, exe.report
    run_here_or_skip(exe.target)
    _assert_close(exe(*args), autorelay.evaluate(autorelay.infer_types(mod), *args))


def test_each_op_result_is_rounded_to_float16():
    """Two ops in one kernel still round between them: (a + b) - a, with b below a's float16
    step, is 0 in float16 arithmetic (and b in float32)."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%a: Tensor[(16), float16], %b: Tensor[(16), float16]) {
  subtract(add(%a, %b), %a)
}""")
    exe = autorelay.build(mod)
    assert not exe.report.fallbacks and len(exe.report.rows) == 1, exe.report  # one fused kernel
    a, b = np.full(16, 1024, "float16"), np.full(16, 0.25, "float16")
    np.testing.assert_array_equal(exe(a, b), (a + b) - a)
    assert not (exe(a, b)).any()


def test_widening_leaves_float32_models_alone():
    mod = autorelay.infer_types(autorelay.parse("""#[version = "0.0.5"]
def @main(%a: Tensor[(4), float32]) { exp(%a) }"""))
    assert_structural_equal(WidenFloat16()(mod)["main"], mod["main"])


def test_onnx_float16_model_against_onnx_runtime():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((6, 3, 3, 3)) * 0.3).astype("float16"), "w")
    fc = numpy_helper.from_array((rng.standard_normal((4, 6)) * 0.3).astype("float16"), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"])]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3, 8, 8])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    graph = helper.make_graph(nodes, "g", [x_info], [y_info], initializer=[w, fc])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 3, 8, 8)).astype("float16")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    got = exe(x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype("float32"), want.astype("float32"), rtol=1e-2, atol=2e-3)
    assert not exe.report.fallbacks, exe.report


@pytest.mark.parametrize("cpu", ["x86-64", "znver3"])  # no F16C: integer arithmetic; F16C: vcvtph2ps
def test_float16_conversions_are_bit_exact(cpu):
    """Every float16 value to float32 and back, and float32 values around every rounding case
    (ties to even, subnormals, the overflow boundary, NaN), against NumPy, bit for bit."""
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%h: Tensor[(65536), float16], %f: Tensor[(4096), float32]) {
  (cast(%h, dtype="float32"), cast(%f, dtype="float16"), cast(cast(%h, dtype="float64"), dtype="float16"))
}""")
    every_half = np.arange(65536, dtype="uint16").view("float16")
    rng = np.random.default_rng(3)  # 2048 float16 values, halfway points next to them, edge cases
    steps = every_half[rng.integers(0, 65536, 2048)].astype("float32")  # halves, and halfway between
    between = (steps + np.nextafter(steps, np.float32(np.inf)).astype("float16").astype("float32")) / 2
    edges = np.array([65504, 65519.996, 65520, 65536, 1e30, 2.0**-25, 2.0**-24 * 1.5, 2.0**-24 * 2.5, 1e-30,
                      np.nan, -np.inf], "float32")
    floats = np.concatenate([steps[:1024], between, edges, -steps[1024:]])[:4096]
    exe = autorelay.build(mod, target=f"llvm -mcpu={cpu}")
    assert not exe.report.fallbacks, exe.report
    run_here_or_skip(exe.target)
    wide, narrow, round_trip = exe(every_half, floats)
    same = ~np.isnan(every_half)  # NaNs stay NaNs; F16C quiets a signalling one, NumPy does not
    want_wide = every_half[same].astype("float32")
    np.testing.assert_array_equal(wide[same].view("uint32"), want_wide.view("uint32"))
    assert np.isnan(wide[~same]).all()
    with np.errstate(over="ignore", invalid="ignore"):
        want = floats.astype("float16")
    nan = np.isnan(want)
    np.testing.assert_array_equal(narrow[~nan].view("uint16"), want[~nan].view("uint16"))
    assert np.isnan(narrow[nan]).all()
    np.testing.assert_array_equal(round_trip[same].view("uint16"), every_half[same].view("uint16"))
