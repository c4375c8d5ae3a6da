"""A run stopped while it re-measures its best candidates: the rerun, though it has no new trial to
measure, must compare the configs the stopped run found instead of reusing the older pick."""

from __future__ import annotations

import math

from search_helpers import dense_task

import tuning_db
from search.measure.result import MeasureResult
from search.tune import _logged_pick, tune_task
from search.tuners import make_tuner


class Bench:
    """A measurer whose costs are set by the test: a config's cost is fixed the first time it is
    measured (`price(order)`), and every re-measurement returns that same cost."""

    def __init__(self) -> None:
        self.cost: dict[int, float] = {}
        self.price = lambda n: 2e-3 + n * 1e-6
        self.measured: list[int] = []
        self.remeasured: list[list[int]] = []
        self.rounds: list[int] = []
        self.stop_in_remeasure = False
        self.builder = type("B", (), {"pool": None})()

    def measure(self, task, inputs):  # type: ignore[no-untyped-def]
        out = []
        for inp in inputs:
            self.measured.append(inp.index)
            self.cost.setdefault(inp.index, self.price(len(self.cost)))
            out.append(MeasureResult((self.cost[inp.index],) * 3))
        return out

    def remeasure(self, task, inputs, rounds=5):  # type: ignore[no-untyped-def]
        if self.stop_in_remeasure:
            raise KeyboardInterrupt  # Ctrl-C while the candidates are re-timed
        self.remeasured.append([i.index for i in inputs])
        self.rounds.append(rounds)
        return [MeasureResult((self.cost.get(i.index, 5e-3),) * rounds) for i in inputs]


def test_rerun_finishes_an_interrupted_remeasurement(tmp_path) -> None:
    task = dense_task(16, 24, 32)
    db = tuning_db.open(tmp_path / "log.sqlite")
    bench = Bench()
    tune_task(task, make_tuner("random", task, seed=1), 4, db, bench, batch=2, top_k=2, rounds=3)
    first = db.pick(task.key, str(task.target))
    assert first is not None and first.runner_version == tuning_db.INTERLEAVED

    # the second run finds faster configs (half the cost), then is stopped while re-measuring
    bench.price = lambda n: 1e-3 + n * 1e-6
    n_before = len(bench.cost)
    bench.stop_in_remeasure = True
    try:
        tune_task(task, make_tuner("random", task, seed=2), 8, db, bench, batch=2, top_k=2, rounds=3)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the second run was meant to be stopped")
    found_late = {i: c for i, c in bench.cost.items() if c < 1.5e-3}
    assert found_late and len(bench.cost) > n_before
    want = min(found_late, key=found_late.__getitem__)  # the oracle: the costs this test assigned

    # the rerun: the budget is already spent, so nothing new is measured, but the pick is redone
    bench.stop_in_remeasure = False
    measured = len(bench.measured)
    res = tune_task(task, make_tuner("random", task, seed=3), 8, db, bench, batch=2, top_k=2, rounds=3)
    assert res.trials == 0 and len(bench.measured) == measured
    assert want in bench.remeasured[-1]
    picked = db.pick(task.key, str(task.target))
    assert task.index(task.config_from_json(picked.config)) == want
    assert math.isclose(res.best_cost, found_late[want])

    # and a further rerun, with nothing unfinished, reuses that pick without timing anything
    rounds = len(bench.remeasured)
    tune_task(task, make_tuner("random", task, seed=4), 8, db, bench, batch=2, top_k=2, rounds=3)
    assert len(bench.remeasured) == rounds


def test_a_logged_pick_is_the_latest_re_measurement_alone(tmp_path) -> None:
    """Reusing the log's pick reads the latest re-measurement only: a config of an earlier one,
    no longer a contender, cannot win with its older figure."""
    task = dense_task(16, 24, 32)
    target = str(task.target)
    a, b, c = [x for x in map(task.config, range(8)) if x != task.default][:3]
    tuner = make_tuner("random", task, 0)
    tuner.update([task.index(x) for x in (a, b, c)], [MeasureResult((x,)) for x in (1e-3, 1.1e-3, 3e-3)])
    db = tuning_db.open(tmp_path / "log.sqlite")
    again = tuning_db.INTERLEAVED
    for cfg, cost, at in ((c, 0.5e-3, 100.0), (task.default, 1.0e-3, 100.0),  # c's lucky moment
                          (a, 1.0e-3, 150.0), (b, 1.1e-3, 150.0),  # search trials
                          (a, 0.8e-3, 200.0), (b, 0.9e-3, 200.0), (task.default, 0.85e-3, 200.0)):
        db.record(task.key, target, cfg.to_json(), [cost] * 3, runner_version=again if at != 150.0 else None,
                  recorded_at=at)
    picked = _logged_pick(db, task, tuner, 2)
    assert picked is not None and picked[0] == a and math.isclose(picked[2], 0.8e-3)
    # a search trial after the latest re-measurement: its pick is no longer current
    db.record(task.key, target, c.to_json(), [2e-3], recorded_at=250.0)
    assert _logged_pick(db, task, tuner, 2) is None


def test_a_task_given_no_trial_times_its_default_once(tmp_path) -> None:
    """With no candidate to alternate with, the default's re-measurement is one round, and it is
    logged as the pick a rerun reuses."""
    task = dense_task(16, 24, 32)
    db = tuning_db.open(tmp_path / "log.sqlite")
    bench = Bench()
    res = tune_task(task, make_tuner("random", task, seed=1), 0, db, bench, rounds=5)
    assert bench.remeasured == [[task.index(task.default)]] and bench.rounds == [1]
    assert res.best_config == task.default and res.best_cost == res.default_cost == 5e-3
    picked = db.pick(task.key, str(task.target))
    assert picked.runner_version == tuning_db.INTERLEAVED and picked.config == task.default.to_json()
    tune_task(task, make_tuner("random", task, seed=1), 0, db, bench, rounds=5)
    assert bench.rounds == [1]  # the rerun reads the logged figure
    # a task with candidates still alternates them with the default for every round
    tune_task(task, make_tuner("random", task, seed=1), 2, db, bench, batch=2, rounds=5)
    assert bench.rounds[-1] == 5
