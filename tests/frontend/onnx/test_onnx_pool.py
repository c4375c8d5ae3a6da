"""MaxPool / AveragePool over 1-3 spatial axes, LpPool and GlobalLpPool imported from ONNX, compiled
(no NumPy fallback) and interpreted, against ONNX Runtime.

3-d pooling is rewritten as two 2-d poolings and LpPool as a scaled average of |x|^p; the windows
below mix strides, dilations, asymmetric pads, auto_pad and ceil_mode so that a rule broken on one
axis shows.
"""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from autorelay.frontend.onnx import OnnxNodeError  # noqa: E402

RNG = np.random.default_rng(0)


def _model(node, in_shape, opset=19):
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if len(node.output) > 1:
        outs.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)], outs
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, x, fallback=None):
    """Compiled and interpreted results equal ONNX Runtime's; `fallback` names an op allowed to run
    as its NumPy reference in the compiled module (dilated average pooling has no compute yet)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert all(fallback and fallback in row.detail for row in exe.report.fallbacks), exe.report
    interpreted = autorelay.evaluate(autorelay.infer_types(mod), x)
    for got in (exe(x), interpreted):
        got = list(got) if isinstance(got, tuple | list) else [got]
        assert len(got) == len(want)
        for a, b in zip(got, want):
            a = np.asarray(a)
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


WINDOWS_3D = [
    dict(kernel_shape=[2, 2, 2]),
    dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1]),
    dict(kernel_shape=[2, 3, 2], dilations=[2, 1, 2], strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 0]),
    dict(kernel_shape=[3, 3, 2], strides=[2, 2, 3], pads=[1, 1, 0, 0, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[3, 2, 2], strides=[2, 1, 2], auto_pad="SAME_LOWER"),
]


@pytest.mark.parametrize("attrs", WINDOWS_3D, ids=range(len(WINDOWS_3D)))
def test_max_pool_3d(attrs):
    x = RNG.standard_normal((2, 3, 7, 6, 8)).astype("float32")
    _check(_model(helper.make_node("MaxPool", ["x"], ["y"], **attrs), x.shape), x)


@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
        ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ((1, 2, 7, 8), dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[2, 1], pads=[0, 1, 1, 0])),
        ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
        ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
        ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1], storage_order=1)),
        ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[1, 1, 0, 0, 1, 1])),
    ],
)
def test_max_pool_indices(shape, attrs):
    """Indices into the flattened input; the input is rounded so that windows hold ties."""
    x = np.round(RNG.standard_normal(shape)).astype("float32")
    _check(_model(helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs), shape, opset=12), x)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", WINDOWS_3D, ids=range(len(WINDOWS_3D)))
def test_average_pool_3d(attrs, count_include_pad):
    x = RNG.standard_normal((2, 3, 7, 6, 8)).astype("float32")
    node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=count_include_pad, **attrs)
    _check(_model(node, x.shape), x, fallback="dilated average pooling" if "dilations" in attrs else None)


@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((2, 3, 9), dict(kernel_shape=[3], p=2)),
        ((2, 3, 9), dict(kernel_shape=[2], strides=[2], pads=[1, 0], p=1)),
        ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=2)),
        ((1, 2, 7, 8), dict(kernel_shape=[2, 3], p=3)),
        ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", p=2)),
        ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 1], p=2)),
    ],
)
def test_lp_pool(shape, attrs):
    x = RNG.standard_normal(shape).astype("float32")
    _check(_model(helper.make_node("LpPool", ["x"], ["y"], **attrs), shape, opset=11), x)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(shape, p):
    x = RNG.standard_normal(shape).astype("float32")
    _check(_model(helper.make_node("GlobalLpPool", ["x"], ["y"], p=p), shape), x)


def test_lp_pool_ceil_mode_overhang_is_refused():
    """A ceil_mode window over the padded edge would need the sum of fewer positions: refused, named."""
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    with pytest.raises(OnnxNodeError, match=r"LpPool.*ceil_mode=1"):
        autorelay.frontend.from_onnx(_model(node, (1, 1, 5, 5), opset=18))
    # no overhang (even extents): ceil_mode changes nothing and imports
    x = RNG.standard_normal((1, 1, 6, 6)).astype("float32")
    _check(_model(node, x.shape, opset=18), x)
