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


def _suppress(a: tuple, b: tuple, iou: np.ndarray) -> np.ndarray:
    """ONNX's rule, for boxes given as (y_min, x_min, y_max, x_max, area, area > 0) whose entries
    broadcast against each other (one box against a window, or pairs): the intersection and
    both areas are positive and intersection / union exceeds the threshold, in the boxes' dtype."""
    with np.errstate(divide="ignore", invalid="ignore"):  # infinite and NaN boxes are never valid
        ih = np.minimum(a[2], b[2]) - np.maximum(a[0], b[0])
        iw = np.minimum(a[3], b[3]) - np.maximum(a[1], b[1])
        inter = iw * ih
        union = a[4] + b[4] - inter
        valid = (ih > 0) & (iw > 0) & (inter > 0) & a[5] & b[5] & (union > 0)
        return valid & (inter / np.where(valid, union, 1) > iou)


# pairs of horizontally overlapping boxes NMS tests at once, and at most in all (about 1 s)
PAIR_CHUNK, MOST_PAIRS = 2_000_000, 50_000_000


class Overlaps:
    """Whether box i suppresses box j, ONNX's rule: their intersection and both areas are positive
    and intersection / union exceeds the threshold (computed in the boxes' dtype).

    A detector hands the greedy selection thousands of boxes (SSDlite: 11,574, the classes offset
    apart so that no two classes overlap) and it keeps most of them: an n x n matrix took 28 s and
    gigabytes, a row per kept box 3.5 s. So `suppressed(i)` tests only the boxes whose left edge
    lies within the widest box's width before box i's, sorted by left edge (`np.searchsorted`):
    no other box can intersect it. Boxes with a non-finite coordinate are tested against every box."""

    def __init__(self, boxes: np.ndarray, center: bool, iou_threshold: np.ndarray) -> None:
        self.y0, self.x0, self.y1, self.x1 = _corners(boxes, center)
        with np.errstate(invalid="ignore"):  # an infinite box has a NaN area: it overlaps nothing
            self.area = (self.x1 - self.x0) * (self.y1 - self.y0)
        self.iou = iou_threshold
        finite = bool(np.isfinite(boxes).all()) and len(boxes) > 0
        # the boxes in the order of their left edges, so that a window of them is a slice (a view)
        self.order = np.argsort(self.x0, kind="stable") if finite else np.arange(len(boxes))
        # (y_min, x_min, y_max, x_max, area, area > 0) of the boxes in that order
        self.sorted = tuple(v[self.order] for v in (self.y0, self.x0, self.y1, self.x1, self.area))
        self.sorted += (self.sorted[4] > 0,)
        self.widest = (self.x1 - self.x0).max() if finite else None

    def suppressed(self, i: int) -> np.ndarray:
        """The indices of the boxes box i suppresses (itself among them, when its area is positive)."""
        if not self.area[i] > 0:
            return self.order[:0]
        lo, hi = 0, len(self.order)
        if self.widest is not None:
            lefts = self.sorted[1]
            lo = np.searchsorted(lefts, self.x0[i] - self.widest, side="left")
            hi = np.searchsorted(lefts, self.x1[i], side="right")
        box = (self.y0[i], self.x0[i], self.y1[i], self.x1[i], self.area[i], True)
        return self.order[lo:hi][_suppress(box, tuple(v[lo:hi] for v in self.sorted), self.iou)]

    def neighbours(self, chunk: int = PAIR_CHUNK,
                   most: int = MOST_PAIRS) -> tuple[np.ndarray, np.ndarray] | None:
        """Every box's `suppressed` list at once, as (starts, indices): box i's are
        indices[starts[i]:starts[i + 1]]. None for boxes with a non-finite coordinate, or when
        more than `most` pairs of boxes have overlapping horizontal spans (then the greedy loop
        asks `suppressed` per kept box, which is cheaper when it keeps few of many overlapping
        boxes).

        Why: a detector keeps most of its thousands of boxes (Faster R-CNN's batched NMS keeps
        about 20,000 of 23,000), and a NumPy search per kept box costs about 90 us. The pairs
        come from one sorted sweep: box j is box i or follows it in left-edge order, and starts
        before i ends. The rule is symmetric, so each pair is tested once and listed both ways.
        They are tested `chunk` pairs at a time (about 80 bytes of temporaries each)."""
        if self.widest is None:
            return None
        n = len(self.order)
        # the sorted boxes from i on that start before i ends
        ends = np.searchsorted(self.sorted[1], self.sorted[3], side="right")
        counts = np.maximum(ends - np.arange(n), 0)
        upto = np.cumsum(counts)
        if n and int(upto[-1]) > most:
            return None
        found, row = [], 0
        while row < n:  # rows [row, stop) hold at most `chunk` pairs (or are one row)
            before = int(upto[row - 1]) if row else 0
            stop = max(row + 1, int(np.searchsorted(upto, before + chunk, side="right")))
            found.append(self._hits(row, counts[row:stop]))
            row = stop
        a = np.concatenate([f[0] for f in found]) if found else self.order[:0]
        b = np.concatenate([f[1] for f in found]) if found else self.order[:0]
        other = a != b  # a box and itself are listed once
        src, dst = np.concatenate([a, b[other]]), np.concatenate([b, a[other]])
        by_src = np.argsort(src, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
        return starts, dst[by_src]

    def _hits(self, row: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The suppressing pairs (box indices, each pair once) among the `counts[k]` candidates
        of sorted row `row + k`: that box and the `counts[k]` boxes from it on."""
        first = np.repeat(np.arange(row, row + len(counts)), counts)
        offsets = np.cumsum(counts) - counts
        second = first + np.arange(len(first)) - np.repeat(offsets, counts)
        hit = _suppress(tuple(v[first] for v in self.sorted), tuple(v[second] for v in self.sorted), self.iou)
        return self.order[first[hit]], self.order[second[hit]]


def _nms_ref(attrs: Attrs, boxes: np.ndarray, scores: np.ndarray, max_output: np.ndarray,
             iou_threshold: np.ndarray, score_threshold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    batches, classes, n = scores.shape
    limit = max(int(max_output), 0)
    iou, floor = iou_threshold.astype(boxes.dtype), score_threshold.astype(scores.dtype)
    out = np.zeros((batches * classes * n, 3), "int64")
    count = 0
    for b in range(batches):
        suppresses = Overlaps(boxes[b], attrs["center_point_box"], iou)
        lists = suppresses.neighbours()
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
                if lists is None:
                    removed[suppresses.suppressed(i)] = True
                else:
                    removed[lists[1][lists[0][i]:lists[0][i + 1]]] = True
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
