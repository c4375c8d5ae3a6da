"""A model tune's state takes on a task after it started (`TuningState.add`: the chosen build's
kernels no task covered): the new task is tuned into the log, re-measured and reported like the
first ones. Oracle: the log itself (the trials and the pick it holds for the new task)."""

from __future__ import annotations

import pytest

import tuning_db
from autorelay.frontend import zoo
from search.extract import Extraction, extract_tasks
from search.measure import Measurer, TimingSettings
from search.tune import logged_trials
from search.tune_report import Progress
from search.tuning_state import TuningState

pytestmark = pytest.mark.cpu

FAST = TimingSettings(number=1, repeat=2, min_repeat_ms=2.0, warmup=1, timeout=10.0)


def test_a_task_added_later_is_tuned_logged_and_reported(tmp_path):
    mod, params = zoo.get("mlp")
    tasks = extract_tasks(mod, params, threads=1)
    assert len(tasks) >= 2
    first, later = tasks[0], tasks[1]
    ex = Extraction([first], [], 0.0)
    measurer = Measurer(settings=FAST)
    try:
        with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
            run = db.start_run(model="mlp")
            st = TuningState(ex, "random", db, measurer, Progress(), 0, run, 4)
            (i,) = st.add([later])
            assert i == 1 and ex.tasks == [first, later]  # the extraction's list grows in place
            assert st.one_round(i, 4)[0] == 4 and st.new == [0, 4]
            st.settle(i)
            assert logged_trials(db, later) == 4 and db.pick(later.key, str(later.target)) is not None
            rows = st.rows()
            assert [r.task.key for r in rows] == [first.key, later.key]
            assert rows[1].new_trials == 4 and rows[1].best_s > 0
            assert {r.run for r in db.history(later.key, str(later.target))} == {run}
    finally:
        measurer.close()
