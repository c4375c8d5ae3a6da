"""`tune_task`: propose, measure, log every result as it lands, resume from the log, and finally
re-measure the top candidates interleaved with each other and the default before naming a best.

The tuning log is the source of truth: on start, every logged measurement of this task on this
target is fed to the tuner and counts toward the trial budget, so rerunning an interrupted command
(Ctrl-C or kill -9) continues where the log ends and never re-measures a logged config.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import tuning_db
from autorelay.schedule.space import Config
from search.feature_log import log_features, read_logged_features
from search.measure.local import Measurer
from search.measure.result import ErrorKind, MeasureInput, MeasureResult
from search.sharing import SharedLog, lease_seconds
from search.task import Task
from search.tuners.base import Tuner

log = logging.getLogger(__name__)
REMEASURE_TAG = tuning_db.INTERLEAVED  # the log's mark for rows re-timed interleaved with rivals


@dataclass
class TuneResult:
    task: str
    best_config: Config | None
    best_cost_search: float  # the best figure seen during the search, any config (optimistic under noise)
    best_cost: float  # the chosen config re-measured interleaved with its rivals and the default
    default_cost: float  # the default config, re-measured in the same interleaved rounds
    trials: int  # new measurements this call
    resumed: int  # measurements found in the log at the start
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    curve: list[float] = field(default_factory=list)  # best-so-far cost after each new trial

    @property
    def speedup(self) -> float:
        ok = self.best_cost > 0 and math.isfinite(self.best_cost)
        return self.default_cost / self.best_cost if ok else 0.0


def _fingerprint(task: Task) -> dict[str, Any]:
    t = task.target
    return {"cpu": t.cpu, "features": t.features, "triple": t.triple, "threads": t.threads}


def record_remeasurement(db: Any, task: Task, inputs: Sequence[MeasureInput],
                         results: Sequence[MeasureResult], run: int | None, tag: str = REMEASURE_TAG) -> None:
    """Log configs timed together, alternately, as one batch of re-timed rows (one recorded_at;
    `tag`: alone, or `tuning_db.IN_PLACE`): the log's pick is the fastest of its latest batch
    (`tuning_db.latest_batch`)."""
    at = time.time()
    for inp, r in zip(inputs, results):
        _record(db, task, inp, r, run, tag, at)


def _record(db: Any, task: Task, inp: MeasureInput, res: MeasureResult, run: int | None,
            tag: str | None, at: float | None = None) -> int:
    failed = res.error is not ErrorKind.NONE
    return db.record(task.key, str(task.target), inp.config.to_json(), list(res.costs),
                     workload=task.workload, error=(res.message or res.error.value) if failed else None,
                     error_kind=res.error.value if failed else None, run=run,
                     space_index=inp.index if inp.index >= 0 else None,
                     target_fingerprint=_fingerprint(task), runner_version=tag, recorded_at=at)


def _in_space(task: Task, history: Sequence[tuning_db.Record]) -> list[tuple[int, tuning_db.Record]]:
    """The logged rows of `task` whose config is in its space, with that config's index."""
    out = []
    for rec in history:
        try:
            i = task.index(task.config_from_json(rec.config))
        except (KeyError, TypeError, AttributeError):
            continue
        if i >= 0:
            out.append((i, rec))
    return out


def _trials(rows: Sequence[tuple[int, tuning_db.Record]]) -> set[int]:
    """The configs of `rows` measured as search trials (re-timings of known configs are not)."""
    return {i for i, rec in rows if rec.runner_version not in tuning_db.RETIMED}


def resume(db: Any, task: Task, tuner: Tuner, shared: SharedLog | None = None) -> tuple[int, float]:
    """Feed the logged measurements of `task` to `tuner`; returns (distinct configs, best cost).
    `shared` learns which rows the tuner now holds, so it never feeds them again."""
    read_logged_features(db, task, tuner)
    history = db.history(task.key, str(task.target))
    if shared is not None:
        shared.mine([rec.id for rec in history])
    rows = _in_space(task, history)
    res = [MeasureResult(tuple(rec.costs)) if rec.error_kind is None and rec.costs
           else MeasureResult.failed(ErrorKind.RUNTIME_CRASH, rec.error or "logged failure")
           for _, rec in rows]
    if rows:
        tuner.update([i for i, _ in rows], res)
        log_features(db, task, tuner)
    return len(_trials(rows)), min((r.median for r in res), default=math.inf)


