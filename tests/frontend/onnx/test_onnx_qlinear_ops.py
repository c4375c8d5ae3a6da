"""ONNX's quantised operators one at a time, in the forms ONNX allows and quantizers rarely emit
(uint8 weights, nonzero and per-channel weight zero points, grouped, strided and 1-d convolution,
N-d and run-time matrix operands, NHWC contrib pooling), against ONNX Runtime: the integer ops
(ConvInteger, MatMulInteger) exactly, the requantising ones within one step of the output type.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from ort_oracle import int8_weight_bounds  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend import from_onnx  # noqa: E402
from autorelay.frontend.onnx import UnsupportedOnnxOpsError  # noqa: E402
from autorelay.ir.expr import Call, Op  # noqa: E402
from autorelay.ir.visitor import post_order  # noqa: E402

RNG = np.random.default_rng(21)
_ONNX_TYPE = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "float32": TensorProto.FLOAT}


def _model(nodes, feeds: dict, inits: dict, opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, _ONNX_TYPE[str(v.dtype)], list(v.shape))
                     for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _both(model: onnx.ModelProto, feeds: dict, compiled: bool = False
          ) -> tuple[np.ndarray, np.ndarray | None, set[str]]:
    """(autorelay's answer on the reference interpreter — or compiled, equal to the interpreter's
    — ONNX Runtime's or None where it refuses the model, the ops imported)."""
    mod, params = from_onnx(model)
    names = [p.name_hint for p in mod["main"].params]
    args = [feeds[n] if n in feeds else params[n] for n in names]
    got = np.asarray(autorelay.evaluate(autorelay.infer_types(mod), *args))
    if compiled:
        exe = autorelay.build(mod, target="llvm", params=params)
        assert not exe.report.fallbacks, str(exe.report)
        np.testing.assert_array_equal(np.asarray(exe.run(**feeds)), got)  # the kernels are bit-exact
    ops = {n.op.name for n in post_order(mod["main"].body) if isinstance(n, Call) and isinstance(n.op, Op)}
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)[0]
    except Exception as err:  # ONNX Runtime's own limits (per-channel ConvInteger zero points)
        if "not supported" not in str(err):
            raise
        want = None
    return got, want, ops


