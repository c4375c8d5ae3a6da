"""What a two-stage detector's export (torchvision's Faster, Mask and Keypoint R-CNN) does to the
proposals its region-proposal network kept, imported from ONNX, against ONNX Runtime. Their number
is known only at run time, so every op here meets a `?` extent: a second NonZero over the kept
scores (and its Transpose and Split), the RoI pooler's zeros of shape (n, C, 7, 7) filled by
ScatterElements, the box head's Flatten, the mask head's ConvTranspose over n RoIs, and the
Resize of each mask to its box's size in the paste loop."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_onnx_detector_post import _model  # noqa: E402

from autorelay.frontend.onnx.errors import OnnxStaticValueError  # noqa: E402

T = TensorProto
_vi = helper.make_tensor_value_info
N = 40  # candidates before the first threshold


def _run_both(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    got = exe(*feeds.values())
    assert not exe.report.fallbacks, exe.report.fallbacks  # empty inputs are reported apart
    got = got if isinstance(got, tuple | list) else (got,)
    assert len(got) == len(want)
    return [np.asarray(g) for g in got], want


def _kept(threshold: float):
    """`kept_idx`: where the scores `x` pass `threshold` (a run-time count n of them), as
    PyTorch's `torch.where(x > t)[0]` exports it."""
    return [
        helper.make_node("Greater", ["x", "thr"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Reshape", ["nz", "minus1"], ["kept_idx"]),
        helper.make_node("Gather", ["x", "kept_idx"], ["kept"]),
    ], {"thr": np.array(threshold, "float32"), "minus1": np.array([-1], "int64")}


@pytest.mark.parametrize(("first", "second"), [(-0.5, 0.3), (1.0, 2.0), (0.0, 9.0), (9.0, 0.0)])
def test_nonzero_of_a_run_time_number_of_scores(first, second):
    """The RPN's second selection: NonZero over the n kept scores, then Transpose, Split of its
    (static) rank axis and Squeeze to index the kept boxes; thresholds that keep many, a few,
    none of the second, and none of the first. Also NonZero of the kept (n, 3) box rows."""
    nodes, inits = _kept(first)
    nodes += [
        helper.make_node("Greater", ["kept", "thr2"], ["mask2"]),
        helper.make_node("NonZero", ["mask2"], ["nz2"]),
        helper.make_node("Transpose", ["nz2"], ["nz2t"], perm=[1, 0]),
        helper.make_node("Split", ["nz2t", "one"], ["col"], axis=1),
        helper.make_node("Squeeze", ["col", "one"], ["idx2"]),
        helper.make_node("Gather", ["kept", "idx2"], ["kept2"]),
        helper.make_node("Gather", ["boxes", "kept_idx"], ["rows"]),
        helper.make_node("NonZero", ["rows"], ["cells"]),
    ]
    inits |= {"thr2": np.array(second, "float32"), "one": np.array([1], "int64")}
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [N]),
                           helper.make_tensor_value_info("boxes", T.FLOAT, [N, 3])],
                   [helper.make_tensor_value_info("kept2", T.FLOAT, None),
                    helper.make_tensor_value_info("cells", T.INT64, None)], inits)
    rng = np.random.default_rng(3)
    boxes = np.where(rng.random((N, 3)) < 0.5, 0, rng.standard_normal((N, 3))).astype("float32")
    got, want = _run_both(model, {"x": rng.standard_normal(N).astype("float32"), "boxes": boxes})
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