def logged_trials(db: Any, task: Task) -> int:
    """How many distinct configs of `task` the log holds search trials of: what `resume` counts
    toward a budget, read without feeding a tuner."""
    return len(_trials(_in_space(task, db.history(task.key, str(task.target)))))


def tune_task(
    task: Task,
    tuner: Tuner,
    trials: int,
    db: Any,
    measurer: Measurer | None = None,
    *,
    batch: int = 8,
    early_stopping: int | None = None,
    top_k: int = 3,
    rounds: int = 5,
    run: int | None = None,
    on_batch: Callable[[int, float], None] | None = None,
    from_log: bool = True,
    final: bool = True,
    transfer: bool = True,
    reuse_pick: bool | None = None,
    shared: SharedLog | None = None,
    transfer_donors: Sequence[str] | None = None,
) -> TuneResult:
    """Tune `task` to `trials` distinct measured configs in total (logged ones included).

    `from_log=False` skips reading the log (the tuner already holds it: later rounds of a task
    scheduler); `final=False` skips the interleaved re-measurement (and returns the search figures);
    `transfer` warms a model-based tuner with similar workloads' logged measurements (with
    `transfer_donors`, exactly those workload keys' measurements: an experiment that pre-trains on
    a named set of workloads must not pick up whatever else the log holds); `reuse_pick`
    (default: when this call measured nothing new) reports the last logged re-measurement instead
    of timing the top candidates again. `shared`: this task's view of a log other tuners use too
    (made here when not given): configs are claimed before they are measured, and the others'
    results count toward `trials`."""
    t0 = time.perf_counter()
    own = measurer is None
    measurer = measurer or Measurer()
    tuner.attach(measurer.builder.pool)
    if shared is None:
        shared = SharedLog(db, task, lease_seconds(measurer, batch))
    try:
        if from_log:
            done, best = resume(db, task, tuner, shared)
            if transfer and getattr(tuner, "transferred", None) == 0:
                used = transfer_from_log(db, task, tuner, donors=transfer_donors)
                if used:
                    log.info("%s: model warmed with %d measurements of similar workloads", task.name, used)
        else:
            done, best = len(tuner.costs), tuner.best_cost
        resumed = done
        if done:
            log.info("%s: resuming with %d logged configs (best %.4g ms)", task.name, done, best * 1e3)
        errors: dict[str, int] = {}
        curve: list[float] = []
        since_best = 0
        new = 0
        done += shared.sync(tuner)  # results other runs logged since this view was opened
        best = min(best, tuner.best_cost)
        while done < trials and tuner.has_next():
            if early_stopping is not None and since_best >= early_stopping:
                log.info("%s: early stop after %d trials without improvement", task.name, since_best)
                break
            want = min(batch, trials - done - shared.others_pending)
            if want <= 0:  # other runs are measuring the rest of the budget
                done += shared.wait(tuner)
                continue
            idx = [i for i in tuner.next_batch(want) if i not in tuner.visited]
            if not idx:
                if shared.others_pending:
                    done += shared.wait(tuner)
                    continue
                break
            inputs = shared.claim(tuner, [MeasureInput(task.config(i), i) for i in idx])
            if not inputs:
                done += shared.sync(tuner)
                continue
            idx = [inp.index for inp in inputs]
            results = measurer.measure(task, inputs)
            for inp, r in zip(inputs, results):
                shared.mine([_record(db, task, inp, r, run, None)])
                if r.error is not ErrorKind.NONE:
                    errors[r.error.value] = errors.get(r.error.value, 0) + 1
                if r.median < best:
                    best, since_best = r.median, 0
                else:
                    since_best += 1
                curve.append(best)
            shared.release(inputs)
            tuner.update(idx, results)
            log_features(db, task, tuner)
            done += len(idx)
            new += len(idx)
            done += shared.sync(tuner)
            best = min(best, tuner.best_cost)
            if on_batch is not None:
                on_batch(done, best)
        fresh = (new > 0 or not from_log) if reuse_pick is None else not reuse_pick
        logged = None if fresh or not final else _logged_pick(db, task, tuner, top_k)
        if logged is not None:  # nothing new since the last pick: reuse its logged figures
            picked = logged
        elif final:
            picked = _final_pick(task, tuner, db, measurer, top_k, rounds, run)
        else:
            bi = tuner.best_index
            picked = (task.config(bi) if bi >= 0 else None, best, best, math.nan)
        best_cfg, best_search, best_final, default_final = picked
        res = TuneResult(task.name, best_cfg, best_search, best_final, default_final, new, resumed, errors,
                         time.perf_counter() - t0, curve)
        log.info("%s: best %s: %.4g ms during search, %.4g ms re-measured; default %.4g ms re-measured",
                 task.name, best_cfg, best_search * 1e3, best_final * 1e3, default_final * 1e3)
        return res
    finally:
        tuner.attach(None)
        with contextlib.suppress(Exception):  # leases expire anyway; never mask the real error
            shared.release()
        if own:
            measurer.close()


