"""Models quantized by ONNX Runtime's own `quantize_static` (QDQ and QOperator formats, per-tensor and
per-channel weights, uint8 and int8 activations) import, run on the reference interpreter and
compiled, and match ONNX Runtime within one quantisation step of each output.

Where ONNX Runtime's own u8 x s8 products clip (x86 without VNNI: `ort_oracle.u8s8_saturates`), the
models are quantized with 7-bit weights (`reduce_range`), as ONNX Runtime recommends there.

The QDQ fold is checked twice over: ONNX Runtime runs the folded model to the same bits as the QDQ
one, and the imported graph holds qnn.conv2d / qnn.dense (the integer kernels), not float convs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quant = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from ort_oracle import u8s8_saturates  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend import from_onnx  # noqa: E402
from autorelay.frontend.onnx.qdq import fold_qdq  # noqa: E402
from autorelay.ir.expr import Call, Op  # noqa: E402
from autorelay.ir.visitor import post_order  # noqa: E402

F = TensorProto.FLOAT
X_SHAPE = {"cnn": (1, 3, 10, 10), "mlp": (2, 5, 12), "dw": (1, 8, 10, 10)}


def _cnn() -> onnx.ModelProto:
    """conv+bias+relu, conv, residual add, concat, max pool, global average pool, flatten, gemm."""
    rng = np.random.default_rng(3)
    w = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
         "w2": rng.standard_normal((8, 8, 3, 3)) * 0.15, "b2": rng.standard_normal(8) * 0.1,
         "w3": rng.standard_normal((10, 16)) * 0.3, "b3": rng.standard_normal(10) * 0.1}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["r1", "c2"], ["res"]),
        helper.make_node("Concat", ["res", "r1"], ["cat"], axis=1),
        helper.make_node("MaxPool", ["cat"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["y"], transB=1),
    ]
    return _model(nodes, "cnn", w, ["y", "cat"])


def _mlp() -> onnx.ModelProto:
    """MatMul of 3-d data by a (K, N) weight, bias Add, Relu, MatMul again."""
    rng = np.random.default_rng(4)
    w = {"m1": rng.standard_normal((12, 16)) * 0.3, "bias": rng.standard_normal(16) * 0.1,
         "m2": rng.standard_normal((16, 6)) * 0.3}
    nodes = [
        helper.make_node("MatMul", ["x", "m1"], ["h"]),
        helper.make_node("Add", ["h", "bias"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["hr"]),
        helper.make_node("MatMul", ["hr", "m2"], ["y"]),
    ]
    return _model(nodes, "mlp", w, ["y"])


def _model(nodes, name: str, weights: dict, outputs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", F, list(X_SHAPE[name]))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        initializer=[numpy_helper.from_array(v.astype("float32"), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


class _Reader(quant.CalibrationDataReader):
    def __init__(self, shape: tuple[int, ...]) -> None:
        rng = np.random.default_rng(11)
        self._batches = iter([{"x": rng.standard_normal(shape).astype("float32")} for _ in range(16)])

    def get_next(self) -> dict | None:
        return next(self._batches, None)


CASES = [(name, fmt, act, pc) for name in ("cnn", "mlp") for fmt in ("QDQ", "QOperator")
         for act in ("QUInt8", "QInt8") for pc in (False, True)]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """(model name, format, activation type, per channel) -> the quantized ModelProto, made once."""
    folder = tmp_path_factory.mktemp("quantized")
    made: dict = {}

    def get(name: str, fmt: str, act: str, per_channel: bool) -> onnx.ModelProto:
        key = (name, fmt, act, per_channel)
        if key not in made:
            src, dst = folder / f"{name}.onnx", folder / f"{name}-{fmt}-{act}-{per_channel}.onnx"
            onnx.save(_cnn() if name == "cnn" else _mlp(), src)
            quant.quantize_static(str(src), str(dst), _Reader(X_SHAPE[name]),
                                  quant_format=getattr(quant.QuantFormat, fmt),
                                  activation_type=getattr(quant.QuantType, act),
                                  weight_type=quant.QuantType.QInt8, per_channel=per_channel,
                                  reduce_range=u8s8_saturates())
            made[key] = onnx.load(dst)
        return made[key]

    return get


def _ort(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _output_scales(model: onnx.ModelProto) -> list[float]:
    """Each graph output's quantisation step: the scale of the DequantizeLinear producing it."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    inits |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
              if n.op_type == "Constant" and n.attribute[0].name == "value"}  # as PyTorch exports them
    producer = {o: n for n in model.graph.node for o in n.output}
    scales = []
    for o in model.graph.output:
        n = producer[o.name]
        assert n.op_type == "DequantizeLinear", f"{o.name} is produced by {n.op_type}"
        scales.append(float(inits[n.input[1]]))
    return scales


