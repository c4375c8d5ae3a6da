"""Whole models exported from PyTorch: a small ResNet-style CNN and an LSTM, imported and run in the
reference interpreter, compared with PyTorch (1e-4) and with ONNX Runtime where it is installed.

The CNN goes through the default (dynamo) exporter, which writes its weights to an external data
file; a second export with the TorchScript exporter and constant folding off keeps
BatchNormalization nodes. The LSTM (bidirectional) uses the TorchScript exporter (fast). Two small
programs cover export forms: `scatter_reduce` (a guard whose declared shape is wrong) and
`torch.stft` (an STFT node), `fold` (Col2Im); a small 3-d CNN covers `Conv3d`, `BatchNorm3d` and 3-d pooling.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")  # the default exporter needs it

import autorelay  # noqa: E402
from autorelay.frontend import from_onnx  # noqa: E402

nn = torch.nn


class Block(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.block = Block(8)
        self.gap, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(self.gap(self.block(x)), 1))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 5, bidirectional=True)
        self.fc = nn.Linear(10, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.fc(y), h, c


def _randomise_bn(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def _export(model, x, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), **kw)


def _run_imported(path, x):
    mod, params = from_onnx(str(path))
    args = [x] + [params[p.name_hint] for p in mod["main"].params[1:]]
    out = autorelay.evaluate(autorelay.infer_types(mod), *args)
    return list(out) if isinstance(out, tuple) else [out]


def _check(path, x, expected):
    got = _run_imported(path, x)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
    try:
        import onnxruntime as ort
    except ImportError:
        return
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {sess.get_inputs()[0].name: x})
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    model = SmallResNet().eval()
    _randomise_bn(model, 1)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = model(x).numpy()
    return model, x, want


def test_resnet_default_exporter_with_external_data(resnet, tmp_path):
    model, x, want = resnet
    path = tmp_path / "resnet.onnx"
    _export(model, x, path, external_data=True)
    assert any(p.name != "resnet.onnx" for p in tmp_path.iterdir()), "expected an external data file"
    _check(path, x.numpy(), [want])


def test_resnet_torchscript_exporter_keeps_batchnorm(resnet, tmp_path):
    import onnx

    model, x, want = resnet
    path = tmp_path / "resnet_ts.onnx"
    _export(model, x, path, dynamo=False, do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"BatchNormalization", "Conv", "MaxPool", "Add", "Gemm"} <= ops, ops
    _check(path, x.numpy(), [want])


def test_bidirectional_lstm(tmp_path):
    torch.manual_seed(0)
    model = LSTMNet().eval()
    x = torch.randn(4, 2, 6)
    path = tmp_path / "lstm.onnx"
    _export(model, x, path, dynamo=False)
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    _check(path, x.numpy(), want)


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 5, batch_first=True)  # PyTorch's r, z, n gates; the exporter writes z, r, h

    def forward(self, x):
        y, h = self.gru(x)
        return y, h


def test_gru_batch_first(tmp_path):
    torch.manual_seed(1)
    model = GRUNet().eval()
    x = torch.randn(2, 5, 6)
    path = tmp_path / "gru.onnx"
    _export(model, x, path, dynamo=False)
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    _check(path, x.numpy(), want)


class ScatterMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.tensor([[0, 1, 1], [3, 3, 2]]))

    def forward(self, x):
        return x.scatter_reduce(1, self.index, x[:, 1:] * 2, reduce="amax")


def test_scatter_reduce_whose_export_declares_a_wrong_shape(tmp_path):
    """The TorchScript exporter guards `scatter_reduce` with an `If` on the data's rank and declares
    the output with the flattened shape of the branch not taken; the import warns and keeps the
    shape the ops compute, as ONNX Runtime does."""
    x = torch.randn(2, 4)
    path = tmp_path / "scatter.onnx"
    _export(ScatterMax(), x, path, dynamo=False, opset_version=17)
    with torch.no_grad():
        want = ScatterMax()(x).numpy()
    with pytest.warns(UserWarning, match=r"declared with shape \(8,\) but the node produces \(2, 4\)"):
        _check(path, x.numpy(), [want])


class Spectrogram(nn.Module):
    def forward(self, x):
        window = torch.hann_window(64)
        spec = torch.stft(x, n_fft=64, hop_length=16, window=window, center=False, return_complex=True)
        return torch.log1p(spec.abs())


def test_spectrogram_default_exporter(tmp_path):
    """`torch.stft` through the default exporter: an STFT node, then the magnitude of its real and
    imaginary parts."""
    import onnx

    x = torch.randn(2, 400)
    path = tmp_path / "stft.onnx"
    _export(Spectrogram(), x, path)
    assert "STFT" in {n.op_type for n in onnx.load(str(path)).graph.node}
    with torch.no_grad():
        want = Spectrogram()(x).numpy()
    _check(path, x.numpy(), [want])


class VideoNet(nn.Module):
    """A small 3-d CNN, as video and volume models are built: a 3-d stem, 3-d pooling, a depthwise
    3-d convolution strided in space only, global pooling."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8)
        self.pool = nn.MaxPool3d(2)
        self.depthwise = nn.Conv3d(8, 8, 3, stride=(1, 2, 2), padding=1, groups=8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.stem(x))))
        x = torch.relu(self.depthwise(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool3d(x, 1), 1))