def _final_pick(task: Task, tuner: Tuner, db: Any, measurer: Measurer, top_k: int, rounds: int,
                run: int | None) -> tuple[Config | None, float, float, float]:
    """Re-time the top-k search results and the default round-robin; the fastest median wins.
    Both figures are logged: the search rows already are, the re-measurements get a runner tag.
    A default with no candidate (a task given no trial) has nothing to alternate with: one round
    times it (a plan tune of MobileNet-v2 on a 2-core AVX-512 host weighs 116 re-layouts that
    way: 29-30 s of its 360 at five rounds each, 15 s at one)."""
    cands, pool = _contenders(task, tuner, top_k)
    if not pool:
        return None, math.inf, math.inf, math.inf
    results = measurer.remeasure(task, pool, rounds if cands else 1)
    record_remeasurement(db, task, pool, results, run)
    by_cfg = {inp.config: r for inp, r in zip(pool, results)}
    default_cost = by_cfg[task.default].median
    if not cands:
        return task.default, math.inf, default_cost, default_cost
    best = min(cands, key=lambda c: by_cfg[c.config].median)
    final = by_cfg[best.config].median
    if default_cost < final:  # the heuristic default beat every tuned candidate when timed fairly
        return task.default, tuner.best_cost, default_cost, default_cost
    return best.config, tuner.best_cost, final, default_cost


def _contenders(task: Task, tuner: Tuner, top_k: int) -> tuple[list[MeasureInput], list[MeasureInput]]:
    """The top-k search results, and those plus the default: what a final re-measurement times."""
    ranked = sorted((c, i) for i, c in tuner.costs.items() if math.isfinite(c))[:top_k]
    cands = [MeasureInput(task.config(i), i) for _, i in ranked]
    default = MeasureInput(task.default, task.index(task.default))
    return cands, cands + ([default] if all(c.config != task.default for c in cands) else [])


def _logged_pick(db: Any, task: Task, tuner: Tuner,
                 top_k: int) -> tuple[Config | None, float, float, float] | None:
    """The last interleaved re-measurement in the log (the fastest median of its batch,
    `tuning_db.latest_batch`), or None when it is not complete and current: every contender of
    today's top-k and the default must have been re-timed in it, after the last search trial. A
    run stopped before or during its re-measurement leaves configs that were never compared; the
    rerun must compare them."""
    history = template_history(db, task)
    last_trial = max((rec.recorded_at for rec in history if rec.runner_version not in tuning_db.RETIMED),
                     default=-math.inf)
    batch = alone_batch(history)
    if not batch or batch[0].recorded_at < last_trial:
        return None
    timed = {task.config_from_json(rec.config): rec for rec in batch}  # a failed contender lost
    _, pool = _contenders(task, tuner, top_k)
    med = {c: MeasureResult(tuple(rec.costs)).median for c, rec in timed.items()
           if rec.error_kind is None and rec.costs}
    if task.default not in med or any(p.config not in timed for p in pool):
        return None
    best = min(med, key=med.__getitem__)
    return best, tuner.best_cost, med[best], med[task.default]


