"""Measuring tuning curves into the tuning log: one (task, tuner, seed) run at a time, resumable,
read back as per-trial GFLOP/s.

Each run tunes its own copy of a task, logged under the task's workload key with a `#TAG` suffix
(the tuner, the seed, and any variant such as a transferred model): runs must not see (resume from)
each other's measurements, and a later `autorelay build` never looks these keys up. A run logs
every trial as it lands (`search.tune.tune_task`), so an interrupted run resumes where its log ends
and a rerun with the budget already logged measures nothing. The model-based tuner does not start
from the template's heuristic default: the curve measures search from scratch, as AutoTVM's did.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from search.task import Task

from .tuning_curves import MODEL_TUNER, TaskResult, analyse_task, trial_gflops

# the tuners' names as `autorelay tune --tuner` spells them -> what each needs installed
TUNER_NEEDS = {"xgb": "xgboost", "random": None, "grid": None, "ga": None, "optuna-tpe": "optuna",
               "optuna-cmaes": "cmaes"}


def tuner_unavailable(name: str) -> str | None:
    """Why the tuner `name` (a `search.model_tuning.TUNER_CHOICES` name) cannot run here, or None."""
    import importlib.util

    need = TUNER_NEEDS.get(name)
    if need is None or importlib.util.find_spec(need) is not None:
        return None
    return f"tuner {name} needs the Python package {need} (pip install {need})"


def run_tag(tuner: str, seed: int, variant: str = "") -> str:
    """The log-key suffix of one run: `xgb-s0`, `xgb-transfer-s2`, ..."""
    from search.model_tuning import TUNER_NAMES

    return f"{TUNER_NAMES.get(tuner, tuner)}{'-' + variant if variant else ''}-s{seed}"


def tagged(task: Task, tag: str) -> Task:
    """A copy of `task` whose log key belongs to one run: its own history to resume."""
    return dataclasses.replace(task, key=f"{task.key}#{tag}", _cache={})


def history_gflops(db: Any, task: Task, trials: int) -> list[float]:
    """GFLOP/s of the first `trials` search measurements of `task` in the log, oldest first."""
    from search.tune import REMEASURE_TAG

    recs = [r for r in db.history(task.key, str(task.target)) if r.runner_version != REMEASURE_TAG]
    return [trial_gflops(r.costs, r.error_kind is not None, task.flops) for r in recs[:trials]]


def default_gflops(db: Any, tasks: Sequence[Task]) -> float:
    """The template default's best search figure in any of these (tagged) runs; nan if none
    measured it."""
    from search.tune import REMEASURE_TAG

    found = [trial_gflops(r.costs, r.error_kind is not None, t.flops)
             for t in tasks for r in db.history(t.key, str(t.target))
             if r.runner_version != REMEASURE_TAG and t.config_from_json(r.config) == t.default]
    return max(found, default=math.nan)


class Run(NamedTuple):
    """One run brought up to its budget: its tagged task, the trials this call measured, and how
    many donor measurements pre-trained its model (0: none)."""

    task: Task
    new: int
    transferred: int


def tune_run(task: Task, tuner: str, seed: int, trials: int, db: Any, measurer: Any, *, tag: str,
             donors: Sequence[str] | None = None) -> Run:
    """Bring the run `tag` of `task` up to `trials` measured trials. `donors`: workload keys whose
    logged trials pre-train the model-based tuner (exactly these; None: no transfer, a model from
    scratch)."""
    from search.model_tuning import TUNER_NAMES
    from search.tune import tune_task
    from search.tuners import make_tuner

    name = TUNER_NAMES.get(tuner, tuner)
    tt = tagged(task, tag)
    opts = {"start_from_default": False} if name == MODEL_TUNER else {}
    tu = make_tuner(name, tt, seed, **opts)
    r = tune_task(tt, tu, trials, db, measurer, final=False, transfer=donors is not None,
                  transfer_donors=list(donors) if donors is not None else None)
    return Run(tt, r.trials, getattr(tu, "transferred", 0))


def tune_all(tasks: Sequence[Task], tuners: Sequence[str], seeds: int, trials: int, db: Any,
             measurer: Any, say: Callable[[str], None] = print) -> None:
    """Bring every (task, tuner, seed) run up to `trials` measured trials (resuming)."""
    for task in tasks:
        for tuner in tuners:
            for seed in range(seeds):
                t0 = time.perf_counter()
                new = tune_run(task, tuner, seed, trials, db, measurer, tag=run_tag(tuner, seed)).new
                if new:
                    took = time.perf_counter() - t0
                    say(f"  {task.name} {tuner} seed {seed}: {new} new trials in {took:.1f} s")


def collect(tasks: Sequence[Task], tuners: Sequence[str], seeds: int, trials: int,
            db: Any) -> list[TaskResult]:
    """Each task's analysis from the log (the first `trials` trials of every tuner and seed)."""
    out = []
    for t in tasks:
        runs = {tu: [tagged(t, run_tag(tu, s)) for s in range(seeds)] for tu in tuners}
        hist = {tu: [history_gflops(db, tt, trials) for tt in tts] for tu, tts in runs.items()}
        every = [tt for tts in runs.values() for tt in tts]
        out.append(analyse_task(t.name, hist, default_gflops(db, every)))
    return out


def model_conv_tasks(model: str, image_size: int, threads: int, n: int | None) -> list[Any]:
    """The conv tasks of a zoo model as its build runs them, heaviest first (FLOPs times
    occurrences), the first `n`."""
    from search.extract import extract_tasks
    from search.models import load_model

    m = load_model(model, image_size=image_size)
    tasks = [t for t in extract_tasks(m.mod, m.params, "llvm", threads=threads) if "nn.conv2d" in t.ops]
    if not tasks:
        raise ValueError(f"model {model} at image size {image_size} has no tunable conv kernel")
    tasks.sort(key=lambda t: -t.total_flops)
    return tasks[:n] if n else tasks


__all__ = ["TUNER_NEEDS", "Run", "collect", "default_gflops", "history_gflops", "model_conv_tasks", "run_tag",
           "tagged", "tune_all", "tune_run", "tuner_unavailable"]