def _ints(dtype: str, shape: tuple[int, ...], lo: int | None = None, hi: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo, hi = info.min if lo is None else lo, info.max if hi is None else hi
    return RNG.integers(lo, hi + 1, shape).astype(dtype)


def _weights(x_type: str, w_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random weights; int8 ones against uint8 data stay where ONNX Runtime multiplies them exactly
    on this machine (`ort_oracle.u8s8_saturates`)."""
    lo, hi = int8_weight_bounds() if (x_type, w_type) == ("uint8", "int8") else (None, None)
    return _ints(w_type, shape, lo, hi)


def _within_one_step(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1, f"{int((diff > 1).sum())} values differ by more than one step ({diff.max()})"
    if diff.size >= 100:
        assert (diff == 0).mean() > 0.9  # ties are rare: nearly everything is bit-exact


@pytest.mark.cpu
@pytest.mark.parametrize(("x_type", "w_type", "per_channel", "group", "bias"), [
    ("uint8", "uint8", False, 1, True),    # uint8 weights with a nonzero zero point
    ("uint8", "int8", True, 2, True),      # per-channel scales and zero points, grouped
    ("int8", "int8", True, 4, False),      # depthwise, int8 data
    ("int8", "int8", False, 1, False),
])
def test_qlinear_conv(x_type, w_type, per_channel, group, bias):
    oc = 4
    x = _ints(x_type, (2, 4, 9, 7))
    w = _weights(x_type, w_type, (oc, 4 // group, 3, 3))
    wz = _ints(w_type, (oc,), -5, 5) if per_channel and w_type == "int8" else np.asarray(
        100 if w_type == "uint8" else 0, w_type)
    ws = (RNG.uniform(0.002, 0.01, oc) if per_channel else np.asarray(0.004)).astype("float32")
    signed = x_type == "int8"
    inits = {"xs": np.float32(0.03), "xz": np.asarray(5 if signed else 130, x_type), "w": w, "ws": ws,
             "wz": wz, "ys": np.float32(0.05), "yz": np.asarray(-3 if signed else 120, x_type)}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits["b"] = RNG.integers(-5000, 5000, oc).astype("int32")
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], group=group, strides=[2, 1], pads=[1, 0, 1, 2],
                            dilations=[1, 2])
    got, want, ops = _both(_model([node], {"x": x}, inits), {"x": x}, compiled=True)
    assert "qnn.conv2d" in ops and "qnn.requantize" in ops
    _within_one_step(got, want)


@pytest.mark.cpu
def test_qlinear_conv_1d_auto_pad():
    x, w = _ints("uint8", (1, 3, 11)), _weights("uint8", "int8", (5, 3, 4))
    inits = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": w, "ws": np.float32(0.01), "wz": np.int8(0),
             "ys": np.float32(0.1), "yz": np.uint8(128)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                            auto_pad="SAME_UPPER", strides=[2])
    got, want, _ = _both(_model([node], {"x": x}, inits), {"x": x}, compiled=True)
    _within_one_step(got, want)


@pytest.mark.cpu
@pytest.mark.parametrize("per_channel_zp", [False, True])
def test_conv_integer_is_exact(per_channel_zp):
    """ONNX Runtime's ConvInteger takes per-tensor zero points only: the oracle for per-channel ones
    is its float Conv of the shifted integers (exact: 18 products of at most 246 * 135 keep every
    partial sum an integer below 2**24)."""
    x, w = _ints("uint8", (1, 4, 8, 8)), _ints("uint8", (6, 2, 3, 3))
    wz = _ints("uint8", (6,), 120, 135) if per_channel_zp else np.uint8(131)
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    model = _model([node], {"x": x}, {"w": w, "xz": np.uint8(9), "wz": wz})
    got, want, ops = _both(model, {"x": x}, compiled=True)
    assert "qnn.conv2d" in ops
    xf = x.astype("float32") - 9
    wf = w.astype("float32") - np.asarray(wz, "float32").reshape(-1, 1, 1, 1)
    conv = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], "ref",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                             [helper.make_empty_tensor_value_info("y")], [numpy_helper.from_array(wf, "w")])
    ref = helper.make_model(conv, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(None, {"x": xf})[0].astype("int32"))
    assert (want is None) == per_channel_zp  # per tensor: ONNX Runtime's ConvInteger agrees too
    if want is not None:
        np.testing.assert_array_equal(got, want)


@pytest.mark.cpu
@pytest.mark.parametrize(("a_shape", "b_type", "b_const"), [
    ((2, 3, 6), "int8", True),    # N-d data by a constant matrix: qnn.dense over rows
    ((6,), "uint8", True),        # a vector
    ((2, 3, 6), "uint8", False),  # a run-time B: exact float64 product
])
def test_matmul_integer_is_exact(a_shape, b_type, b_const):
    a, b = _ints("uint8", a_shape), _weights("uint8", b_type, (6, 5))
    bz = _ints(b_type, (5,), -3 if b_type == "int8" else 100, 3 if b_type == "int8" else 110)
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    inits = {"az": np.uint8(17), "bz": bz} | ({"b": b} if b_const else {})
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    got, want, ops = _both(_model([node], feeds, inits), feeds, compiled=True)
    assert ("qnn.dense" in ops) == b_const
    np.testing.assert_array_equal(got, want)


@pytest.mark.cpu
@pytest.mark.parametrize(("a_type", "b_type", "b_const", "per_column"), [
    ("uint8", "int8", True, True),
    ("int8", "int8", True, False),
    ("uint8", "uint8", True, False),   # uint8 weight, nonzero zero point
    ("uint8", "uint8", False, False),  # run-time B
])
def test_qlinear_matmul(a_type, b_type, b_const, per_column):
    a, b = _ints(a_type, (3, 4, 16)), _weights(a_type, b_type, (16, 8))
    bs = (RNG.uniform(0.002, 0.01, 8) if per_column else np.asarray(0.006)).astype("float32")
    bz = np.zeros(8, b_type) if per_column else np.asarray(90 if b_type == "uint8" else 0, b_type)
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    inits = {"as": np.float32(0.02), "az": np.asarray(3, a_type), "bs": bs, "bz": bz, "ys": np.float32(0.08),
             "yz": np.asarray(100, a_type)} | ({"b": b} if b_const else {})
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    got, want, ops = _both(_model([node], feeds, inits), feeds, compiled=True)
    assert ("qnn.dense" in ops) == b_const
    _within_one_step(got, want)


def _unary_contrib(op: str, x: np.ndarray, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
    inits = {"xs": np.float32(0.05), "xz": np.asarray(7, x.dtype), "ys": np.float32(0.03),
             "yz": np.asarray(-2 if x.dtype == np.int8 else 40, x.dtype)}
    return _model([node], {"x": x}, inits)


@pytest.mark.parametrize(("op", "attrs"), [
    ("QLinearGlobalAveragePool", {}),
    ("QLinearGlobalAveragePool", {"channels_last": 1}),
    ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("QLinearLeakyRelu", {"alpha": 0.1}),
    ("QLinearSigmoid", {}),
    ("QLinearSoftmax", {"axis": -1, "opset": 13}),
    ("QLinearSoftmax", {"axis": 1, "opset": 12}),  # coerced to 2-d: softmax over axes 1..3
])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_contrib_unary_ops(op, attrs, dtype):
    x = _ints(dtype, (2, 3, 6, 5))
    got, want, _ = _both(_unary_contrib(op, x, **attrs), {"x": x})
    _within_one_step(got, want)


@pytest.mark.cpu
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_contrib_binary_ops(op, dtype):
    a, b = _ints(dtype, (2, 3, 4)), _ints(dtype, (3, 1))  # broadcasting
    bz = np.asarray(-1 if dtype == "int8" else 200, dtype)
    inits = {"as": np.float32(0.04), "az": np.asarray(3, dtype), "bs": np.float32(0.07), "bz": bz,
             "cs": np.float32(0.09), "cz": np.asarray(10, dtype)}
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"], domain="com.microsoft")
    got, want, ops = _both(_model([node], {"a": a, "b": b}, inits), {"a": a, "b": b}, compiled=True)
    assert ("qnn.add" in ops) == (op == "QLinearAdd")
    _within_one_step(got, want)


def _qdq_add_chain(adds: int) -> onnx.ModelProto:
    """x -> Q -> (DQ, DQ(constant) -> Add -> Q) x `adds` = y: residual-style adds in the QDQ
    format, each with its own output scale; the importer folds each into one qnn.add."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["q0"])]
    inits: dict = {"s_in": np.float32(0.0271), "z_in": np.uint8(121)}
    prev = ("q0", "s_in", "z_in")
    for i in range(adds):
        out = "y" if i == adds - 1 else f"q{i + 1}"
        inits |= {f"k{i}": _ints("uint8", (8,)), f"ks{i}": np.float32(0.0015 + 0.001 * i),
                  f"kz{i}": np.uint8(136), f"os{i}": np.float32(0.0287 + 0.0013 * i), f"oz{i}": np.uint8(128)}
        nodes += [helper.make_node("DequantizeLinear", list(prev), [f"d{i}"]),
                  helper.make_node("DequantizeLinear", [f"k{i}", f"ks{i}", f"kz{i}"], [f"dk{i}"]),
                  helper.make_node("Add", [f"d{i}", f"dk{i}"], [f"a{i}"]),
                  helper.make_node("QuantizeLinear", [f"a{i}", f"os{i}", f"oz{i}"], [out])]
        prev = (out, f"os{i}", f"oz{i}")
    return _model(nodes, {"x": np.zeros((64, 8), "float32")}, inits, opset=17)


@pytest.mark.cpu
@pytest.mark.parametrize("adds", [1, 6])
def test_quantized_adds_round_once_as_onnx_runtime(adds):
    """A quantized add rounds the real sum of its rescaled operands once, as ONNX's QLinearAdd and
    the QDQ Add it folds do: bit-exact for one add (rounding each operand first was one step off on
    a quarter of the elements), and a chain of them stays within one step (ONNX Runtime's float32
    sums round a few near-ties the other way) instead of drifting further."""
    model = _qdq_add_chain(adds)
    x = RNG.standard_normal((64, 8)).astype("float32")
    got, want, ops = _both(model, {"x": x}, compiled=True)
    assert "qnn.add" in ops
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= (0 if adds == 1 else 1), np.bincount(diff.ravel())
    assert (diff == 0).mean() > 0.97


@pytest.mark.cpu
def test_contrib_concat():
    a, b = _ints("uint8", (1, 2, 3)), _ints("uint8", (1, 4, 3))
    inits = {"ys": np.float32(0.1), "yz": np.uint8(128), "as": np.float32(0.05), "az": np.uint8(100),
             "bs": np.float32(0.2), "bz": np.uint8(60)}
    node = helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["y"], axis=1,
                            domain="com.microsoft")
    got, want, ops = _both(_model([node], {"a": a, "b": b}, inits), {"a": a, "b": b}, compiled=True)
    assert "qnn.concatenate" in ops
    _within_one_step(got, want)


@pytest.mark.cpu
def test_qgemm_float_output_and_transposes():
    # A^T is (5, 7), B (6, 7) transposed: (7, 6)
    a, b = _ints("uint8", (7, 5)), _weights("uint8", "int8", (6, 7))
    inits = {"as": np.float32(0.03), "az": np.uint8(120), "b": b, "bs": np.float32(0.01), "bz": np.int8(0),
             "c": RNG.integers(-300, 300, 6).astype("int32")}
    node = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c"], ["y"], domain="com.microsoft",
                            transA=1, transB=1, alpha=0.5)
    got, want, ops = _both(_model([node], {"a": a}, inits), {"a": a}, compiled=True)
    assert "qnn.dense" in ops and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_pytorch_style_qdq_with_relu_folds_into_qlinear_conv_and_max():
    """As PyTorch exports it: a float weight through QuantizeLinear -> DequantizeLinear, a float
    bias, the Relu kept before the output's QuantizeLinear. One QLinearConv with the weight
    quantised at import, then an integer Max at the zero point."""
    x = RNG.standard_normal((1, 3, 8, 8)).astype("float32")
    w = RNG.standard_normal((4, 3, 3, 3)).astype("float32") * 0.3
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("QuantizeLinear", ["w", "ws", "wz"], ["wq"], axis=0),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    inits = {"s": np.float32(0.02), "z": np.uint8(128), "w": w, "wz": np.zeros(4, "int8"),
             "ws": RNG.uniform(0.005, 0.01, 4).astype("float32"),
             "b": RNG.standard_normal(4).astype("float32"),
             "ys": np.float32(0.01), "yz": np.uint8(50)}
    model = _model(nodes, {"x": x}, inits)
    got, want, ops = _both(model, {"x": x})
    assert "qnn.conv2d" in ops and "maximum" in ops and "nn.conv2d" not in ops
    assert "w" not in from_onnx(model)[1]  # the float weight is no parameter: quantised at import
    assert np.abs(got - want).max() <= 0.01 * (1 + 1e-4)
    assert got.min() >= 0.0  # the Relu survived the fold


