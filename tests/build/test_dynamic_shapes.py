"""Dynamic input shapes: `build(shapes=...)` fixes them; without it a dataflow model compiles once
per concrete shape on first sight (bounded cache), checked against NumPy and ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.transform.bind_shapes import ShapeBindError, bind_shapes

TEXT = '''#[version = "0.0.5"]
def @main(%x: Tensor[(n, 8), float32], %y: Tensor[(n, 4), float32], %w: Tensor[(4, 8), float32]) {
  add(nn.relu(nn.dense(%x, %w)), %y)
}'''


def _ref(x, y, w):
    return np.maximum(x @ w.T, 0) + y


def test_one_build_per_shape_cached_and_bounded():
    mod = autorelay.parse(TEXT)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8)).astype("float32")
    exe = autorelay.build(mod, params={"w": w}, max_builds=2)
    assert exe.input_names == ["x", "y"] and "nothing compiled yet" in exe.report
    for n, builds in ((1, 1), (3, 2), (1, 2), (5, 3), (3, 4)):  # (3, 8) was evicted by (5, 8)
        x, y = rng.standard_normal((n, 8)).astype("float32"), rng.standard_normal((n, 4)).astype("float32")
        np.testing.assert_allclose(exe(x, y), _ref(x, y, w), rtol=1e-5, atol=1e-6)
        assert exe.builds == builds, n
    assert [s["x"] for s in exe.shapes_built] == [(5, 8), (3, 8)] and exe.evicted == 2
    assert "3 build" not in exe.report and "evicted" in exe.report
    np.testing.assert_allclose(exe.run(x=x, y=y), _ref(x, y, w), rtol=1e-5, atol=1e-6)


def test_saving_a_per_shape_executable_is_refused_with_the_way_out(tmp_path):
    exe = autorelay.build(autorelay.parse(TEXT), params={"w": np.ones((4, 8), "float32")})
    with pytest.raises(autorelay.AutoRelayError, match=r"dynamic input\(s\) \(x, y\).*shapes="):
        exe.save(tmp_path / "net.arx")
    assert not (tmp_path / "net.arx").exists()


def test_explicit_shapes_give_a_static_build():
    mod = autorelay.parse(TEXT)
    w = np.ones((4, 8), "float32")
    exe = autorelay.build(mod, params={"w": w}, shapes={"x": (2, 8), "y": (2, 4)})
    x, y = np.ones((2, 8), "float32"), np.zeros((2, 4), "float32")
    np.testing.assert_allclose(exe(x, y), _ref(x, y, w))
    with pytest.raises(autorelay.AutoRelayError):
        exe(np.ones((3, 8), "float32"), np.zeros((3, 4), "float32"))


@pytest.mark.parametrize("shapes, match", [
    ({"x": (2, 8, 1)}, "has rank 3, the model's .* has rank 2"),
    ({"x": (2, 9)}, r"shape \(2, 9\) does not fit the model's"),
    ({"x": (2, 8), "y": (3, 4)}, "extent n is 2 in an earlier input but 3 here"),
    ({"z": (1,)}, "unknown input"),
])
def test_shapes_that_do_not_fit_name_the_input(shapes, match):
    with pytest.raises(ShapeBindError, match=match):
        bind_shapes(autorelay.parse(TEXT), shapes)


def test_an_onnx_model_with_a_symbolic_batch_matches_onnx_runtime(tmp_path):
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    path = str(tmp_path / "mlp.onnx")
    torch.onnx.export(net, (torch.zeros(2, 12),), path, input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=17, dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    mod, params = autorelay.frontend.from_onnx(path)
    exe = autorelay.build(mod, params=params)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch in (1, 4, 7):
        x = rng.standard_normal((batch, 12)).astype("float32")
        np.testing.assert_allclose(exe(x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert exe.builds == 3 and exe.evicted == 0


def test_an_onnx_dim_value_of_minus_one_is_an_unknown_extent():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = autorelay.frontend.from_onnx(model)
    assert not mod["main"].params[0].type_annotation.is_static
    exe = autorelay.build(mod, params=params)
    for n in (2, 5):
        a = np.linspace(-1, 1, 3 * n, dtype="float32").reshape(n, 3)
        np.testing.assert_array_equal(exe(a), np.maximum(a, 0))
