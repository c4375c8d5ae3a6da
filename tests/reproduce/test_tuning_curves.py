"""The search-efficiency analysis (`reproduce.tuning_curves`) on synthetic histories with
hand-computed answers: GFLOP/s of a trial, best-so-far curves, trials to the target, ratios and their
median, the verdicts of both experiments that use it."""

from __future__ import annotations

import math

import pytest

from reproduce import tuning_curves as tc


def test_trial_gflops_uses_the_median_repeat_and_scores_failures_zero() -> None:
    # median of (2, 1, 3) ms is 2 ms; 4e6 FLOP / 2e-3 s = 2e9 FLOP/s
    assert tc.trial_gflops([2e-3, 1e-3, 3e-3], False, 4e6) == pytest.approx(2.0)
    assert tc.trial_gflops([1e-3, 3e-3], False, 4e6) == pytest.approx(2.0)  # median 2 ms (even count)
    assert tc.trial_gflops([1e-3], True, 4e6) == 0.0
    assert tc.trial_gflops([], False, 4e6) == 0.0


def test_best_so_far_and_trials_to_reach() -> None:
    curve = tc.best_so_far([1.0, 3.0, 2.0, 5.0, 4.0])
    assert curve == [1.0, 3.0, 3.0, 5.0, 5.0]
    assert tc.trials_to_reach(curve, 4.75) == 4.0
    assert tc.trials_to_reach(curve, 3.0) == 2.0  # reaching exactly counts
    assert tc.trials_to_reach(curve, 5.01) == math.inf
    assert tc.trials_to_reach([], 1.0) == math.inf


def test_efficiency_ratio_cases() -> None:
    assert tc.efficiency_ratio(4, 10, 32) == (0.4, False)
    assert tc.efficiency_ratio(4, math.inf, 32) == (0.125, True)  # random needed > 32: ratio < 4/32
    assert tc.efficiency_ratio(math.inf, 10, 32) == (math.inf, False)
    r, bounded = tc.efficiency_ratio(math.inf, math.inf, 32)
    assert math.isnan(r) and not bounded


def test_median_finite_skips_nan_keeps_inf() -> None:
    assert tc.median_finite([0.2, math.nan, math.inf, 0.5]) == 0.5
    assert tc.median_finite([0.1, 0.3]) == pytest.approx(0.2)
    assert math.isnan(tc.median_finite([math.nan]))


def test_mean_normalised_curve_over_the_shared_length() -> None:
    got = tc.mean_normalised_curve([[1.0, 2.0], [5.0, 10.0, 10.0]], [2.0, 10.0])
    assert got == pytest.approx([0.5, 1.0])


def test_analyse_task_hand_computed() -> None:
    # best-known 100 (from tpe); 95% target = 95. xgb reaches it at trial 3, random at trial 6.
    hist = {
        "xgb": [[10, 50, 96, 20]],
        "random": [[10, 20, 30, 40, 60, 97, 99]],
        "tpe": [[100, 5]],
    }
    r = tc.analyse_task("conv", hist, default_speed=50.0)
    assert r.best_known == 100
    assert r.trials == {"xgb": 3.0, "random": 6.0, "tpe": 1.0}
    assert r.budget == {"xgb": 4, "random": 7, "tpe": 2}
    assert r.curves["xgb"] == [10, 50, 96, 96]
    assert r.ratio == pytest.approx(0.5) and not r.ratio_bounded
    assert r.default_frac == pytest.approx(0.5) and not r.default_reaches


def test_analyse_task_takes_medians_over_seeds() -> None:
    # seed 0 reaches 95 at trial 1, seed 1 at trial 3: median 2; random never does in 4 trials.
    hist = {"xgb": [[96, 1, 1, 1], [10, 10, 100, 1]], "random": [[1, 2, 3, 4], [4, 3, 2, 1]]}
    r = tc.analyse_task("conv", hist, default_speed=96.0)
    assert r.trials["xgb"] == 2.0
    assert r.trials["random"] == math.inf
    assert r.curves["xgb"] == [53, 53, 98, 98]  # point-wise median of (96,96,96,96) and (10,10,100,100)
    assert r.ratio == pytest.approx(2 / 4) and r.ratio_bounded
    assert r.default_reaches