def test_unknown_contrib_op_is_reported_with_its_domain():
    node = helper.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft")
    with pytest.raises(UnsupportedOnnxOpsError) as info:
        from_onnx(_model([node], {"x": _ints("uint8", (2, 3))}, {"xs": np.float32(1), "xz": np.uint8(0),
                                                                  "ys": np.float32(1), "yz": np.uint8(0)}))
    assert "com.microsoft.QLinearReduceMean" in str(info.value)


@pytest.mark.cpu
def test_dynamic_quantize_linear_is_exact_compiled_and_interpreted():
    """y, scale and zero point equal ONNX Runtime's bit for bit: mixed signs, all positive (the range
    widened to 0), all zero (an empty range: scale 1), and exact halves x / scale = k + 0.5."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40])],
                              [helper.make_empty_tensor_value_info(o) for o in "ysz"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, target="llvm", params=params)
    assert not exe.report.fallbacks
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    halves = (np.arange(120).reshape(3, 40) * 0.5 + 0.25).astype("float32")  # x / 0.5 = k + 0.5
    halves[-1, -1] = 127.5  # the range [0, 127.5]: scale 0.5 exactly
    for x in (RNG.standard_normal((3, 40)).astype("float32") * 3, np.abs(RNG.standard_normal((3, 40))) + 1,
              np.zeros((3, 40)), halves, np.full((3, 40), -2.0)):
        x = np.asarray(x, "float32")
        want = sess.run(None, {"x": x})
        for got in (exe.run(x=x), autorelay.evaluate(autorelay.infer_types(mod), x)):
            for a, b in zip(got, want):
                np.testing.assert_array_equal(np.asarray(a), b)


@pytest.mark.parametrize("out_type", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_opset_23_output_dtype_and_precision(out_type):
    """Opset 23's QuantizeLinear `precision` (float32, the type computed) and DequantizeLinear
    `output_dtype`: the round trip in the asked type, bit for bit with ONNX Runtime (compiled in
    float32; float16 has no kernels, so that case runs on the reference interpreter)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, precision=TensorProto.FLOAT),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, output_dtype=out_type)]
    feeds = {"x": (RNG.standard_normal((2, 3, 5)) * 4).astype("float32")}
    inits = {"s": np.array([0.05, 0.1, 0.03], "float32"), "z": np.array([3, -2, 0], "int8")}
    model = _model(nodes, feeds, inits, opset=23)
    got, want, _ = _both(model, feeds, compiled=out_type == TensorProto.FLOAT)
    assert want.dtype == np.dtype("float16" if out_type == TensorProto.FLOAT16 else "float32")
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("op", "attr", "value", "message"), [
    ("QuantizeLinear", "precision", TensorProto.FLOAT16, "precision FLOAT16 is not supported"),
    ("DequantizeLinear", "output_dtype", TensorProto.BFLOAT16, "output_dtype BFLOAT16 is not supported"),
])
def test_opset_23_attributes_it_cannot_honour_are_refused(op, attr, value, message):
    source = "x" if op == "QuantizeLinear" else "q"
    feeds = {source: np.zeros((2, 3), "float32" if op == "QuantizeLinear" else "int8")}
    node = helper.make_node(op, [source, "s", "z"], ["y"], **{attr: value})
    model = _model([node], feeds, {"s": np.array(0.1, "float32"), "z": np.array(0, "int8")}, opset=23)
    with pytest.raises(autorelay.frontend.onnx.OnnxImportError, match=message):
        from_onnx(model)