def _qnn_ops(mod) -> set[str]:
    return {n.op.name for n in post_order(mod["main"].body) if isinstance(n, Call) and isinstance(n.op, Op)}


def _inputs(name: str, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(X_SHAPE[name]).astype("float32")


def _assert_within_one_step(got, want, scales, what: str) -> None:
    for k, (a, b, s) in enumerate(zip(got, want, scales)):
        a = np.asarray(a)
        assert a.shape == b.shape, (what, k, a.shape, b.shape)
        diff = float(np.abs(a - b).max())
        assert diff <= s * (1 + 1e-4), f"{what} output {k}: max |diff| {diff} > one step {s}"


@pytest.mark.parametrize(("name", "fmt", "act", "per_channel"), CASES,
                         ids=[f"{n}-{f}-{a}-{'pc' if p else 'pt'}" for n, f, a, p in CASES])
def test_reference_interpreter_matches_onnxruntime(quantized, name, fmt, act, per_channel):
    model = quantized(name, fmt, act, per_channel)
    mod, params = from_onnx(model)
    ops = _qnn_ops(mod)
    product = "qnn.conv2d" if name == "cnn" else "qnn.dense"
    assert product in ops and "qnn.requantize" in ops, sorted(ops)
    assert not ops & {"nn.conv2d", "nn.dense", "nn.matmul"}, sorted(ops)  # no float product left
    x = _inputs(name, 5)
    got = autorelay.evaluate(autorelay.infer_types(mod), x, *params.values())
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    _assert_within_one_step(got, _ort(model, x), _output_scales(model), "interpreter")


@pytest.mark.cpu
@pytest.mark.parametrize(("name", "fmt", "act", "per_channel"),
                         [("cnn", "QDQ", "QUInt8", True), ("cnn", "QOperator", "QInt8", False),
                          ("mlp", "QDQ", "QInt8", True), ("mlp", "QOperator", "QUInt8", False)])
def test_compiled_model_matches_onnxruntime(quantized, name, fmt, act, per_channel):
    model = quantized(name, fmt, act, per_channel)
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, target="llvm", params=params)
    product = "conv2d" if name == "cnn" else "dense"
    fused = [r.name for r in exe.report.rows if product in r.name and "requantize" in r.name]
    assert fused and not exe.report.fallbacks, str(exe.report)  # QOperator's MaxPool pools uint8 too
    for seed in (6, 7):
        x = _inputs(name, seed)
        got = exe.run(x=x)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        _assert_within_one_step(got, _ort(model, x), _output_scales(model), f"compiled seed {seed}")


