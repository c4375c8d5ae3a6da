"""Detection post-processing: `vision.non_max_suppression`, ONNX's greedy per-class box selection.

Greedy suppression is sequential (whether a box is kept depends on which boxes before it were),
so it has no tensor compute: a build runs it on its NumPy reference and reports it as a fallback.
Its result has a static capacity, every (batch, class, box) triple, of which the first `count`
rows are the selection; the importer cuts them with one dynamic slice, so only that slice and
what follows it run on the VM with a data-dependent shape.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.attrs import Attrs
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.op.elemwise import FLOAT, check_dtype
from autorelay.op.registry import OpDef, OpPattern, register, rel_error
from autorelay.op.shape_utils import ANY, dim_known_different, fmt_shape, prod, tensor_arg


def _nms_rel(arg_types: list[Type], attrs: Attrs) -> Type:
    boxes = tensor_arg("vision.non_max_suppression", arg_types, 0, "boxes")
    scores = tensor_arg("vision.non_max_suppression", arg_types, 1, "scores")
    check_dtype("vision.non_max_suppression", boxes, FLOAT, "boxes")
    if boxes.ndim != 3 or dim_known_different(boxes.shape[2], 4):
        raise rel_error("vision.non_max_suppression", f"boxes must be (batch, boxes, 4), got "
                        f"{fmt_shape(boxes.shape)}")
    if scores.ndim != 3 or dim_known_different(scores.shape[0], boxes.shape[0]) \
            or dim_known_different(scores.shape[2], boxes.shape[1]):
        raise rel_error("vision.non_max_suppression", f"scores must be (batch, classes, boxes) for boxes "
                        f"{fmt_shape(boxes.shape)}, got {fmt_shape(scores.shape)}")
    for i, name in ((2, "max_output"), (3, "iou_threshold"), (4, "score_threshold")):
        t = tensor_arg("vision.non_max_suppression", arg_types, i, name)
        if t.ndim != 0:
            raise rel_error("vision.non_max_suppression", f"{name} must be a scalar, got "
                            f"{fmt_shape(t.shape)}")
    rows = prod(scores.shape)
    return TupleType((TensorType((ANY if rows is None else rows, 3), "int64"), TensorType((1,), "int64")))


def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of each box: from two corners in either order, or from
    (x_centre, y_centre, width, height)."""
    if center:
        x, y, half_w, half_h = boxes[:, 0], boxes[:, 1], boxes[:, 2] / 2, boxes[:, 3] / 2
        return y - half_h, x - half_w, y + half_h, x + half_w
    y0, x0, y1, x1 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    return np.minimum(y0, y1), np.minimum(x0, x1), np.maximum(y0, y1), np.maximum(x0, x1)


def overlaps(boxes: np.ndarray, center: bool, iou_threshold: float) -> np.ndarray:
    """(n, n) bool: whether box i suppresses box j, ONNX's rule: their intersection and both areas
    are positive and intersection / union exceeds the threshold (computed in the boxes' dtype)."""
    y0, x0, y1, x1 = _corners(boxes, center)
    ih = np.minimum(y1[:, None], y1[None, :]) - np.maximum(y0[:, None], y0[None, :])
    iw = np.minimum(x1[:, None], x1[None, :]) - np.maximum(x0[:, None], x0[None, :])
    inter = iw * ih
    area = (x1 - x0) * (y1 - y0)
    union = area[:, None] + area[None, :] - inter
    valid = (ih > 0) & (iw > 0) & (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / np.where(valid, union, 1) > iou_threshold)


def _nms_ref(attrs: Attrs, boxes: np.ndarray, scores: np.ndarray, max_output: np.ndarray,
             iou_threshold: np.ndarray, score_threshold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    batches, classes, n = scores.shape
    limit = max(int(max_output), 0)
    iou, floor = iou_threshold.astype(boxes.dtype), score_threshold.astype(scores.dtype)
    out = np.zeros((batches * classes * n, 3), "int64")
    count = 0
    for b in range(batches):
        suppresses = overlaps(boxes[b], attrs["center_point_box"], iou)
        for c in range(classes):
            s = scores[b, c]
            order = np.argsort(-s, kind="stable")  # highest first; ties: the lower index first
            if attrs["has_score_threshold"]:
                order = order[s[order] > floor]
            removed = np.zeros(n, bool)
            kept = 0
            for i in order:
                if kept >= limit:
                    break
                if removed[i]:
                    continue
                out[count] = (b, c, i)
                count, kept = count + 1, kept + 1
                removed |= suppresses[i]
    return out, np.array([count], "int64")


register(
    OpDef(
        name="vision.non_max_suppression",
        arg_names=("boxes", "scores", "max_output", "iou_threshold", "score_threshold"),
        type_rel=_nms_rel,
        pattern=OpPattern.OPAQUE,
        attrs={"center_point_box": False, "has_score_threshold": False},
        normalize_attrs=lambda a: {k: bool(v) for k, v in a.items()},
        reference=_nms_ref,
        doc="greedy per-class box selection (ONNX NonMaxSuppression): the (batch, class, box) rows "
        "selected, in order, padded to every triple, and their count",
    )
)
