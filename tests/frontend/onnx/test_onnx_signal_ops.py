"""DFT and STFT, compiled (one matrix product each, no NumPy fallback), against NumPy's FFT and
ONNX Runtime. Where the two oracles part (ONNX Runtime refuses a one-sided transform of a complex
signal, and reads a real inverse of another length than the spectrum's differently), NumPy is
the oracle, as ONNX's own reference implementation is written on it."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from ort_oracle import assert_matches_ort, make_model, value_info  # noqa: E402

RNG = np.random.default_rng(17)


def _const(name, value):
    tensor = onnx.numpy_helper.from_array(np.asarray(value), name)
    return helper.make_node("Constant", [], [name], value=tensor)


def _compiled(model):
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    return exe


def _interleaved(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def _numpy_dft(x: np.ndarray, axis: int, length: int | None, inverse: bool, onesided: bool) -> np.ndarray:
    """The transform ONNX defines, from NumPy's FFT in float64: x [.., parts] interleaved."""
    z = x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.float64)
    if inverse and onesided:
        return np.fft.irfft(z, n=length, axis=axis)[..., None]
    if inverse:
        return _interleaved(np.fft.ifft(z, n=length, axis=axis))
    spectrum = np.fft.fft(z, n=length, axis=axis)
    if onesided:
        bins = spectrum.shape[axis] // 2 + 1
        spectrum = np.take(spectrum, np.arange(bins), axis=axis)
    return _interleaved(spectrum)


_AXES_AND_LENGTHS = [(1, None), (-2, None), (1, 12), (-2, 21)]


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize(("inverse", "onesided"), [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_dft_matches_numpy(parts, inverse, onesided):
    """Opset 20's DFT: forward and inverse, full and one-sided, of real and complex signals, along
    an inner and the last signal axis, at the signal's length, cut short and zero-padded (one
    model, a DFT node for each axis and length). Two of the combinations are compiled, the others
    run on the reference interpreter: the converter's semantics are the same, the kernels are one
    matrix product and transposes."""
    x = RNG.standard_normal((2, 16, 10, parts)).astype("float32")
    nodes, outputs = [], []
    for i, (axis, length) in enumerate(_AXES_AND_LENGTHS):
        nodes.append(_const(f"axis{i}", np.array(axis, "int64")))
        if length is not None:
            nodes.append(_const(f"length{i}", np.array(length, "int64")))
        inputs = ["x", f"length{i}" if length else "", f"axis{i}"]
        nodes.append(helper.make_node("DFT", inputs, [f"y{i}"], inverse=inverse, onesided=onesided))
        outputs.append(value_info(f"y{i}", None))
    model = make_model(nodes, [value_info("x", x.shape)], outputs, opset=20)
    if (parts, inverse, onesided) in {(2, 0, 0), (1, 1, 1)}:
        results = _compiled(model).run(x=x)
    else:
        mod, params = autorelay.frontend.from_onnx(model)
        results = autorelay.evaluate(autorelay.infer_types(mod), x, *params.values())
    for (axis, length), got in zip(_AXES_AND_LENGTHS, results):
        want = _numpy_dft(x.astype(np.float64), axis % 4, length, bool(inverse), bool(onesided))
        assert np.asarray(got).shape == want.shape
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-5)


def test_dft_opset_17_axis_attribute_against_onnx_runtime():
    x = RNG.standard_normal((3, 8, 24, 1)).astype("float32")
    node = helper.make_node("DFT", ["x"], ["y"], axis=2, onesided=1)
    model = make_model([node], [value_info("x", x.shape)], [value_info("y", None)], opset=17)
    assert_matches_ort(_compiled(model), model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("window", "frame", "step", "onesided"), [
    ("hann", None, 4, 1), (None, 10, 5, 0), ("hann", 16, 16, 1), (None, None, 3, 1)])
def test_stft_against_onnx_runtime_and_numpy(window, frame, step, onesided):
    """Frames of the window's length (or `frame_length`, or the whole signal), weighted by the
    window, one-sided or not; the frame count is 1 + (length - frame) // step. (ONNX Runtime fails
    on a signal framed whole, with neither a window nor a frame length; NumPy is the oracle there.)"""
    length = 64
    x = RNG.standard_normal((2, length, 1)).astype("float32")
    frame_length = frame or (16 if window else length)
    w = np.hanning(frame_length).astype("float32") if window else None
    nodes = [_const("step", np.array(step, "int64"))]
    inputs = ["x", "step", "", ""]
    if w is not None:
        nodes.append(_const("w", w))
        inputs[2] = "w"
    if frame is not None:
        nodes.append(_const("frame", np.array(frame, "int64")))
        inputs[3] = "frame"
    nodes.append(helper.make_node("STFT", inputs, ["y"], onesided=onesided))
    model = make_model(nodes, [value_info("x", x.shape)], [value_info("y", None)], opset=17)
    exe = _compiled(model)
    if window or frame:
        assert_matches_ort(exe, model, {"x": x}, rtol=1e-4, atol=1e-4)
    frames = 1 + (length - frame_length) // step
    rows = np.stack([x[:, f * step:f * step + frame_length, 0] for f in range(frames)], axis=1)
    spectrum = np.fft.fft(rows * (1.0 if w is None else w), axis=-1)
    if onesided:
        spectrum = spectrum[..., :frame_length // 2 + 1]
    np.testing.assert_allclose(np.asarray(exe.run(x=x)), _interleaved(spectrum), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("node", "shape", "message"), [
    (helper.make_node("DFT", ["x"], ["y"], axis=2), (2, 8, 2), "cannot be the last axis"),
    (helper.make_node("DFT", ["x"], ["y"], axis=1), (2, 8, 3), "1 \\(real\\) or 2 \\(complex\\) parts"),
])
def test_malformed_transforms_name_the_node(node, shape, message):
    model = make_model([node], [value_info("x", shape)], [value_info("y", None)], opset=17)
    with pytest.raises(autorelay.frontend.onnx.OnnxImportError, match=message):
        autorelay.frontend.from_onnx(model)


def test_stft_window_of_another_length_is_refused():
    nodes = [_const("step", np.array(2, "int64")), _const("w", np.ones(8, "float32")),
             _const("frame", np.array(10, "int64")),
             helper.make_node("STFT", ["x", "step", "w", "frame"], ["y"])]
    model = make_model(nodes, [value_info("x", (1, 32, 1), TensorProto.FLOAT)], [value_info("y", None)],
                       opset=17)
    with pytest.raises(autorelay.frontend.onnx.OnnxImportError, match="holds 8 values for frames of 10"):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize(("bins", "length", "rate", "low", "high"), [
    (80, 400, 16000, 0.0, 8000.0),  # Whisper-style front end
    (40, 512, 22050, 20.0, 11025.0),
    (8, 16, 8192, 0.0, 4096.0),  # bands narrower than a bin: spikes
])
def test_mel_weight_matrix_against_onnx_runtime(bins, length, rate, low, high):
    ints = [_const(name, np.int64(v)) for name, v in (("bins", bins), ("length", length), ("rate", rate))]
    nodes = [*ints, _const("low", np.float32(low)), _const("high", np.float32(high)),
             helper.make_node("MelWeightMatrix", ["bins", "length", "rate", "low", "high"], ["m"])]
    graph = helper.make_graph(nodes, "mel", [], [helper.make_tensor_value_info("m", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {})[0]
    got = np.asarray(_compiled(model)())
    assert got.shape == (length // 2 + 1, bins)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