@pytest.mark.parametrize("per_channel", [False, True], ids=["pt", "pc"])
@pytest.mark.parametrize("act", ["QUInt8", "QInt8"])
def test_folded_qdq_model_runs_to_the_same_bits_in_onnxruntime(quantized, act, per_channel):
    """The fold is what ONNX Runtime itself does with QDQ: its answers do not change by a bit."""
    model = quantized("cnn", "QDQ", act, per_channel)
    folded = fold_qdq(onnx, model)
    onnx.checker.check_model(folded)
    kinds = [n.op_type for n in folded.graph.node]
    assert kinds.count("QLinearConv") == 2 and {"QLinearAdd", "QLinearConcat", "QGemm"} <= set(kinds)
    assert "Conv" not in kinds and "Gemm" not in kinds
    producer = {o: n.op_type for n in folded.graph.node for o in n.output}
    flatten = next(n for n in folded.graph.node if n.op_type == "Flatten")
    assert producer[flatten.input[0]] == "QuantizeLinear"  # DQ -> Flatten -> Q (same parameters): on the ints
    x = _inputs("cnn", 8)
    for a, b in zip(_ort(folded, x), _ort(model, x)):
        np.testing.assert_array_equal(a, b)


def test_unfolded_qdq_model_stays_float_and_still_matches(quantized):
    """fold_qdq=False: float convs between qnn.dequantize and qnn.quantize, same answers."""
    model = quantized("cnn", "QDQ", "QUInt8", True)
    mod, params = from_onnx(model, fold_qdq=False)
    ops = _qnn_ops(mod)
    assert "nn.conv2d" in ops and "qnn.conv2d" not in ops
    x = _inputs("cnn", 9)
    got = list(autorelay.evaluate(autorelay.infer_types(mod), x, *params.values()))
    _assert_within_one_step(got, _ort(model, x), _output_scales(model), "unfolded")


DYNAMIC = [(name, pc) for name in ("cnn", "mlp") for pc in (False, True)]


@pytest.mark.parametrize(("name", "per_channel"), DYNAMIC,
                         ids=[f"{n}-{'pc' if p else 'pt'}" for n, p in DYNAMIC])
def test_dynamic_quantization_matches_onnxruntime(tmp_path, name, per_channel):
    """`quantize_dynamic`: DynamicQuantizeLinear then ConvInteger / MatMulInteger with the data's
    zero point known only at run time, then float rescaling. The integer products are exact, so
    the float outputs agree to float rounding."""
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_cnn() if name == "cnn" else _mlp(), src)
    weight = quant.QuantType.QUInt8 if name == "cnn" else quant.QuantType.QInt8  # ConvInteger: uint8 in ORT
    quant.quantize_dynamic(str(src), str(dst), weight_type=weight, per_channel=per_channel,
                           reduce_range=u8s8_saturates())
    model = onnx.load(dst)
    assert "DynamicQuantizeLinear" in {n.op_type for n in model.graph.node}
    mod, params = from_onnx(model)
    ops = _qnn_ops(mod)
    assert ("qnn.conv2d" in ops) == (name == "cnn") and "qnn.dense" in ops, sorted(ops)
    x = _inputs(name, 10)
    runs = [autorelay.evaluate(autorelay.infer_types(mod), x, *params.values())]
    if per_channel:  # compiled too (one variant each: the builds are the slow part)
        exe = autorelay.build(mod, target="llvm", params=params)
        assert not exe.report.fallbacks, str(exe.report)
        runs.append(exe.run(x=x))
    for got in runs:
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        for a, b in zip(got, _ort(model, x)):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))


