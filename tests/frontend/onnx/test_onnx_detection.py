"""Detection ops imported from ONNX and compiled, against ONNX Runtime. RoiAlign and MaxRoiPool (no
NumPy fallback): regions inside, across and outside the map, degenerate ones, both modes and
coordinate modes, fixed and adaptive sample grids, and a run-time number of regions.
NonMaxSuppression (on the VM; the selection itself is the one reported fallback): overlapping
clusters, tied scores, both box formats, with and without a score threshold, and run-time limits."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autorelay.frontend.onnx import OnnxImportError  # noqa: E402


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _rois(rng, n, size):
    """Regions of every kind: random ones (some crossing the border), one far outside, one a point,
    one reversed (its end before its start)."""
    lo = rng.uniform(-0.2 * size, 0.8 * size, (n, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0.5, 0.7 * size, (n, 2))], axis=1)
    extra = [[2 * size, 2 * size, 3 * size, 3 * size], [3.0, 3.0, 3.0, 3.0], [5.0, 6.0, 2.0, 1.0]]
    return np.concatenate([boxes, np.array(extra)]).astype("float32")


def _run(model, feeds, dynamic=False):
    """Compare with ONNX Runtime; with a run-time region count the build specialises per count."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert (type(exe).__name__ == "SpecializingExecutable") == dynamic
    got = exe(*feeds.values())
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    rows = exe.executable_for(*feeds.values()).report.rows if dynamic else exe.report.rows
    assert all(r.source not in ("reference", "fallback") for r in rows), exe.report


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio, out", [(1, (3, 3)), (2, (7, 5)), (3, (2, 4))])
def test_roi_align_with_run_time_regions(mode, ctm, ratio, out):
    rng = np.random.default_rng(ratio)
    x = rng.standard_normal((2, 3, 10, 12)).astype("float32")
    rois = _rois(rng, 5, 12)
    batch = rng.integers(0, 2, len(rois)).astype("int64")
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=out[0],
                            output_width=out[1], sampling_ratio=ratio, spatial_scale=0.75,
                            coordinate_transformation_mode=ctm)
    graph = helper.make_graph([node], "g", [_vi("x", x.shape), _vi("rois", rois.shape),
                                            _vi("batch", batch.shape, TensorProto.INT64)], [_vi("y", None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    _run(model, {"x": x, "rois": rois, "batch": batch})


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_adaptive_grid_with_constant_regions(mode):
    """sampling_ratio 0: each region's grid is ceil(its extent / bins), so regions differ."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 16, 16)).astype("float32")
    rois = _rois(rng, 6, 16)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, output_height=3,
                            output_width=2, spatial_scale=1.0)
    batch = np.zeros(len(rois), "int64")
    inits = [numpy_helper.from_array(rois, "rois"), numpy_helper.from_array(batch, "batch")]
    graph = helper.make_graph([node], "g", [_vi("x", x.shape)], [_vi("y", None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    _run(model, {"x": x})


def test_roi_align_with_a_run_time_number_of_regions():
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2, output_width=2,
                            sampling_ratio=2, spatial_scale=0.5)
    graph = helper.make_graph([node], "g", [_vi("x", (1, 2, 8, 8)), _vi("rois", ["R", 4]),
                                            _vi("batch", ["R"], TensorProto.INT64)], [_vi("y", None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 8, 8)).astype("float32")
    for n in (1, 4):
        rois = _rois(rng, n, 16)
        _run(model, {"x": x, "rois": rois, "batch": np.zeros(len(rois), "int64")}, dynamic=True)


def test_roi_align_adaptive_grid_with_run_time_regions_is_refused():
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2, output_width=2)
    graph = helper.make_graph([node], "g", [_vi("x", (1, 2, 8, 8)), _vi("rois", [3, 4]),
                                            _vi("batch", [3], TensorProto.INT64)], [_vi("y", None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    with pytest.raises(OnnxImportError, match="sampling_ratio 0"):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize("pooled, scale", [((2, 2), 1.0), ((3, 4), 0.5), ((5, 5), 0.25)])
def test_max_roi_pool(pooled, scale):
    """Regions inside, across and outside the map (whose bins are 0), from two images."""
    rng = np.random.default_rng(pooled[1])
    x = rng.standard_normal((2, 3, 9, 11)).astype("float32")
    boxes = _rois(rng, 6, 11 / scale)
    rois = np.concatenate([rng.integers(0, 2, (len(boxes), 1)).astype("float32"), boxes], axis=1)
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=list(pooled),
                            spatial_scale=scale)
    graph = helper.make_graph([node], "g", [_vi("x", x.shape), _vi("rois", rois.shape)], [_vi("y", None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    _run(model, {"x": x, "rois": rois})


def _clustered_boxes(rng, batches, n, center):
    """Boxes in a few overlapping clusters (so suppression matters), some with tied scores."""
    centres = rng.uniform(0, 50, (batches, 4, 2))[:, rng.integers(0, 4, n)]
    xy = centres + rng.normal(0, 3, (batches, n, 2))
    wh = rng.uniform(5, 15, (batches, n, 2))
    if center:
        return np.concatenate([xy, wh], axis=2).astype("float32")
    corners = [xy[..., 1:2], xy[..., 0:1], xy[..., 1:2] + wh[..., 1:2], xy[..., 0:1] + wh[..., 0:1]]
    boxes = np.concatenate(corners, axis=2)
    boxes[:, ::5] = boxes[:, ::5][..., [2, 3, 0, 1]]  # some given by the other two corners
    return boxes.astype("float32")


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limit, iou, floor",
                         [(3, 0.5, None), (10, 0.3, 0.4), (100, 0.7, 0.0), (0, 0.5, None)])
def test_non_max_suppression(center, limit, iou, floor):
    rng = np.random.default_rng(limit + center)
    batches, classes, n = 2, 3, 24
    boxes = _clustered_boxes(rng, batches, n, center)
    scores = rng.random((batches, classes, n)).astype("float32")
    scores[:, :, 1::6] = scores[:, :, :1]  # ties with box 0
    names = ["boxes", "scores", "limit", "iou"] + ([] if floor is None else ["floor"])
    node = helper.make_node("NonMaxSuppression", names, ["y"], center_point_box=center)
    feeds = {"boxes": boxes, "scores": scores, "limit": np.array([limit], "int64"),
             "iou": np.array([iou], "float32")}
    inputs = [_vi("boxes", boxes.shape), _vi("scores", scores.shape), _vi("limit", [1], TensorProto.INT64),
              _vi("iou", [1])]
    if floor is not None:
        feeds["floor"] = np.array([floor], "float32")
        inputs.append(_vi("floor", [1]))
    graph = helper.make_graph([node], "g", inputs, [_vi("y", None, TensorProto.INT64)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    got = exe(*feeds.values())
    np.testing.assert_array_equal(got, want)
    assert (len(want) > 0) == (limit > 0)
    if limit >= n:  # no limit reached: some boxes were suppressed
        assert len(want) < batches * classes * n
    fallbacks = {r.name for r in exe.provider.report() if r.source in ("reference", "fallback")}
    assert all("non_max_suppression" in name for name in fallbacks), fallbacks