def test_nonzero_of_a_long_static_mask_is_compiled():
    """RetinaNet's score filter: NonZero over every anchor's class scores at once (here 300,000),
    compiled, its running count a blocked scan rather than a quadratic one."""
    model = _model([helper.make_node("Greater", ["x", "thr"], ["mask"]),
                    helper.make_node("NonZero", ["mask"], ["nz"])],
                   [helper.make_tensor_value_info("x", T.FLOAT, [300_000])],
                   [helper.make_tensor_value_info("nz", T.INT64, None)], {"thr": np.array(2.5, "float32")})
    x = np.random.default_rng(4).standard_normal(300_000).astype("float32")
    got, want = _run_both(model, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("threshold", [0.0, 9.0])
def test_roi_features_of_a_run_time_number_of_boxes(threshold):
    """The RoI pooler and the heads after it over n kept boxes: zeros of shape (n, C, 2, 2)
    (ConstantOfShape of a shape holding n), filled by ScatterElements along the RoIs (here in
    reverse order), flattened for the box head's Gemm; and the mask head's ConvTranspose over
    the same n RoIs. n = 0 included."""
    c = 3
    nodes, inits = _kept(threshold)
    nodes += [
        helper.make_node("Gather", ["feats", "kept_idx"], ["roi"]),  # (n, C, 2, 2)
        helper.make_node("Shape", ["kept_idx"], ["n"]),
        helper.make_node("Concat", ["n", "chw"], ["shape"], axis=0),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                         value=numpy_helper.from_array(np.zeros(1, "float32"))),
        helper.make_node("Squeeze", ["n", "zero"], ["n0"]),
        helper.make_node("Sub", ["n0", "one"], ["last"]),
        helper.make_node("Range", ["last", "minus1s", "minus1s"], ["reverse"]),
        helper.make_node("Reshape", ["reverse", "col4"], ["rev4"]),
        helper.make_node("Expand", ["rev4", "shape"], ["where"]),
        helper.make_node("ScatterElements", ["zeros", "where", "roi"], ["pooled"], axis=0),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w"], ["scores"]),
        helper.make_node("ConvTranspose", ["roi", "wt"], ["up"], strides=[2, 2]),
    ]
    rng = np.random.default_rng(5)
    inits |= {"chw": np.array([c, 2, 2], "int64"), "zero": np.array([0], "int64"),
              "one": np.array(1, "int64"), "minus1s": np.array(-1, "int64"),
              "col4": np.array([-1, 1, 1, 1], "int64"),
              "w": rng.standard_normal((c * 4, 5)).astype("float32"),
              "wt": rng.standard_normal((c, 2, 2, 2)).astype("float32")}
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [N]),
                           helper.make_tensor_value_info("feats", T.FLOAT, [N, c, 2, 2])],
                   [helper.make_tensor_value_info("scores", T.FLOAT, None),
                    helper.make_tensor_value_info("up", T.FLOAT, None)], inits)
    feeds = {"x": rng.standard_normal(N).astype("float32"),
             "feats": rng.standard_normal((N, c, 2, 2)).astype("float32")}
    got, want = _run_both(model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


RESIZES = [("linear", "half_pixel", "floor"), ("linear", "align_corners", "floor"),
           ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
           ("cubic", "half_pixel", "floor"), ("cubic", "pytorch_half_pixel", "floor"),
           ("cubic", "align_corners", "floor")]


@pytest.mark.parametrize(("mode", "ctm", "nearest"), RESIZES)
@pytest.mark.parametrize("axes", [None, [2, 3]])
def test_resize_to_sizes_computed_at_run_time(mode, ctm, nearest, axes):
    """Sizes from a graph input: all four (the batch and channels kept) or, with `axes`, the
    height and width; one build, run at several sizes (each compiled when first met)."""
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest}
    if axes is None:
        nodes = [helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
                 helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)]
        inits = {"nc": np.array([1, 2], "int64")}
    else:
        nodes, inits = [helper.make_node("Resize", ["x", "", "", "hw"], ["y"], axes=axes, **attrs)], {}
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 5, 7]),
                           helper.make_tensor_value_info("hw", T.INT64, [2])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], inits, opset=18)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    x = np.random.default_rng(6).standard_normal((1, 2, 5, 7)).astype("float32")
    for hw in ([9, 4], [5, 7], [1, 13], [9, 4]):
        feeds = {"x": x, "hw": np.array(hw, "int64")}
        np.testing.assert_allclose(np.asarray(exe(*feeds.values())), sess.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)  # cubic: 16 taps, some weights negative
    assert not exe.report.fallbacks, exe.report.fallbacks


