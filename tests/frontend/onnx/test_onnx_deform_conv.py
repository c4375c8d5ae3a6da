"""ONNX DeformConv, compiled: against ONNX's own reference implementation (`onnx.reference`),
over groups, offset groups, strides, dilations, uneven pads, masks and biases, with offsets that
move taps between pixels and off the data; with zero offsets it is the plain convolution."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend.onnx import OnnxImportError, from_onnx  # noqa: E402

pytestmark = pytest.mark.cpu

F = TensorProto.FLOAT


def _model(x: tuple, w: tuple, offset: tuple, out: tuple, mask: tuple | None, bias: bool,
           **attrs) -> onnx.ModelProto:
    names = ["X", "W", "offset", "B" if bias else "", "mask" if mask else ""]
    while names[-1] == "":
        names.pop()
    inputs = [helper.make_tensor_value_info("X", F, x), helper.make_tensor_value_info("W", F, w),
              helper.make_tensor_value_info("offset", F, offset)]
    if bias:
        inputs.append(helper.make_tensor_value_info("B", F, [w[0]]))
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", F, mask))
    node = helper.make_node("DeformConv", names, ["Y"], **attrs)
    graph = helper.make_graph([node], "deform", inputs, [helper.make_tensor_value_info("Y", F, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


# (N, C, H, W), (OC, kH, kW), group, offset_group, strides, dilations, pads, mask, bias
CASES = [
    ((1, 3, 7, 8), (4, 3, 3), 1, 1, (1, 1), (1, 1), (1, 1, 1, 1), False, False),
    ((2, 4, 9, 7), (6, 3, 3), 2, 2, (2, 1), (1, 1), (0, 1, 2, 0), True, True),
    ((1, 6, 8, 8), (4, 2, 3), 2, 3, (1, 2), (2, 1), (2, 0, 1, 1), True, False),
    ((1, 2, 5, 6), (3, 1, 1), 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), False, True),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_compiled_deform_conv_matches_the_onnx_reference(case):
    (n, c, h, w), (oc, kh, kw), group, og, strides, dil, pads, with_mask, bias = case
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    taps = kh * kw
    mask_shape = (n, og * taps, oh, ow) if with_mask else None
    model = _model((n, c, h, w), (oc, c // group, kh, kw), (n, og * taps * 2, oh, ow), (n, oc, oh, ow),
                   mask_shape, bias, group=group, offset_group=og, strides=list(strides),
                   dilations=list(dil), pads=list(pads), kernel_shape=[kh, kw])
    rng = np.random.default_rng(len(str(case)))
    feeds = {"X": rng.standard_normal((n, c, h, w)).astype("float32"),
             "W": rng.standard_normal((oc, c // group, kh, kw)).astype("float32"),
             # up to 2.5 pixels either way: fractional positions, and taps beyond the data's edges
             "offset": rng.uniform(-2.5, 2.5, (n, og * taps * 2, oh, ow)).astype("float32")}
    if bias:
        feeds["B"] = rng.standard_normal(oc).astype("float32")
    if with_mask:
        feeds["mask"] = rng.uniform(0, 1, mask_shape).astype("float32")
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, params=params, threads=2)
    assert not exe.report.fallbacks, exe.report
    got = np.asarray(exe(*feeds.values()))  # the feeds are in the graph's input order
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_zero_offsets_give_the_plain_convolution():
    x_shape, w_shape = (1, 4, 6, 6), (6, 2, 3, 3)
    model = _model(x_shape, w_shape, (1, 18, 6, 6), (1, 6, 6, 6), None, False, group=2, pads=[1, 1, 1, 1])
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(x_shape).astype("float32"), rng.standard_normal(w_shape).astype("float32")
    mod, params = from_onnx(model)
    got = np.asarray(autorelay.build(mod, params=params, threads=1)(x, w, np.zeros((1, 18, 6, 6), "float32")))
    conv = autorelay.parse(f'''
#[version = "0.0.5"]
def @main(%x: Tensor[{x_shape}, float32], %w: Tensor[{w_shape}, float32]) {{
  nn.conv2d(%x, %w, padding=[1, 1], groups=2, channels=6, kernel_size=[3, 3])
}}
''')
    np.testing.assert_allclose(got, np.asarray(autorelay.evaluate(conv["main"], x, w)), rtol=1e-5, atol=1e-5)


def test_an_offset_of_the_wrong_shape_names_both_shapes():
    model = _model((1, 3, 7, 8), (4, 3, 3, 3), (1, 16, 7, 8), (1, 4, 5, 6), None, False)
    with pytest.raises(OnnxImportError, match=r"DeformConv.*offset must be \(1, 18, 5, 6\).*got "
                                              r"\(1, 16, 7, 8\)"):
        from_onnx(model)
