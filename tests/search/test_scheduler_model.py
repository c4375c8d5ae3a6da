"""The task scheduler's budget split and the cost model's ranking, against synthetic truths."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from search.cost_model import XGBoostCostModel, relevance, spearman
from search.scheduler import TaskScheduler


def _curve(start: float, floor: float, rate: float):
    """A task whose best latency decays toward `floor` as trials are spent."""
    spent = {"n": 0}

    def step(trials: int) -> tuple[int, float]:
        spent["n"] += trials
        return trials, floor + (start - floor) * math.exp(-rate * spent["n"])

    return step


def test_budget_goes_where_the_weighted_gain_is():
    # task 0: heavy (weight 12) and still improving; task 1: light and flat; task 2: light, improving
    tasks = [_curve(10e-3, 2e-3, 0.02), _curve(1e-3, 1e-3, 0.0), _curve(1e-3, 0.5e-3, 0.02)]
    sched = TaskScheduler([12, 1, 1], budget=320, round_trials=16, epsilon=0.0)
    alloc = sched.run(lambda i, n: tasks[i](n))
    assert sum(alloc) == 320
    assert all(a >= 16 for a in alloc)  # warm-up round for everyone
    assert alloc[0] > alloc[2] > 0 and alloc[0] > alloc[1]
    assert alloc[1] <= alloc[2]
    assert math.isfinite(sched.objective())


def test_finished_tasks_are_skipped_and_the_budget_is_not_overspent():
    size = [40, 1000]  # task 0 (heavy) has only 40 configs in its space
    spent = [0, 0]

    def round_(i: int, n: int) -> tuple[int, float]:
        used = min(n, size[i] - spent[i])
        spent[i] += used
        return used, 1e-3 / (1 + spent[i])

    sched = TaskScheduler([10, 1], budget=200, round_trials=32, epsilon=0.0)
    alloc = sched.run(round_)
    assert alloc[0] == 40 and sum(alloc) == 200 and 0 in sched.finished
    with pytest.raises(ValueError, match="weights must be positive"):
        TaskScheduler([1, 0], budget=10)


def test_relevance_labels():
    np.testing.assert_allclose(relevance([2.0, 1.0, math.inf, 4.0]), [0.5, 1.0, 0.0, 0.25])
    assert relevance([math.inf]).tolist() == [0.0]


def test_xgboost_ranks_held_out_candidates_and_transfers():
    rng = random.Random(0)

    def make(n: int, shift: float):
        x = np.array([[rng.uniform(0, 4) for _ in range(6)] for _ in range(n)])
        cost = np.exp(0.6 * (x[:, 0] - 2) ** 2 + 0.3 * x[:, 1] + shift) * 1e-3
        return x, cost

    x, c = make(120, 0.0)
    m = XGBoostCostModel(seed=0)
    m.fit(x[:80], c[:80])
    assert spearman(m.predict(x[80:]), -c[80:]) > 0.8
    # a model fed only with a similar workload's measurements (other absolute costs) ranks this one
    donor_x, donor_c = make(80, 2.0)
    t = XGBoostCostModel(seed=0)
    t.add_transfer(donor_x, donor_c)
    t.fit([], [])
    assert t.ready and spearman(t.predict(x), -c) > 0.7
