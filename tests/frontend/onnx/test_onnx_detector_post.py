"""A detector's post-processing imported from ONNX, against ONNX Runtime: what torchvision's SSD,
RetinaNet and Faster R-CNN exports do after their heads. Scores above a threshold (NonZero), the
best min(K, n) of them (TopK of a k computed at run time, zero included), NonMaxSuppression over
that run-time number of boxes, and an `If` whose "no boxes" branch is a constant (0, 4) while the
other is (?, 4)."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autorelay.op.dynamic import DynamicValueError  # noqa: E402

T = TensorProto


def _model(nodes, inputs, outputs, inits, opset=17):
    tensors = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _compare(model, feeds):
    """Every output equal to ONNX Runtime's, exactly (selections and the values they pick)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    mod, params = autorelay.frontend.from_onnx(model)
    got = autorelay.build(mod, params=params)(*feeds.values())
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)
    return want


def _kept_scores(threshold):
    """NonZero of scores > threshold and the scores it keeps ([n], n known at run time only)."""
    return [
        helper.make_node("Greater", ["x", "thr"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Reshape", ["nz", "minus1"], ["idx"]),
        helper.make_node("Gather", ["x", "idx"], ["kept"]),
    ], {"thr": np.array(threshold, "float32"), "minus1": np.array([-1], "int64")}


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("threshold", [0.0, 1.2, 9.0])  # about half kept, a few, none
def test_topk_of_the_scores_a_threshold_keeps(largest, threshold):
    nodes, inits = _kept_scores(threshold)
    nodes += [
        helper.make_node("Shape", ["kept"], ["n"]),
        helper.make_node("Concat", ["K", "n"], ["kn"], axis=0),
        helper.make_node("ReduceMin", ["kn"], ["k"], keepdims=1),  # k = min(5, n)
        helper.make_node("TopK", ["kept", "k"], ["values", "indices"], largest=largest),
    ]
    inits["K"] = np.array([5], "int64")
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [40])],
                   [helper.make_tensor_value_info("values", T.FLOAT, ["k"]),
                    helper.make_tensor_value_info("indices", T.INT64, ["k"])], inits)
    x = np.random.default_rng(0).standard_normal(40).astype("float32")
    x[7] = x[3]  # a tie: the lower index comes first
    values, _ = _compare(model, {"x": x})
    kept = x[x > threshold]
    assert len(values) == min(5, len(kept))
    np.testing.assert_array_equal(values, np.sort(kept)[::-1][:5] if largest else np.sort(kept)[:5])


def test_topk_of_a_run_time_k_beyond_the_axis_is_refused_by_name():
    nodes, inits = _kept_scores(0.0)
    nodes += [helper.make_node("Shape", ["kept"], ["n"]), helper.make_node("Add", ["n", "one"], ["k"]),
              helper.make_node("TopK", ["kept", "k"], ["values", "indices"])]
    inits["one"] = np.array([1], "int64")
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [12])],
                   [helper.make_tensor_value_info("values", T.FLOAT, ["k"])], inits)
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    with pytest.raises(DynamicValueError, match=r"dyn.topk: k=\d+ must be in \[0, \d+\]"):
        exe(np.random.default_rng(1).standard_normal(12).astype("float32"))


def test_non_max_suppression_over_the_boxes_a_threshold_keeps():
    nodes, inits = _kept_scores(0.3)
    nodes += [
        helper.make_node("Gather", ["boxes", "idx"], ["kept_boxes"], axis=0),
        helper.make_node("Unsqueeze", ["kept_boxes", "zero"], ["b3"]),
        helper.make_node("Unsqueeze", ["kept", "zero"], ["s2"]),
        helper.make_node("Unsqueeze", ["s2", "zero"], ["s3"]),
        helper.make_node("NonMaxSuppression", ["b3", "s3", "limit", "iou"], ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["column"], axis=1),
        helper.make_node("Gather", ["kept_boxes", "column"], ["out_boxes"], axis=0),
    ]
    inits |= {"zero": np.array([0], "int64"), "limit": np.array([6], "int64"),
              "iou": np.array([0.4], "float32"), "two": np.array(2, "int64")}
    rng = np.random.default_rng(2)
    xy = rng.uniform(0, 30, (32, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(4, 12, (32, 2))], axis=1).astype("float32")
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [32]),
                           helper.make_tensor_value_info("boxes", T.FLOAT, [32, 4])],
                   [helper.make_tensor_value_info("out_boxes", T.FLOAT, ["m", 4])], inits)
    (picked,) = _compare(model, {"x": rng.random(32).astype("float32"), "boxes": boxes})
    assert 0 < len(picked) <= 6


@pytest.mark.parametrize("empty", [True, False])
def test_if_whose_branches_differ_in_extent(empty):
    """torchvision's batched NMS: `If` (no boxes) then a constant (0,) else the kept indices (?,);
    a Slice of the result reads its run-time extent, not the constant branch's."""
    then_branch = helper.make_graph(
        [helper.make_node("Constant", [], ["none"], value=numpy_helper.from_array(np.zeros(0, "int64")))],
        "then", [], [helper.make_tensor_value_info("none", T.INT64, [0])])
    else_branch = helper.make_graph(
        [helper.make_node("NonZero", ["mask"], ["nz"]),
         helper.make_node("Reshape", ["nz", "minus1"], ["idx"])],
        "else", [], [helper.make_tensor_value_info("idx", T.INT64, ["n"])])
    nodes = [
        helper.make_node("Greater", ["x", "thr"], ["mask"]),
        helper.make_node("ReduceMax", ["x"], ["top"], keepdims=0),
        helper.make_node("Less", ["top", "thr"], ["nothing"]),
        helper.make_node("If", ["nothing"], ["keep"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Slice", ["keep", "zero", "three", "zero"], ["first"]),
    ]
    inits = {"thr": np.array(0.5, "float32"), "minus1": np.array([-1], "int64"),
             "zero": np.array([0], "int64"), "three": np.array([3], "int64")}
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [16])],
                   [helper.make_tensor_value_info("first", T.INT64, ["f"]),
                    helper.make_tensor_value_info("keep", T.INT64, ["n"])], inits)
    x = np.random.default_rng(3).random(16).astype("float32") - (1.0 if empty else 0.0)
    first, keep = _compare(model, {"x": x})
    assert (len(keep) == 0) == empty and len(first) == min(3, len(keep))


def test_topk_of_a_constant_zero_k_is_empty():
    """k = 0 selects nothing (the IR's topk reads k < 1 as "all", so the importer slices)."""
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=0)
    model = _model([node], [helper.make_tensor_value_info("x", T.FLOAT, [6, 3])],
                   [helper.make_tensor_value_info("values", T.FLOAT, [0, 3]),
                    helper.make_tensor_value_info("indices", T.INT64, [0, 3])], {"k": np.array([0], "int64")})
    x = np.random.default_rng(4).standard_normal((6, 3)).astype("float32")
    values, indices = _compare(model, {"x": x})
    assert values.shape == indices.shape == (0, 3)
