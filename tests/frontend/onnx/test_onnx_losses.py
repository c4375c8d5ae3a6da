"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss imported from ONNX and compiled (no NumPy
fallback), against ONNX Runtime; and PyTorch's `F.cross_entropy` exported, against PyTorch.

The ONNX backend node cases cover the reference interpreter (test_onnx_node_cases.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from ort_oracle import assert_matches_ort  # noqa: E402

from autorelay.frontend.onnx import OnnxImportError  # noqa: E402


def _model(node, inputs, n_out=1):
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n_out)]
    graph = helper.make_graph([node], "g", inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _check(model, feeds):
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert_matches_ort(exe, model, feeds)
    assert not exe.report.fallbacks, exe.report


def _feeds(shape, rng, ignore=None, weighted=False):
    n, c, *rest = shape
    labels = rng.integers(0, c, size=(n, *rest)).astype("int64")
    if ignore is not None:  # about a third of the positions ignored, the value usually no class
        labels[rng.random(labels.shape) < 0.35] = ignore
    feeds = {"x": rng.standard_normal(shape).astype("float32"), "t": labels}
    if weighted:
        feeds["w"] = rng.uniform(0.2, 2.0, size=c).astype("float32")
    return feeds


CASES = [  # (shape, reduction, ignore_index, weighted)
    ((5, 4), "mean", None, False),
    ((5, 4), "sum", None, True),
    ((5, 4), "none", None, True),
    ((3, 6, 4), "mean", -100, True),  # PyTorch's ignore value: no class at all
    ((3, 6, 4), "mean", 2, False),  # an ignored value that is a class
    ((2, 3, 4, 5), "none", -1, True),
    ((2, 3, 4, 5), "sum", 1, False),
]


@pytest.mark.parametrize("shape, reduction, ignore, weighted", CASES)
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_matches_onnx_runtime(op, shape, reduction, ignore, weighted):
    rng = np.random.default_rng(len(shape) * 7 + len(reduction))
    feeds = _feeds(shape, rng, ignore, weighted)
    if op == "NegativeLogLikelihoodLoss":  # its input is log-probabilities
        x = feeds["x"]
        feeds["x"] = (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype("float32")
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1  # and its log_prob
    node = helper.make_node(op, list(feeds), [f"y{i}" for i in range(n_out)], **attrs)
    inputs = [_vi("x", shape), _vi("t", list(feeds["t"].shape), TensorProto.INT64)]
    if weighted:
        inputs.append(_vi("w", [shape[1]]))
    _check(_model(node, inputs, n_out), feeds)


def test_every_position_ignored_gives_nan_as_onnx_runtime_does():
    feeds = {"x": np.zeros((2, 3), "float32"), "t": np.full(2, -100, "int64")}
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y0"], ignore_index=-100)
    _check(_model(node, [_vi("x", [2, 3]), _vi("t", [2], TensorProto.INT64)]), feeds)


def test_bad_reduction_and_target_rank_are_refused():
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y0"], reduction="avg")
    with pytest.raises(OnnxImportError, match="reduction must be one of"):
        autorelay.frontend.from_onnx(_model(node, [_vi("x", [2, 3]), _vi("t", [2], TensorProto.INT64)]))
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y0"])
    with pytest.raises(OnnxImportError, match="does not match scores"):
        autorelay.frontend.from_onnx(_model(node, [_vi("x", [2, 3]), _vi("t", [2, 3], TensorProto.INT64)]))


def test_pytorch_cross_entropy_export(tmp_path):
    """A classifier's loss as PyTorch exports it (TorchScript exporter: SoftmaxCrossEntropyLoss with
    PyTorch's ignore_index -100), against PyTorch itself."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 5)
            self.weight = torch.nn.Parameter(torch.rand(5) + 0.5, requires_grad=False)

        def forward(self, x, t):
            return F.cross_entropy(self.fc(x), t, weight=self.weight, ignore_index=-100)

    torch.manual_seed(0)
    model = Loss().eval()
    x, t = torch.randn(8, 6), torch.tensor([0, 4, -100, 2, 1, -100, 3, 3])
    path = tmp_path / "loss.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x, t), str(path), dynamo=False, opset_version=17)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert "SoftmaxCrossEntropyLoss" in ops, ops
    mod, params = autorelay.frontend.from_onnx(str(path))
    exe = autorelay.build(mod, params=params)
    want = model(x, t).detach().numpy()
    np.testing.assert_allclose(exe(x.numpy(), t.numpy()), want, rtol=1e-5, atol=1e-6)
    assert not exe.report.fallbacks, exe.report