def test_3d_cnn(tmp_path):
    torch.manual_seed(2)
    model = VideoNet().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm3d):
            m.running_var.uniform_(0.5, 1.5)
            m.running_mean.normal_(0, 0.1)
    x = torch.randn(2, 3, 8, 16, 16)
    path = tmp_path / "video.onnx"
    _export(model, x, path, dynamo=False)
    with torch.no_grad():
        want = model(x).numpy()
    _check(path, x.numpy(), [want])
    mod, params = from_onnx(str(path))
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    np.testing.assert_allclose(np.asarray(exe(x.numpy())), want, rtol=1e-4, atol=1e-4)


class FoldUnfold(nn.Module):
    """Sliding blocks taken out (`unfold`: an im2col the exporter writes as a gather), scaled, and
    summed back (`fold`: Col2Im at opset 18)."""

    def forward(self, x):
        cols = nn.functional.unfold(x, kernel_size=3, padding=1, stride=2)
        return nn.functional.fold(cols * 0.5, output_size=(9, 8), kernel_size=3, padding=1, stride=2)


def test_fold_and_unfold(tmp_path):
    x = torch.randn(2, 3, 9, 8)
    path = tmp_path / "fold.onnx"
    _export(FoldUnfold(), x, path, dynamo=False, opset_version=18)
    with torch.no_grad():
        want = FoldUnfold()(x).numpy()
    _check(path, x.numpy(), [want])


class StackedRecurrent(nn.Module):
    """A two-layer bidirectional LSTM (batch first) feeding a GRU: both exporters write the zero
    initial states as a fill of a shape read from the input (ConstantOfShape, or Expand)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(16, 5)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        z, hz = self.gru(y.transpose(0, 1))
        return z, h, c, hz


@pytest.mark.parametrize("dynamo", [False, True])
def test_recurrent_layers_with_a_dynamic_batch(tmp_path, dynamo):
    """The recurrence is unrolled over the static length; the batch stays a named extent through
    the zero states (filled against a line along the input's batch axis), so one build serves
    every batch size. Against ONNX Runtime at three sizes."""
    if dynamo:
        pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")

    torch.manual_seed(2)
    path = tmp_path / "rnn.onnx"
    kw = {} if dynamo else {"dynamo": False, "opset_version": 17}
    _export(StackedRecurrent().eval(), torch.randn(3, 7, 6), path, input_names=["x"],
            dynamic_axes={"x": {0: "b"}}, **kw)
    mod, params = from_onnx(str(path))
    exe = autorelay.build(mod, params=params)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch in (3, 1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 7, 6)).astype("float32")
        for got, want in zip(exe(x), sess.run(None, {"x": x}), strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
