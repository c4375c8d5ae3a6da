"""Optuna samplers (TPE, CMA-ES) over the knob positions, through Optuna's ask/tell interface.

Each knob is an integer parameter (its value position), so the sampler sees the space's natural
order (tile sizes ascend). The objective is log(seconds); failed candidates are told as FAIL.
With `storage` (an SQLAlchemy URL, e.g. the tuning log's own SQLite file) the study is kept in that
database under a name derived from the workload key, so a resumed run keeps the sampler's memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from search import space_ops
from search.measure.result import MeasureResult
from search.task import Task
from search.tuners.base import Tuner


class OptunaTuner(Tuner):
    def __init__(self, task: Task, seed: int = 0, *, sampler: str = "tpe",
                 storage: str | None = None) -> None:
        import optuna

        super().__init__(task, seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sampler == "tpe":
            smp = optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True)
        elif sampler == "cmaes":
            try:
                import cmaes  # noqa: F401 - Optuna's CMA-ES sampler needs it
            except ImportError:
                raise ImportError("the CMA-ES tuner needs the 'cmaes' package: pip install cmaes") from None
            smp = optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=4)
        else:
            raise ValueError(f"optuna tuner: unknown sampler {sampler!r} (use 'tpe' or 'cmaes')")
        self.name = f"optuna-{sampler}"
        self.study = optuna.create_study(
            study_name=f"autorelay:{task.key}:{task.target!s}:{sampler}", storage=storage,
            sampler=smp, direction="minimize", load_if_exists=True,
        )
        self._pending: dict[int, list] = {}

    def _ask(self) -> tuple[object, int]:
        trial = self.study.ask()
        digits = [trial.suggest_int(f"k{j}_{k.name}", 0, len(k.values) - 1)
                  for j, k in enumerate(self.space.knobs)]
        return trial, space_ops.from_knob_indices(self.space, digits)

    def _tell(self, trial: object, cost: float) -> None:
        import optuna

        if math.isfinite(cost) and cost > 0:
            self.study.tell(trial, math.log(cost))
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def next_batch(self, n: int) -> list[int]:
        out: list[int] = []
        tries = 0
        while len(out) < n and tries < 20 * n and self.has_next():
            tries += 1
            trial, idx = self._ask()
            if idx in self.visited or idx in out:
                # Already known: tell the sampler what it is (or that it is a duplicate) and ask again.
                self._tell(trial, self.costs.get(idx, math.inf) if idx in self.visited else math.inf)
                continue
            self._pending.setdefault(idx, []).append(trial)
            out.append(idx)
        return out + self._random_unvisited(n - len(out), exclude=set(out))

    def update(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        super().update(indices, results)
        for i, r in zip(indices, results):
            for trial in self._pending.pop(i, []):
                self._tell(trial, r.median)
