"""The search-efficiency experiment: its analysis on synthetic histories with hand-computed answers,
and one tiny real run (one small ResNet-18 conv task, 6 trials, random + xgb) end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from experiment_scripts import load_script

se = load_script("search_efficiency")


def test_trial_gflops_uses_the_median_repeat_and_scores_failures_zero() -> None:
    # median of (2, 1, 3) ms is 2 ms; 4e6 FLOP / 2e-3 s = 2e9 FLOP/s
    assert se.trial_gflops([2e-3, 1e-3, 3e-3], False, 4e6) == pytest.approx(2.0)
    assert se.trial_gflops([1e-3, 3e-3], False, 4e6) == pytest.approx(2.0)  # median 2 ms (even count)
    assert se.trial_gflops([1e-3], True, 4e6) == 0.0
    assert se.trial_gflops([], False, 4e6) == 0.0


def test_best_so_far_and_trials_to_reach() -> None:
    curve = se.best_so_far([1.0, 3.0, 2.0, 5.0, 4.0])
    assert curve == [1.0, 3.0, 3.0, 5.0, 5.0]
    assert se.trials_to_reach(curve, 4.75) == 4.0
    assert se.trials_to_reach(curve, 3.0) == 2.0  # reaching exactly counts
    assert se.trials_to_reach(curve, 5.01) == math.inf
    assert se.trials_to_reach([], 1.0) == math.inf


def test_efficiency_ratio_cases() -> None:
    assert se.efficiency_ratio(4, 10, 32) == (0.4, False)
    assert se.efficiency_ratio(4, math.inf, 32) == (0.125, True)  # random needed > 32: ratio < 4/32
    assert se.efficiency_ratio(math.inf, 10, 32) == (math.inf, False)
    r, bounded = se.efficiency_ratio(math.inf, math.inf, 32)
    assert math.isnan(r) and not bounded


def test_median_finite_skips_nan_keeps_inf() -> None:
    assert se.median_finite([0.2, math.nan, math.inf, 0.5]) == 0.5
    assert se.median_finite([0.1, 0.3]) == pytest.approx(0.2)
    assert math.isnan(se.median_finite([math.nan]))


def test_mean_normalised_curve_over_the_shared_length() -> None:
    got = se.mean_normalised_curve([[1.0, 2.0], [5.0, 10.0, 10.0]], [2.0, 10.0])
    assert got == pytest.approx([0.5, 1.0])


def test_analyse_task_hand_computed() -> None:
    # best-known 100 (from tpe); 95% target = 95. xgb reaches it at trial 3, random at trial 6.
    hist = {
        "xgb": [[10, 50, 96, 20]],
        "random": [[10, 20, 30, 40, 60, 97, 99]],
        "tpe": [[100, 5]],
    }
    r = se.analyse_task("conv", hist, default_speed=50.0)
    assert r.best_known == 100
    assert r.trials == {"xgb": 3.0, "random": 6.0, "tpe": 1.0}
    assert r.budget == {"xgb": 4, "random": 7, "tpe": 2}
    assert r.curves["xgb"] == [10, 50, 96, 96]
    assert r.ratio == pytest.approx(0.5) and not r.ratio_bounded
    assert r.default_frac == pytest.approx(0.5) and not r.default_reaches


def test_analyse_task_takes_medians_over_seeds() -> None:
    # seed 0 reaches 95 at trial 1, seed 1 at trial 3: median 2; random never does in 4 trials.
    hist = {"xgb": [[96, 1, 1, 1], [10, 10, 100, 1]], "random": [[1, 2, 3, 4], [4, 3, 2, 1]]}
    r = se.analyse_task("conv", hist, default_speed=96.0)
    assert r.trials["xgb"] == 2.0
    assert r.trials["random"] == math.inf
    assert r.curves["xgb"] == [53, 53, 98, 98]  # point-wise median of (96,96,96,96) and (10,10,100,100)
    assert r.ratio == pytest.approx(2 / 4) and r.ratio_bounded
    assert r.default_reaches


def test_report_table_and_verdicts() -> None:
    a = se.analyse_task("a", {"xgb": [[100]], "random": [[50, 100]]})  # ratio 1/2
    b = se.analyse_task("b", {"xgb": [[1, 100]], "random": [[1, 1, 1, 1, 100]]})  # ratio 2/5
    c = se.analyse_task("c", {"xgb": [[1, 1, 1, 100]], "random": [[1, 100]]})  # ratio 4/2
    text = se.format_report([a, b, c], ["xgb", "random"])
    assert "median ratio xgb/random over 3 tasks: 0.5" in text  # median of (0.5, 0.4, 2)
    assert "VERDICT: PASS" in text
    text = se.format_report([a, c], ["xgb", "random"])  # median of (0.5, 2) = 1.25
    assert "1.25" in text and "VERDICT: FAIL" in text
    assert "undetermined" in se.verdict(math.nan)


def test_bad_arguments_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        se.parse_args(["--tuners", "xgb,annealing"])
    assert "annealing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        se.parse_args(["--trials", "0"])
    assert "--trials" in capsys.readouterr().err


def test_tiny_real_run_logs_trials_resumes_and_saves_the_plot(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import tuning_db

    db, plot = tmp_path / "t.db", tmp_path / "curve.png"
    args = ["--image-size", "32", "--tasks", "1", "--trials", "6", "--tuners", "random,xgb",
            "--threads", "1", "--min-repeat-ms", "2", "--db", str(db), "--plot", str(plot)]
    assert se.main(args) == 0
    out = capsys.readouterr().out
    assert "6 new trials" in out and "VERDICT" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    task = se.conv_tasks("resnet-18", 32, 1, 1)[0]
    with tuning_db.open_db(str(db)) as log:
        for tuner in ("random", "xgb"):
            speeds = se.history_gflops(log, se.tagged(task, tuner, 0), 100)
            assert len(speeds) == 6 and max(speeds) > 0
    assert se.main(args) == 0  # everything is logged: the rerun measures nothing new
    assert "new trials" not in capsys.readouterr().out