def _dequantized_lstm(model: onnx.ModelProto) -> onnx.ModelProto:
    """The float LSTM that a DynamicQuantizeLSTM's weights dequantize to: the oracle for weights
    quantized, activations not."""
    node = model.graph.node[0]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def real(q: str, scale: str, zp: str) -> np.ndarray:
        s, z = inits[scale], inits[zp].astype(np.float32)
        s, z = (s[:, None, :], z[:, None, :]) if s.ndim == 2 else (s[:, None, None], z[:, None, None])
        return ((inits[q].astype(np.float32) - z) * s).transpose(0, 2, 1)

    weights = {"W": real(node.input[1], *node.input[8:10]), "R": real(node.input[2], *node.input[10:12])}
    lstm = helper.make_node("LSTM", ["X", "W", "R", *node.input[3:4]], list(node.output),
                            **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    graph = helper.make_graph([lstm], "f", list(model.graph.input), list(model.graph.output),
                              [numpy_helper.from_array(v, k) for k, v in weights.items()]
                              + [numpy_helper.from_array(inits[n], n) for n in node.input[3:4]])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.cpu
@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_quantize_lstm_runs_on_its_dequantized_weights(tmp_path, per_channel):
    """quantize_dynamic's LSTM (com.microsoft.DynamicQuantizeLSTM, 8-bit W and R stored transposed)
    imports as the float LSTM on its dequantized weights: equal to that LSTM in ONNX Runtime and
    close to the unquantized one. (ONNX Runtime's own kernel also quantizes the activations; on
    an AVX2 host without VNNI its u8 x s8 products saturate, 0.3 off the float LSTM here.)"""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    seq, batch, inputs, hidden = 5, 2, 6, 4
    inits = {"W": RNG.standard_normal((2, 4 * hidden, inputs)) * 0.5,
             "R": RNG.standard_normal((2, 4 * hidden, hidden)) * 0.5,
             "B": RNG.standard_normal((2, 8 * hidden)) * 0.1}
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
                          direction="bidirectional")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inputs])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")],
        [numpy_helper.from_array(v.astype("float32"), k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), tmp_path / "f.onnx")
    quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8,
                     per_channel=per_channel)
    quantized = onnx.load(tmp_path / "q.onnx")
    assert [n.op_type for n in quantized.graph.node] == ["DynamicQuantizeLSTM"]
    x = RNG.standard_normal((seq, batch, inputs)).astype("float32")
    mod, params = from_onnx(quantized)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks
    got = [np.asarray(v) for v in exe(x)]

    def run(m: onnx.ModelProto) -> list[np.ndarray]:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {"X": x})

    for g, w, f in zip(got, run(_dequantized_lstm(quantized)), run(onnx.load(tmp_path / "f.onnx")),
                       strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        assert np.abs(g - f).max() < 0.05