def test_report_table_and_verdicts() -> None:
    a = tc.analyse_task("a", {"xgb": [[100]], "random": [[50, 100]]})  # ratio 1/2
    b = tc.analyse_task("b", {"xgb": [[1, 100]], "random": [[1, 1, 1, 1, 100]]})  # ratio 2/5
    c = tc.analyse_task("c", {"xgb": [[1, 1, 1, 100]], "random": [[1, 100]]})  # ratio 4/2
    text = tc.format_report([a, b, c], ["xgb", "random"])
    assert "median ratio xgb/random over 3 tasks: 0.5" in text  # median of (0.5, 0.4, 2)
    assert "VERDICT: PASS" in text
    text = tc.format_report([a, c], ["xgb", "random"])  # median of (0.5, 2) = 1.25
    assert "1.25" in text and "VERDICT: FAIL" in text
    assert "undetermined" in tc.verdict(math.nan)


def test_analyse_task_with_another_pair_and_a_strict_verdict() -> None:
    # transfer vs scratch: best-known 10; target 9.5. transfer reaches it at trial 2, scratch at 4.
    r = tc.analyse_task("C7", {"xgb-transfer": [[5, 9.6, 1]], "xgb": [[1, 2, 3, 10]]},
                        pair=("xgb-transfer", "xgb"))
    assert r.trials == {"xgb-transfer": 2.0, "xgb": 4.0} and r.ratio == pytest.approx(0.5)
    assert tc.summarise([r]) == tc.Summary(0.5, 1, False, 0.5)
    assert "PASS" in tc.verdict(0.5, 1.0, r.pair, strict=True)
    assert "FAIL" in tc.verdict(1.0, 1.0, r.pair, strict=True)  # as fast is not faster
    assert "PASS" in tc.verdict(1.0, 1.0, r.pair)


def test_a_median_of_upper_bounds_over_the_bar_is_undetermined_not_a_fail() -> None:
    # random never reaches the target within its 4 trials on a and b: xgb/random < 3/4 there
    a = tc.analyse_task("a", {"xgb": [[1, 1, 10, 10]], "random": [[1, 1, 1, 1]]})
    b = tc.analyse_task("b", {"xgb": [[1, 1, 10, 10]], "random": [[1, 1, 1, 1]]})
    c = tc.analyse_task("c", {"xgb": [[1, 1, 1, 10]], "random": [[10]]})  # a real 4x
    assert a.ratio_bounded and a.ratio == pytest.approx(0.75) and not c.ratio_bounded
    s = tc.summarise([a, b, c])
    assert s.median == pytest.approx(0.75) and s.bounded and s.least == 0.0
    assert "VERDICT: undetermined" in tc.verdict(s.median, 0.5, least=s.least)
    assert "undetermined" in tc.format_report([a, b, c], ["xgb", "random"])
    s = tc.summarise([a, c, c])  # the bound cannot move the median (4) under the bar: a FAIL
    assert "VERDICT: FAIL" in tc.verdict(s.median, 0.5, least=s.least)
    s = tc.summarise([a, b])  # upper bounds at or under the bar are a PASS
    assert "VERDICT: PASS" in tc.verdict(s.median, 0.75, least=s.least)


def test_a_missing_seed_is_skipped_not_zero() -> None:
    # seed 1 of random is missing (not measured yet): its median is over seed 0 alone
    r = tc.analyse_task("c", {"xgb": [[1, 10], [10, 1]], "random": [[1, 1, 10], []]})
    assert r.trials == {"xgb": 1.5, "random": 3.0} and r.budget == {"xgb": 2, "random": 3}
