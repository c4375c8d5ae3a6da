"""3-d Conv and ConvTranspose imported from ONNX (rewritten as 2-d convolutions over the depth
planes, `converters_volume`), and 1-d ConvTranspose (an audio decoder's upsampling), compiled (no
NumPy fallback) and interpreted, against ONNX Runtime.

The windows mix depth strides larger and smaller than the kernel, dilations, asymmetric pads,
output_padding, groups (depthwise too), auto_pad and output_shape, so that each term of the depth
arithmetic shows.
"""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


def _check(attrs, x_shape, w_shape, bias=True, weight_input=False, op="ConvTranspose"):
    """Compiled (no fallback) and interpreted results equal ONNX Runtime's."""
    x = RNG.standard_normal(x_shape).astype("float32")
    w = RNG.standard_normal(w_shape).astype("float32")
    groups = attrs.get("group", 1)
    b = RNG.standard_normal(w_shape[0] if op == "Conv" else w_shape[1] * groups).astype("float32")
    names = ["x", "w"] + (["b"] if bias else [])
    node = helper.make_node(op, names, ["y"], **attrs)
    inputs = [helper.make_tensor_value_info("x", F, x_shape)]
    inits = [numpy_helper.from_array(b, "b")] if bias else []
    feeds = {"x": x}
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", F, w_shape))
        feeds["w"] = w
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    n = len(mod["main"].params) - len(params)
    args = list(feeds.values())[:n] + [params[p.name_hint] for p in mod["main"].params[n:]]
    interpreted = autorelay.evaluate(autorelay.infer_types(mod), *args)
    for got in (exe(*feeds.values()), interpreted):
        got = np.asarray(got)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


CASES = [
    (dict(), (1, 2, 3, 4, 5), (2, 3, 3, 3, 3)),
    (dict(strides=[2, 1, 2]), (2, 3, 4, 3, 4), (3, 2, 2, 3, 2)),
    (dict(strides=[3, 2, 1], pads=[1, 0, 1, 2, 1, 0]), (1, 2, 3, 4, 4), (2, 2, 2, 3, 3)),
    (
        dict(strides=[2, 2, 2], dilations=[2, 1, 2], output_padding=[1, 1, 0]),
        (1, 2, 3, 3, 3),
        (2, 2, 2, 2, 2),
    ),
    (dict(group=2, strides=[2, 1, 1]), (1, 4, 3, 3, 4), (4, 3, 3, 2, 2)),
    (dict(strides=[2, 2, 2], auto_pad="SAME_UPPER"), (1, 2, 3, 4, 3), (2, 2, 3, 3, 3)),
    (dict(strides=[2, 2, 2], output_shape=[7, 8, 9]), (1, 1, 3, 4, 4), (1, 2, 3, 2, 3)),
]


@pytest.mark.parametrize("attrs, x_shape, w_shape", CASES, ids=range(len(CASES)))
def test_conv_transpose_3d(attrs, x_shape, w_shape):
    _check(attrs, x_shape, w_shape)


def test_conv_transpose_3d_weight_as_graph_input_without_bias():
    _check(dict(strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0]), (1, 2, 3, 4, 3), (2, 3, 2, 3, 2), False, True)


CONV_CASES = [
    (dict(pads=[1, 1, 1, 1, 1, 1]), (2, 4, 6, 7, 5), (3, 4, 3, 3, 3)),
    (dict(group=2, strides=[2, 1, 2], dilations=[2, 1, 1], pads=[1, 0, 0, 2, 0, 0]), (1, 4, 9, 8, 8),
     (6, 2, 3, 3, 1)),
    (dict(group=4, pads=[1, 1, 1, 1, 1, 1]), (1, 4, 5, 6, 6), (4, 1, 3, 3, 3)),  # depthwise
    (dict(auto_pad="SAME_UPPER", strides=[1, 2, 2]), (1, 3, 5, 6, 6), (4, 3, 1, 3, 3)),
    (dict(strides=[3, 1, 1]), (1, 2, 8, 5, 5), (3, 2, 2, 3, 3)),  # a depth stride past the kernel
]


@pytest.mark.parametrize("attrs, x_shape, w_shape", CONV_CASES, ids=range(len(CONV_CASES)))
def test_conv_3d(attrs, x_shape, w_shape):
    _check(attrs, x_shape, w_shape, op="Conv")


def test_conv_3d_weight_as_graph_input_without_bias():
    _check(dict(strides=[2, 1, 1], pads=[1, 0, 1, 0, 1, 0]), (1, 3, 6, 5, 4), (2, 3, 3, 2, 3), False, True,
           op="Conv")


CASES_1D = [
    (dict(strides=[2], pads=[1, 2], output_padding=[1]), (2, 3, 9), (3, 4, 5)),
    (dict(strides=[8], pads=[4, 4]), (1, 4, 12), (4, 2, 16)),  # upsampling by 8, as vocoders do
    (dict(group=2, strides=[3]), (1, 4, 7), (4, 3, 3)),
    (dict(strides=[2], auto_pad="SAME_UPPER"), (1, 2, 6), (2, 3, 4)),
    (dict(strides=[3], dilations=[2], pads=[1, 2]), (1, 3, 5), (3, 2, 4)),
]


@pytest.mark.parametrize("attrs, x_shape, w_shape", CASES_1D, ids=range(len(CASES_1D)))
def test_conv_transpose_1d(attrs, x_shape, w_shape):
    _check(attrs, x_shape, w_shape)
