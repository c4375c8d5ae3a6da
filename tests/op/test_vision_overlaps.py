"""NonMaxSuppression's overlap test (`vision.Overlaps`) reads only the boxes near each kept box;
it must find exactly the boxes the full n x n rule finds, for every kind of box: both formats,
reversed corners, zero and negative areas, identical boxes, NaN and infinite coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.op.vision import Overlaps, _corners


def _full_rule(boxes: np.ndarray, center: bool, iou: np.ndarray) -> np.ndarray:
    """ONNX's rule over every pair, written out independently of the windowed search."""
    with np.errstate(invalid="ignore"):
        return _pairs(*_corners(boxes, center), iou)


def _pairs(y0, x0, y1, x1, iou):
    ih = np.minimum(y1[:, None], y1[None, :]) - np.maximum(y0[:, None], y0[None, :])
    iw = np.minimum(x1[:, None], x1[None, :]) - np.maximum(x0[:, None], x0[None, :])
    inter, area = iw * ih, (x1 - x0) * (y1 - y0)
    union = area[:, None] + area[None, :] - inter
    valid = (ih > 0) & (iw > 0) & (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / np.where(valid, union, 1) > iou)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("special", [False, True])
def test_the_windowed_search_finds_what_the_full_rule_finds(center, special):
    rng = np.random.default_rng(int(center) + 2 * int(special))
    for trial in range(20):
        n = int(rng.integers(1, 120))
        xy = rng.uniform(0, 60, (n, 2))
        wh = rng.uniform(-2, 25, (n, 2)) * (rng.random((n, 1)) < 0.9)  # some zero or negative extents
        boxes = np.concatenate([xy, wh] if center else [xy, xy + wh], axis=1)
        boxes[::7] = boxes[::7][:, [2, 3, 0, 1]]  # reversed corners
        if n > 3:
            boxes[3] = boxes[1]  # identical boxes
        if special and n > 5:
            boxes[rng.integers(0, n)] = [np.nan, 1, 2, 3]
            boxes[rng.integers(0, n), rng.integers(0, 4)] = rng.choice([np.inf, -np.inf])
        boxes = boxes.astype("float32")
        iou = np.asarray(rng.choice([0.0, 0.3, 0.7]), "float32")
        want = _full_rule(boxes, center, iou)
        overlaps = Overlaps(boxes, center, iou)
        for i in range(n):
            got = np.zeros(n, bool)
            got[overlaps.suppressed(i)] = True
            np.testing.assert_array_equal(got, want[i], err_msg=f"trial {trial}, box {i}")


@pytest.mark.parametrize("center", [False, True])
def test_the_neighbour_lists_are_what_the_windowed_search_finds(center):
    """`neighbours` (all pairs in chunks, each tested one way) lists for every box what
    `suppressed` returns for it; with more pairs than it may test, or a non-finite box, there are
    no lists."""
    rng = np.random.default_rng(11 + int(center))
    for trial in range(30):
        n = int(rng.integers(1, 150))
        xy = rng.uniform(0, 80, (n, 2))
        wh = rng.uniform(-2, 30, (n, 2)) * (rng.random((n, 1)) < 0.9)
        boxes = np.concatenate([xy, wh] if center else [xy, xy + wh], axis=1)
        boxes[::5] = boxes[::5][:, [2, 3, 0, 1]]
        if n > 3:
            boxes[3] = boxes[1]
        boxes = boxes.astype(rng.choice(["float32", "float64"]))
        overlaps = Overlaps(boxes, center, np.asarray(rng.choice([0.0, 0.3, 0.7]), boxes.dtype))
        starts, lists = overlaps.neighbours(chunk=int(rng.choice([1, 7, 10**6])))  # one or many chunks
        for i in range(n):
            got = np.sort(lists[starts[i]:starts[i + 1]])
            np.testing.assert_array_equal(got, np.sort(overlaps.suppressed(i)),
                                          err_msg=f"trial {trial}, box {i}")
        assert n < 2 or overlaps.neighbours(most=0) is None  # too many pairs: the greedy loop asks per box
    boxes[0, 0] = np.nan
    assert Overlaps(boxes, center, np.asarray(0.5, boxes.dtype)).neighbours() is None
