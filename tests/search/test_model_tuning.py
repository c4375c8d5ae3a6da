"""Tuning a whole (tiny) model end to end into a temporary SQLite log: the log holds every
measurement, the compile step applies tuned schedules, the tuned executable matches the reference
interpreter, a rerun resumes without re-measuring, and Ctrl-C keeps what was measured."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import autorelay
import tuning_db
from autorelay.lower import model_key
from search import tune_model
from search.extract import BoundSource
from search.measure import TimingSettings
from search.model_tuning import Progress
from search.models import compile_model, load_model, run_inputs, tuning_target

pytestmark = pytest.mark.cpu

FAST = TimingSettings(number=1, repeat=2, min_repeat_ms=2.0, warmup=1, timeout=10.0)


def _interpreter(model) -> np.ndarray:
    args = [model.inputs.get(p.name_hint, model.params.get(p.name_hint)) for p in model.mod["main"].params]
    return np.asarray(autorelay.evaluate(model.mod, *args))


def _measured(db, task, target: str) -> list:
    return [r for r in db.history(task.key, target) if r.runner_version not in tuning_db.RETIMED]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('tune') / 'tuning.db'}"
    model = load_model("mlp")
    result = tune_model(model, trials=12, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                        batch=4)
    return model, url, result


def test_log_holds_every_measurement(tuned):
    _, url, result = tuned
    assert result.new_trials == 12 and not result.interrupted
    with tuning_db.open(url) as db:
        rows = {r.task.key: _measured(db, r.task, result.target) for r in result.rows}
        assert sum(len(v) for v in rows.values()) == 12
        for r in result.rows:
            assert len(rows[r.task.key]) == r.trials  # table and log agree
            configs = [tuple(sorted(x.config["knobs"].items())) for x in rows[r.task.key]]
            assert len(set(configs)) == len(configs)  # no config measured twice
        assert [x.status for x in db.runs()] == ["finished"]
    tuned_rows = [r for r in result.rows if r.trials]
    assert len(tuned_rows) >= 2  # 12 trials in rounds of 4 reach several tasks
    for r in tuned_rows:
        assert r.best_s <= r.default_s  # the default is in the final interleaved rounds
        assert np.isfinite(r.default_s) and r.default_s > 0


def test_compile_applies_tuned_schedules_and_matches_interpreter(tuned):
    model, url, result = tuned
    comp = compile_model(model, url, threads=1)
    assert comp.source_counts.get("tuned", 0) >= sum(1 for r in result.rows if r.trials)
    got = np.asarray(comp.exe(*[model.inputs[n] for n in comp.exe.input_names]))
    want = _interpreter(model)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(float(np.abs(want).max()), 1e-3))
    # the end-to-end comparison ran on the same inputs and agreed with the default build
    assert result.max_abs_diff < 1e-4 and result.latency_before_s > 0 and result.latency_after_s > 0
    assert result.source_counts.get("tuned", 0) >= 1
    assert result.output_scale == pytest.approx(np.abs(want).max(), rel=1e-4)
    assert "computes wrongly" not in result.table()
    wrong = replace(result, max_abs_diff=0.5 * result.output_scale)  # as a miscompiled kernel leaves it
    assert "differ by" in wrong.table() and "50.0% of the outputs' magnitude" in wrong.table()


def test_builds_disagree_beyond_rounding_only():
    from search.models import disagreement, output_scale

    assert output_scale((np.array([1.0, -4.0, np.inf]), np.array([[2.0]]))) == 4.0
    assert output_scale(np.zeros(3)) == 1.0  # no magnitude: differences count absolutely
    assert disagreement("a and b", 0.03, 4.0) is None  # under 1%: rounding (Winograd, sum orders)
    assert "a and b differ by 0.05, 1.2%" in disagreement("a and b", 0.05, 4.0)
    assert disagreement("a and b", float("nan"), 4.0) is None  # NaN in both outputs says nothing
    assert "differ by inf" in disagreement("a and b", float("inf"), 4.0)  # not even the same count


def test_build_uses_the_remeasured_pick(tuned):
    """The build applies the winner of the interleaved re-measurement, not the luckiest search time,
    unless it then ran slower in the model than its default or a runner-up, which replaces it."""
    _, url, result = tuned
    replaced = {c.key: c.chosen for c in result.in_place if not c.kept}
    assert {c.key for c in result.in_place} <= {r.task.key for r in result.rows if r.config is not None}
    with tuning_db.open(url) as db:
        src = BoundSource(db, result.target, [r.task for r in result.rows])
        for r in result.rows:
            if r.config is not None:
                got = src.lookup(r.task.key, "llvm")
                want = replaced.get(r.task.key, r.config)
                assert (got.config, got.kind) == (want.to_json(), "exact")


def test_python_build_with_the_plain_source_uses_what_tune_logged(tuned):
    """`tuning_db.open(url).schedule_source("llvm")` answers a build on this host, with whatever
    thread count the build uses: schedules tuned for another count are used, and the report says so."""
    model, url, result = tuned
    with tuning_db.open(url) as db:
        (run,) = [r for r in db.runs() if r.info.get("target") == result.target]
        assert run.info["model_key"] == model_key(model.mod) and run.info["pipeline"] == "default"
        exe = autorelay.build(model.mod, params=model.params, schedules=db.schedule_source("llvm"))
    rows = [r for r in exe.report.rows if r.source == "tuned"]
    assert rows and exe.pipeline == "default"
    if exe.target.threads != 1:  # tuned with threads=1 above
        assert all("tuned for 1 thread" in r.detail for r in rows)
    np.testing.assert_allclose(exe(*run_inputs(exe, model)), _interpreter(model), rtol=1e-4, atol=1e-4)


def test_rerun_resumes_without_measuring_again(tuned):
    model, url, _ = tuned
    again = tune_model(model, trials=12, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                       batch=4, compare=False)
    assert again.new_trials == 0
    assert sum(r.trials for r in again.rows) == 12


class _CtrlC(Progress):
    """Presses Ctrl-C after the first measured batch."""

    def __init__(self) -> None:
        self.batches = 0

    def trials(self, task: int, trials: int, best_s: float, spent: int) -> None:
        self.batches += 1
        if self.batches == 1:
            raise KeyboardInterrupt


def test_ctrl_c_keeps_measurements_and_resumes(tmp_path):
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    model = load_model("mlp")
    stopped = tune_model(model, trials=8, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                         batch=4, progress=_CtrlC())
    assert stopped.interrupted and stopped.new_trials == 4
    assert "interrupted" in stopped.table()
    target = tuning_target("llvm", 1)
    with tuning_db.open(url) as db:
        assert sum(len(_measured(db, r.task, target)) for r in stopped.rows) == 4
        assert [x.status for x in db.runs()] == ["interrupted"]
    resumed = tune_model(model, trials=8, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                         batch=4, compare=False)
    assert resumed.new_trials == 4 and sum(r.trials for r in resumed.rows) == 8


def test_bad_arguments_are_named():
    model = load_model("mlp")
    with pytest.raises(ValueError, match="unknown tuner 'annealing'"):
        tune_model(model, trials=4, tuner="annealing")
    with pytest.raises(ValueError, match="trials must be >= 0"):
        tune_model(model, trials=-1)
    with pytest.raises(ValueError, match="unknown model 'resnet-7'"):
        load_model("resnet-7")
