"""The one rounding rule (`qnn_fixed`) against exact rational arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from autorelay.op import qnn_fixed as F


def _exact(x: int, m: int, shift: int, rounding: str) -> int:
    """x * m / 2**shift rounded as the rule says, in exact rationals."""
    v = Fraction(x * m, 2**shift)
    if rounding == "UPWARD":
        return math.floor(v + Fraction(1, 2))
    mag = math.floor(abs(v) + Fraction(1, 2))
    return -mag if v < 0 else mag


@pytest.mark.parametrize("ratio", [1.0, 0.5, 0.75, 1e-3, 3.7e-6, 2.0**-31, 1234.5, 2.0**29 * (1 - 2**-40)])
def test_multiplier_shift_represents_the_ratio(ratio):
    m, shift = F.multiplier_shift(np.array([ratio]))
    assert 2**30 <= int(m[0]) < 2**31 and 1 <= int(shift[0]) <= 62
    # 31 significant bits: relative error at most half a unit in the last place
    error = abs(Fraction(int(m[0]), 2 ** int(shift[0])) - Fraction(ratio))
    assert error <= Fraction(ratio) * Fraction(1, 2**31)


@pytest.mark.parametrize("ratio", [0.0, -0.5, float("inf"), float("nan"), 2.0**-32, 2.0**29])
def test_unrepresentable_ratios_are_refused(ratio):
    with pytest.raises(F.QuantizationError, match="fixed point"):
        F.multiplier_shift(np.array([ratio]))


@pytest.mark.parametrize("rounding", F.ROUNDINGS)
def test_rescale_equals_exact_rounding(rounding):
    rng = np.random.default_rng(5)
    ratios = np.concatenate([rng.uniform(1e-4, 4.0, 40), [0.5, 0.25, 1.0, 1.5]])
    m, shift = F.multiplier_shift(ratios)
    xs = np.concatenate([rng.integers(-2**31, 2**31, 40), [-3, -2, -1, 0, 1, 2, 3, 2**31 - 1, -2**31]])
    got = F.rescale(xs[:, None], m[None, :], shift[None, :], rounding)
    for i, x in enumerate(xs):
        for j in range(len(ratios)):
            assert got[i, j] == _exact(int(x), int(m[j]), int(shift[j]), rounding), (x, ratios[j])


def test_ties_round_as_named():
    m, shift = F.multiplier_shift(np.array([0.5]))  # exactly one half: every odd x is a tie
    x = np.array([-3, -1, 1, 3])
    np.testing.assert_array_equal(F.rescale(x, m, shift, "UPWARD"), [-1, 0, 1, 2])
    np.testing.assert_array_equal(F.rescale(x, m, shift, "TONEAREST"), [-2, -1, 1, 2])


def test_saturate_clips_to_the_type():
    v = np.array([-300, -129, -128, 0, 127, 128, 300])
    np.testing.assert_array_equal(F.saturate(v, "int8"), [-128, -128, -128, 0, 127, 127, 127])
    np.testing.assert_array_equal(F.saturate(v, "uint8"), [0, 0, 0, 0, 127, 128, 255])


@pytest.mark.parametrize(("ratio_a", "ratio_b"), [(0.4, 1.4), (0.7, 0.7), (3e-3, 0.9), (2.0**29 * 0.99, 1e-4),
                                                  (2.0**-31, 0.5), (1e-9, 7e3)])
def test_a_sum_of_two_rescaled_values_rounds_once(ratio_a, ratio_b):
    """`rescale_sum` over `common_shift` is the real sum of both products rounded once, exactly
    where the ratios are within 2**22 of each other; beyond that the smaller ratio's dropped bits
    move the sum by under 2**-22 of a unit, so it is exact but at such near-ties. Extreme 8-bit
    differences included: nothing overflows int64."""
    (m_a, s_a), (m_b, s_b) = F.multiplier_shift(np.array([ratio_a])), F.multiplier_shift(np.array([ratio_b]))
    ma, mb, shift = F.common_shift(m_a, s_a, m_b, s_b)
    rng = np.random.default_rng(7)
    xa = np.concatenate([[255, -255, 255, -255], rng.integers(-255, 256, 500)])
    xb = np.concatenate([[255, -255, -255, 255], rng.integers(-255, 256, 500)])
    got = F.rescale_sum(xa, ma, xb, mb, shift)
    far = abs(int(s_a[0]) - int(s_b[0])) > F.SUM_HEADROOM
    for a, b, g in zip(xa, xb, got):
        real = (Fraction(int(a) * int(m_a[0]), 2 ** int(s_a[0]))
                + Fraction(int(b) * int(m_b[0]), 2 ** int(s_b[0])))
        want = math.floor(real + Fraction(1, 2))
        above = real + Fraction(1, 2) - want  # in [0, 1): how far from flipping the rounding
        assert int(g) == want or (far and min(above, 1 - above) < Fraction(1, 2**21)), (a, b)