def test_dynamic_quantization_of_a_depthwise_convolution(tmp_path):
    """ConvInteger with group = channels and a run-time zero point: the depthwise kernel (whose
    template once took the zero point, the kernel's first input, for the data)."""
    rng = np.random.default_rng(5)
    w = {"w": rng.standard_normal((8, 1, 3, 3)) * 0.3, "b": rng.standard_normal(8) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=8)]
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_model(nodes, "dw", w, ["y"]), src)
    quant.quantize_dynamic(str(src), str(dst), weight_type=quant.QuantType.QUInt8,
                           reduce_range=u8s8_saturates())
    model = onnx.load(dst)
    mod, params = from_onnx(model)
    x = rng.standard_normal(X_SHAPE["dw"]).astype("float32")
    exe = autorelay.build(mod, target="llvm", params=params)
    assert not exe.report.fallbacks, str(exe.report)
    want = _ort(model, x)[0]
    got = np.asarray(exe.run(x=x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.cpu
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_symbolic_batch(tmp_path, fmt):
    """A model exported with a symbolic batch axis imports once and runs any batch (the dense's
    rows are flattened with -1, the qnn ops' relations keep the symbol)."""
    model = _cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quant.quantize_static(str(src), str(dst), _Reader(X_SHAPE["cnn"]),
                          quant_format=getattr(quant.QuantFormat, fmt), per_channel=True,
                          reduce_range=u8s8_saturates())
    model = onnx.load(dst)
    mod, params = from_onnx(model)
    assert not isinstance(mod["main"].params[0].type_annotation.shape[0], int)
    exe = autorelay.build(mod, target="llvm", params=params)
    for batch in (3, 1):
        x = np.random.default_rng(batch).standard_normal((batch, *X_SHAPE["cnn"][1:])).astype("float32")
        want = _ort(model, x)
        for got in (autorelay.evaluate(autorelay.infer_types(mod), x, *params.values()), exe.run(x=x)):
            _assert_within_one_step(list(got), want, _output_scales(model), f"batch {batch}")


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao's deprecation
def test_pytorch_fx_quantized_export_folds_and_matches(tmp_path):
    """A model quantized by PyTorch (FX graph mode, x86 qconfig) and exported by torch.onnx: its
    quantisation parameters arrive through Constant / Identity / Cast / ConstantOfShape nodes and a
    Cast sits between each QuantizeLinear and DequantizeLinear; the layers still fold."""
    torch = pytest.importorskip("torch")
    quantize_fx = pytest.importorskip("torch.ao.quantization.quantize_fx")
    from torch.ao.quantization import get_default_qconfig_mapping

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 10)

        def forward(self, x):
            r = torch.relu(self.c1(x))
            y = torch.nn.functional.adaptive_avg_pool2d(self.c2(r) + r, 1).flatten(1)
            return self.fc(y)

    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    prepared = quantize_fx.prepare_fx(Net().eval(), get_default_qconfig_mapping("x86"), (x,))
    for _ in range(8):
        prepared(torch.randn(1, 3, 8, 8))
    qnet = quantize_fx.convert_fx(prepared)
    path = tmp_path / "q.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(qnet, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    model = onnx.load(path)
    mod, params = from_onnx(model)
    ops = _qnn_ops(mod)
    assert {"qnn.conv2d", "qnn.add", "qnn.dense"} <= ops and not ops & {"nn.conv2d", "nn.dense"}, sorted(ops)
    feed = torch.randn(1, 3, 8, 8)
    got = autorelay.evaluate(autorelay.infer_types(mod), feed.numpy(), *params.values())
    with torch.no_grad():
        theirs = qnet(feed).numpy()
    _assert_within_one_step([got], _ort(model, feed.numpy()), _output_scales(model), "vs ONNX Runtime")
    _assert_within_one_step([got], [theirs], _output_scales(model), "vs PyTorch")


def test_int16_activations_do_not_fold_and_still_match(tmp_path):
    """QInt16 activations (opset 21 QDQ): no 16-bit integer kernels, so nothing folds; the model
    runs in float between qnn.dequantize and qnn.quantize, and matches ONNX Runtime."""
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_cnn(), src)
    quant.quantize_static(str(src), str(dst), _Reader(X_SHAPE["cnn"]), quant_format=quant.QuantFormat.QDQ,
                          activation_type=quant.QuantType.QInt16, weight_type=quant.QuantType.QInt8,
                          per_channel=True, extra_options={"UseQDQContribOps": False})
    model = onnx.load(dst)
    mod, params = from_onnx(model)
    ops = _qnn_ops(mod)
    assert "nn.conv2d" in ops and not ops & {"qnn.conv2d", "qnn.dense", "qnn.add"}, sorted(ops)
    x = _inputs("cnn", 12)
    got = autorelay.evaluate(autorelay.infer_types(mod), x, *params.values())
    _assert_within_one_step(list(got), _ort(model, x), _output_scales(model), "int16")
