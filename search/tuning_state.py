"""The state of one model tune (`search.model_tuning.tune_model`): per task its tuner, its view of
the shared log, the trials logged before and measured since, errors and the final pick. Kept
together so that Ctrl-C can report what was done, and so the plan tune's last stage can take on the
chosen build's kernels that no task covered (`add`)."""

from __future__ import annotations

import math
from typing import Any

from search.extract import Extraction, ModelTask
from search.measure import Measurer
from search.sharing import SharedLog, lease_seconds
from search.tune import TuneResult, resume, transfer_from_log, tune_task
from search.tune_report import Progress, TaskRow


class TuningState:
    """The state of one `tune_model` call (kept together so Ctrl-C can report what was done)."""

    def __init__(self, ex: Extraction, tuner: str, db: Any, measurer: Measurer, progress: Progress,
                 seed: int, run: int | None, batch: int) -> None:
        self.tasks, self.db, self.measurer, self.progress = ex.tasks, db, measurer, progress
        self.tuner, self.seed, self.run, self.batch = tuner, seed, run, batch
        self.tuners: list[Any] = []
        self.shared: list[SharedLog] = []
        self.logged: list[int] = []
        self.new: list[int] = []
        self.errors: list[dict[str, int]] = []
        self.finals: list[TuneResult | None] = []
        self._track(ex.tasks)

    def add(self, tasks: list[ModelTask]) -> list[int]:
        """Take on more `tasks` (kernels of the layout search's chosen build that no task covered,
        such as a fusion variant's); returns their indices. `tasks` (the extraction's list, which the
        progress display and the report read) grows in place."""
        start = len(self.tasks)
        self.tasks.extend(tasks)
        self._track(tasks)
        return list(range(start, len(self.tasks)))

    def _track(self, tasks: list[ModelTask]) -> None:
        from search.tuners import make_tuner

        for t in tasks:
            tu = make_tuner(self.tuner, t, self.seed)
            shared = SharedLog(self.db, t, lease_seconds(self.measurer, self.batch))
            self.tuners.append(tu)
            self.shared.append(shared)
            self.logged.append(resume(self.db, t, tu, shared)[0])
            if getattr(tu, "transferred", None) == 0:  # a model-based tuner learns from similar workloads
                transfer_from_log(self.db, t, tu)
            self.new.append(0)
            self.errors.append({})
            self.finals.append(None)

    def one_round(self, i: int, n: int) -> tuple[int, float]:
        tu = self.tuners[i]
        base, before = len(tu.costs), self.new[i]

        def on_batch(done: int, best: float) -> None:  # counts stay right if Ctrl-C lands in here
            self.new[i] = before + done - base
            self.progress.trials(i, done, best, sum(self.new))

        r = tune_task(self.tasks[i], tu, base + n, self.db, self.measurer, batch=self.batch, run=self.run,
                      from_log=False, final=False, transfer=False, on_batch=on_batch, shared=self.shared[i])
        self.new[i] = before + r.trials
        for k, v in r.errors.items():
            self.errors[i][k] = self.errors[i].get(k, 0) + v
        # configs the round added to the task, measured here or by other runs sharing the log:
        # the model's budget is one budget for all of them
        return len(tu.costs) - base, tu.best_cost

    def settle(self, i: int) -> None:
        """The interleaved re-measurement of task i's top candidates against its default (or, when
        nothing new was measured, the last one in the log)."""
        self.finals[i] = tune_task(self.tasks[i], self.tuners[i], 0, self.db, self.measurer, run=self.run,
                                   from_log=False, transfer=False, reuse_pick=self.new[i] == 0,
                                   shared=self.shared[i])
        self.progress.final(i, self.finals[i])

    def rows(self) -> list[TaskRow]:
        rows = []
        for i, t in enumerate(self.tasks):
            tu, f = self.tuners[i], self.finals[i]
            trials = self.logged[i] + self.new[i]
            if f is not None:
                rows.append(TaskRow(t, trials, self.new[i], f.default_cost, f.best_cost, f.best_cost_search,
                                    f.best_config, self.errors[i]))
            else:  # interrupted before the final pick: search figures only
                cfg = t.config(tu.best_index) if tu.best_index >= 0 else None
                rows.append(TaskRow(t, trials, self.new[i], math.nan, tu.best_cost, tu.best_cost, cfg,
                                    self.errors[i]))
        return rows


__all__ = ["TuningState"]