def test_mask_paste_loop_resizes_each_mask_to_its_box():
    """Mask R-CNN's paste, reduced: a Loop over the boxes resizes the (1, 1, 4, 4) mask of each to
    the box's height and width (so every extent in the body is `?`), and scans out a summary."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["boxes", "i"], ["hw"], axis=0),
         helper.make_node("Gather", ["masks", "i"], ["m3"], axis=0),
         helper.make_node("Unsqueeze", ["m3", "zero"], ["mask"]),
         helper.make_node("Concat", ["one_one", "hw"], ["sizes"], axis=0),
         helper.make_node("Resize", ["mask", "", "", "sizes"], ["pasted"], mode="linear"),
         helper.make_node("ReduceSum", ["pasted"], ["total"], keepdims=0),
         helper.make_node("Shape", ["pasted"], ["shape"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [_vi("i", T.INT64, []), _vi("cond", T.BOOL, [])],
        [_vi("cond_out", T.BOOL, []), _vi("total", T.FLOAT, []), _vi("shape", T.INT64, [4])],
        initializer=[numpy_helper.from_array(np.array([0], "int64"), "zero"),
                     numpy_helper.from_array(np.array([1, 1], "int64"), "one_one")])
    nodes = [helper.make_node("Shape", ["boxes"], ["bshape"]),
             helper.make_node("Gather", ["bshape", "zero_s"], ["count"], axis=0),
             helper.make_node("Loop", ["count", ""], ["totals", "shapes"], body=body)]
    model = _model(nodes, [helper.make_tensor_value_info("boxes", T.INT64, ["n", 2]),
                           helper.make_tensor_value_info("masks", T.FLOAT, ["n", 1, 4, 4])],
                   [helper.make_tensor_value_info("totals", T.FLOAT, None),
                    helper.make_tensor_value_info("shapes", T.INT64, None)], {"zero_s": np.array(0, "int64")})
    rng = np.random.default_rng(7)
    boxes = np.array([[9, 4], [3, 3], [1, 12], [9, 4]], "int64")
    got, want = _run_both(model, {"boxes": boxes, "masks": rng.random((4, 1, 4, 4)).astype("float32")})
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)


def test_cubic_resize_excluding_outside_taps_to_run_time_sizes_asks_for_them():
    """A bicubic resize that drops the taps outside the image (`exclude_outside`) has no compute:
    its sizes must be known at import time (the error names them, and `constants=` binds them)."""
    model = _model([helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
                    helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic",
                                     exclude_outside=1)],
                   [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 5, 7]),
                    helper.make_tensor_value_info("hw", T.INT64, [2])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], {"nc": np.array([1, 2], "int64")})
    with pytest.raises(OnnxStaticValueError, match=r"sizes .* known at import"):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize("threshold", [-9.0, 0.0, 9.0])  # every row, some rows, no row written
def test_scatter_of_whole_rows_writes_the_rows_it_names(threshold):
    """The RoI pooler's `index_put_` of one level: ScatterElements whose indices are the written
    rows broadcast over the rest (imported as a scatter of row numbers and one gather), into
    static data; k, the number of rows written, is known at run time only and may be 0."""
    nodes = [helper.make_node("Greater", ["v", "thr"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Reshape", ["nz", "minus1"], ["rows"]),
             helper.make_node("Gather", ["feats", "rows"], ["upd"]),
             helper.make_node("Reshape", ["rows", "col4"], ["rows4"]),
             helper.make_node("Shape", ["upd"], ["ushape"]),
             helper.make_node("Expand", ["rows4", "ushape"], ["where"]),
             helper.make_node("ScatterElements", ["data", "where", "upd"], ["out"], axis=0)]
    inits = {"thr": np.array(threshold, "float32"), "minus1": np.array([-1], "int64"),
             "col4": np.array([-1, 1, 1, 1], "int64")}
    model = _model(nodes, [_vi("v", T.FLOAT, [6]), _vi("feats", T.FLOAT, [6, 3, 2, 2]),
                           _vi("data", T.FLOAT, [6, 3, 2, 2])], [_vi("out", T.FLOAT, None)], inits)
    rng = np.random.default_rng(8)
    feeds = {"v": rng.standard_normal(6).astype("float32"),
             "feats": rng.standard_normal((6, 3, 2, 2)).astype("float32"),
             "data": rng.standard_normal((6, 3, 2, 2)).astype("float32")}
    got, want = _run_both(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])