def template_history(db: Any, task: Task) -> list[tuning_db.Record]:
    """The log's rows of `task`'s workload under `task`'s template (not an alternative template's),
    oldest first."""
    rows = db.history(task.key, str(task.target))
    return [rec for rec in rows if rec.config.get("template") == task.template]


def alone_batch(history: Sequence[tuning_db.Record]) -> list[tuning_db.Record]:
    """The rows of the latest alone re-measurement (`_final_pick`'s, tagged `REMEASURE_TAG`) among
    `history`: one workload's rows under one template, oldest first."""
    return tuning_db.latest_batch([rec for rec in history if rec.runner_version == REMEASURE_TAG])


def transfer_from_log(db: Any, task: Task, tuner: Any, max_donors: int = 3, per_donor: int = 400,
                      donors: Sequence[str] | None = None) -> int:
    """Warm a model-based tuner with the logged measurements of the nearest workloads of the same
    family on this target (nearest by `tuning_db.shape_distance`); returns records used.

    `donors`: learn from exactly these workload keys instead (each one's first `per_donor` search
    trials on this target, however far its shape; `max_donors` does not apply), so a caller can
    name its pre-training set. The task's own key is never a donor."""
    from tuning_db import shape_distance

    if not hasattr(tuner, "transfer"):
        return 0
    if donors is not None:
        chosen = [key for key in dict.fromkeys(donors) if key != task.key]
    else:
        near = []
        for key, wl in db.schedule_source(str(task.target)).tuned_of_family(task.workload["family"]):
            d = shape_distance(task.workload, wl) if key != task.key else None
            if d is not None:
                near.append((d, key))
        chosen = [key for _, key in sorted(near)[:max_donors]]
    read_logged_features(db, task, tuner)
    used = tuner.transfer([_donor_records(db, task, key, per_donor) for key in chosen])
    log_features(db, task, tuner)
    return used


def _donor_records(db: Any, task: Task, key: str, limit: int) -> list[tuple[dict[str, Any], float]]:
    """(config JSON, mean cost) of a donor workload's first `limit` timed search trials on the task's
    target (re-timings left out: they repeat configs already counted)."""
    return [(r.config, r.mean_cost) for r in db.history(key, str(task.target))
            if r.mean_cost is not None and r.runner_version not in tuning_db.RETIMED][:limit]


def tune_tasks(
    tasks: list[Task],
    weights: list[float],
    tuner: str,
    budget: int,
    db: Any,
    measurer: Measurer | None = None,
    *,
    round_trials: int = 16,
    batch: int = 8,
    seed: int = 0,
    run: int | None = None,
    groups: Sequence[Hashable] | None = None,
) -> list[TuneResult]:
    """Tune several tasks within one trial budget, rounds allocated by the gradient task scheduler
    (weights: how often each kernel runs per inference; `groups`: tasks that are alternatives of
    one kernel, see `search.scheduler`). Logged trials count toward the budget."""
    from search.scheduler import TaskScheduler
    from search.tuners import make_tuner

    own = measurer is None
    measurer = measurer or Measurer()
    try:
        tuners = [make_tuner(tuner, t, seed) for t in tasks]
        shared = [SharedLog(db, t, lease_seconds(measurer, batch)) for t in tasks]
        logged = [resume(db, t, tu, sh)[0] for t, tu, sh in zip(tasks, tuners, shared)]
        sched = TaskScheduler(weights, max(0, budget - sum(logged)), round_trials, seed=seed, groups=groups)
        for i, tu in enumerate(tuners):  # a task resumed from the log starts with its logged figure
            if logged[i]:
                sched.tasks[i].trials.append(logged[i])
                sched.tasks[i].best.append(tu.best_cost)

        added = [0] * len(tasks)

        def one_round(i: int, n: int) -> tuple[int, float]:
            tu = tuners[i]
            r = tune_task(tasks[i], tu, len(tu.costs) + n, db, measurer, batch=batch, run=run,
                          from_log=False, final=False, shared=shared[i])
            added[i] += r.trials
            return r.trials, tu.best_cost

        sched.run(one_round)
        return [tune_task(t, tu, 0, db, measurer, from_log=False, run=run, reuse_pick=added[i] == 0,
                          shared=shared[i]) for i, (t, tu) in enumerate(zip(tasks, tuners))]
    finally:
        if own:
            measurer.close()
