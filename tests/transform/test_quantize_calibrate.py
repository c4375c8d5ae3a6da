"""Calibration: range methods on known distributions, and ranges measured on a real graph."""

from __future__ import annotations

import numpy as np
import pytest
from quantize_nets import images, small_net

from autorelay.transform.quantize import Calibration, calibrate, range_kl, range_max, range_percentile


def test_max_is_the_data_extremes():
    x = np.random.default_rng(0).standard_normal(10_000).astype("float32")
    assert range_max(x) == (float(x.min()), float(x.max()))


def test_percentile_matches_numpy():
    x = np.random.default_rng(1).laplace(size=50_000)
    lo, hi = range_percentile(x, 99.9)
    want_lo, want_hi = np.percentile(x, [0.1, 99.9])
    assert (lo, hi) == (pytest.approx(want_lo), pytest.approx(want_hi))
    with pytest.raises(ValueError, match="percentile"):
        range_percentile(x, 30.0)


def test_kl_clips_the_outliers_of_a_heavy_tail():
    rng = np.random.default_rng(2)
    x = np.concatenate([np.abs(rng.standard_normal(200_000)), np.full(20, 60.0)])  # relu-like + outliers
    lo, hi = range_kl(x)
    assert lo == pytest.approx(0.0, abs=1e-3)
    assert 2.5 < hi < 15.0  # far below the outliers at 60, above the bulk (|N(0,1)| < 2.5: 98.8%)
    assert np.mean(x > hi) < 0.01


def test_kl_on_a_signed_student_t_is_narrower_than_max():
    x = np.random.default_rng(3).standard_t(df=2, size=200_000)
    lo, hi = range_kl(x)
    assert lo < 0 < hi and hi < 0.5 * x.max() and lo > 0.5 * x.min()
    assert np.mean((x < lo) | (x > hi)) < 0.02


def _batches(n: int, batch: int = 4):
    return [{"data": images(batch, seed=s)} for s in range(n)]


def test_calibrate_max_on_a_graph():
    mod = small_net()
    batches = _batches(3)
    cal = calibrate(mod, None, batches, method="max", progress=False)
    data = np.concatenate([b["data"] for b in batches])
    assert cal.range("conv2d_0:in") == pytest.approx((data.min(), data.max()))
    lo, hi = cal.range("conv2d_0:out")  # after relu
    assert lo == 0.0 and hi > 0.0
    # a 2x2 / stride-2 max pool covering the image keeps the maximum: conv2d_1 reads the pooled stem
    assert cal.range("conv2d_1:in")[1] == pytest.approx(hi)
    assert cal.range("conv2d_3:out")[1] <= 6.0  # relu6 epilogue
    assert set(cal.ranges) >= {"add_0:out", "concatenate_0:out", "dense_0:in", "dense_0:out"}
    assert Calibration.from_json(cal.to_json()) == cal


def test_calibrate_percentile_uses_every_value():
    mod = small_net()
    batches = _batches(2)
    cal = calibrate(mod, None, batches, method="percentile", percentile=99.0, progress=False)
    data = np.concatenate([b["data"].reshape(-1) for b in batches])
    assert cal.range("conv2d_0:in") == pytest.approx(tuple(np.percentile(data, [1.0, 99.0])))
    assert cal.options == {"percentile": 99.0}


def test_calibrate_kl_is_within_max():
    mod = small_net()
    batches = _batches(2)
    kl = calibrate(mod, None, batches, method="kl", progress=False)
    mx = calibrate(mod, None, batches, method="max", progress=False)
    for point, (lo, hi) in kl.ranges.items():
        mlo, mhi = mx.range(point)
        assert mlo - 1e-6 <= lo <= hi <= mhi + 1e-6, point


def test_calibrate_with_a_compiled_model_matches_the_interpreter():
    mod = small_net()
    batches = _batches(2)
    ref = calibrate(mod, None, batches, method="max", progress=False)
    built = calibrate(mod, None, batches, method="max", runner="build", progress=False)
    assert set(built.ranges) == set(ref.ranges)
    for point, r in ref.ranges.items():
        assert built.range(point) == pytest.approx(r, rel=1e-4, abs=1e-5), point


def test_calibrate_errors():
    mod = small_net()
    with pytest.raises(ValueError, match="method"):
        calibrate(mod, None, _batches(1), method="mse")
    with pytest.raises(ValueError, match="lacks input"):
        calibrate(mod, None, [{"x": images(4)}], progress=False)
    with pytest.raises(ValueError, match="empty"):
        calibrate(mod, None, [], progress=False)
