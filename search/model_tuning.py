"""Tuning a whole model: extract its kernels, divide `trials` over them with the gradient task
scheduler, tune each into the tuning log, then compare the model end to end before and after.

    result = tune_model(load_model("resnet-18"), trials=64, tuner="xgb", db="sqlite:///tuning.db")
    print(result.table())

Everything lands in the log as it is measured (`search.tune.tune_task` records each result), so
Ctrl-C (KeyboardInterrupt) stops with nothing lost: `tune_model` marks the run interrupted and
returns the partial result, and running it again resumes — logged trials count toward the
budget and are never measured twice. The per-task "best" is the interleaved re-measurement of the
top candidates against the default (`tune_task`'s final pick), not the luckiest search figure.

`pipeline="plan"` first tunes the re-layouts a plan may put between layers, with a small share of
the budget (`search.transform_tuning`), then the kernels of every form a conv layer may take
(screened first: `search.plan_screen`), then lets the layout search choose the build, and spends
the budget's last `PLAN_RESERVE` on that build's kernels alone, its fusion variant's new kernels
among them (`_tune_chosen`). Run again once the log holds the budget's trials over every form, the
chosen build's kernels and re-layouts, and a layout plan, it neither
screens nor searches: the log's plan (or the per-model pipeline that beat it) is the build, as for
`compile` (`_finished_plan`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import require_host_supports
from autorelay.primitive import KernelMemo
from search.extract import BoundSource, ModelTask
from search.in_place import PinnedSource, confirm_in_place
from search.layout_search import plan_tasks, search_layout
from search.measure import Measurer, TimingSettings
from search.measure.dask_executor import make_measurer
from search.measure.workers import WorkerStartError
from search.models import (
    Model,
    PreparedModel,
    build_model,
    max_difference,
    open_db,
    output_scale,
    prepare_model,
    run_inputs,
    schedule_source,
    time_interleaved,
)
from search.pipeline_choice import AUTO, PLAN, PipelineChoice, choose_pipeline, stored_plan
from search.plan_screen import DEFER_RATIO, PRUNE_RATIO, screen_plan_tasks, trailing_forms, untuned_blocks
from search.scheduler import TaskScheduler
from search.transform_tuning import logged_transform_trials, transform_tasks, tune_transforms
from search.tune import logged_trials
from search.tune_report import ModelTuneResult, Progress, TaskRow
from search.tuning_state import TuningState

log = logging.getLogger(__name__)

# CLI names of the tuners -> `search.tuners.make_tuner` names
TUNER_NAMES = {"xgb": "xgb", "random": "random", "grid": "grid", "ga": "genetic", "genetic": "genetic",
               "optuna-tpe": "tpe", "optuna-cmaes": "cmaes", "tpe": "tpe", "cmaes": "cmaes"}
TUNER_CHOICES = ("xgb", "random", "grid", "ga", "optuna-tpe", "optuna-cmaes")  # what --tuner lists
# The share of a plan tune's budget kept for the chosen build's kernels (`_tune_chosen`). At 0.2, an
# 800-trial MobileNet-v2 plan tune (Zen 3) gave its chosen build's 21 kernels 160 more trials; in
# place, the defaults then beat 9 of its 14 tuned kernels, and its build ran 0.96x and 1.11x the
# per-model pick (two benchmark runs). At 0.5: 400 trials, 18 of 19 tuned kernels kept, 1.17x in
# both runs; ResNet-18 at 0.5 still ran 1.21x the per-model pick.
PLAN_RESERVE = 0.5


def tune_model(
    model: Model,
    *,
    trials: int,
    tuner: str = "xgb",
    db: Any = None,
    target: str = "llvm",
    threads: int | None = None,
    pipeline: str = "default",
    seed: int = 0,
    round_trials: int | None = None,
    batch: int = 8,
    timing: TimingSettings | None = None,
    build_workers: int = 2,
    progress: Progress | None = None,
    compare: bool = True,
    executor: str | None = None,
) -> ModelTuneResult:
    """Tune `model`'s kernels with `trials` measurements in all (logged ones included) into `db`
    (a TuningDB, URL/path, or None: the default SQLite log); with `compare`, build the model with
    the defaults and with the log's best schedules and time both (interleaved).

    Tasks are tuned heaviest (FLOPs x occurrences) first; the scheduler's rounds are
    `round_trials` trials (default: the budget per task in whole batches, between `batch` and 16).
    `executor`: where candidates are built and timed (None/'local': here; 'dask://HOST:PORT': a Dask
    cluster, see `search.measure.dask_executor`). `pipeline` "auto": the pipeline this model was
    last tuned with in `db`, else the fastest of `pipeline_choice.candidates` (measured); the run
    records the pipeline it tuned with."""
    if trials < 0:
        raise ValueError(f"trials must be >= 0, got {trials}")
    if tuner not in TUNER_NAMES:
        raise ValueError(f"unknown tuner {tuner!r}; choose one of {', '.join(sorted(TUNER_NAMES))}")
    if executor in (None, "local"):  # candidates are timed here: refuse before any is built
        require_host_supports(resolve_target(target, threads), "tuning (candidates are timed on this host)")
    progress = progress or Progress()
    memo = KernelMemo()  # the run's builds (screening, layout search, comparison) share kernels
    every_form: list[ModelTask] = []
    t0 = time.perf_counter()
    handle, own = open_db(db)
    run: int | None = None
    measurer: Measurer | None = None
    interrupted = False
    trailing: dict[int, float] = {}
    untried: dict[int, float] = {}
    finished: tuple[PipelineChoice, int] | None = None  # a finished plan tune's choice, and its trials
    relayout_trials = 0  # the log's trials over the re-layouts a plan tune weighs
    try:
        if pipeline == PLAN:  # tune every layout a layer may take; the plan is chosen after tuning
            progress.stage("extracting the kernels of every layout a conv layer may take")
            prepared, ex, prologue_groups = plan_tasks(model, target, threads)
            every_form = list(ex.tasks)
            relayout_tasks = transform_tasks(model, prepared.target)
            relayout_trials = logged_transform_trials(relayout_tasks, handle)
            finished = _finished_plan(model, handle, target, threads, every_form, trials - relayout_trials)
        stale = handle.close_dead_runs()  # runs killed outright (kill -9) never closed themselves
        if stale:
            log.info("marked %d killed tuning run(s) interrupted: %s", len(stale), stale)
        if pipeline == PLAN and finished is None:
            choice = PipelineChoice(PLAN, "a channel block per conv layer, chosen after tuning")
            progress.stage("tuning the re-layouts a plan may put between layers")
            measurer = make_measurer(executor, build_workers, timing)
            # the run opens before its first measurement, so the re-layouts' rows carry its id too
            run = handle.start_run(model=model.name, tuner=tuner, trial_budget=trials,
                                   info=_run_info(prepared, PLAN, choice, seed))
            relayouts = tune_transforms(model, relayout_tasks, handle, measurer, trials, run=run, seed=seed)
            relayout_trials = relayouts.trials
            progress.stage(f"{len(relayouts.seconds)} re-layouts weighed, {relayouts.trials} trials "
                           f"({relayouts.new} new; {relayouts.elapsed:.0f} s)")
            progress.stage("screening every layout with default schedules: which forms are worth tuning")
            screen = screen_plan_tasks(model, prepared.target, memo=memo, workers=build_workers)
            screen.groups.update(prologue_groups)  # a fused prologue's kernel: one more form of its layer
            before = len(ex.tasks)
            ex, groups = screen.apply(ex)
            deferred = screen.waiting(ex)
            idle = sum(math.isnan(r) for r in deferred.values())
            progress.stage(f"screening kept {len(ex.tasks)} of {before} tasks ({screen.seconds:.0f} s); the "
                           f"forms of one layer share its term of the scheduler's objective"
                           + (f"; {len(deferred) - idle} forms {DEFER_RATIO:g}-{PRUNE_RATIO:g}x behind their "
                              f"layers' best and {idle} kernels the default plan does not run skip the "
                              "warm-up" if deferred else ""))
        else:
            if finished is not None:
                choice, spent = finished
                progress.stage(f"{choice.describe()}: the log holds {spent} trials over every form and "
                               f"{relayout_trials} on re-layouts (budget {trials}), so the plan is not "
                               "searched again")
            else:
                if pipeline == AUTO:
                    progress.stage("choosing the pass pipeline (layout) for the model")
                choice = choose_pipeline(pipeline, model, handle, target, threads)
                pipeline = choice.pipeline
                progress.stage(choice.describe())
            # prepared once: the task list, the comparison builds and the schedule source share it
            prepared = choice.prepared or prepare_model(model, target, threads=threads,
                                                        pipeline=choice.pipeline)
            ex = prepared.extraction
            groups = [t.key for t in ex.tasks]  # alternatives of one workload: see the scheduler
            deferred = {}
        # heaviest first: the scheduler warms tasks up in order, and a small budget may not reach all
        order = sorted(range(len(ex.tasks)), key=lambda i: -ex.tasks[i].total_flops)
        ex.tasks[:], groups = [ex.tasks[i] for i in order], [groups[i] for i in order]
        per_task = trials // max(1, len(ex.tasks))
        rounds = round_trials or max(batch, min(16, per_task // batch * batch))
        if measurer is None:  # a bad executor fails before the run
            measurer = make_measurer(executor, build_workers, timing)
        if run is None:
            info = {**_run_info(prepared, pipeline, choice, seed), "tasks": len(ex.tasks)}
            run = handle.start_run(model=model.name, tuner=tuner, trial_budget=trials, info=info)
        else:
            handle.update_run(run, info={"tasks": len(ex.tasks)})
        st = TuningState(ex, TUNER_NAMES[tuner], handle, measurer, progress, seed, run, batch)
        progress.tasks(ex.tasks, ex.skipped, trials, st.logged)
        # a plan tune keeps part of the budget for the kernels of the build its layout search picks
        searching = pipeline == PLAN and finished is None
        reserve = round(trials * PLAN_RESERVE) if searching else 0
        spent = max(sum(st.logged), finished[1] if finished else 0) + relayout_trials
        try:
            sched = TaskScheduler([t.count for t in ex.tasks], max(0, trials - spent - reserve),
                                  rounds, seed=seed, groups=groups,
                                  deferred=[i for i, t in enumerate(ex.tasks) if t.key in deferred])
            for i, tu in enumerate(st.tuners):  # a resumed task starts from its logged figure
                if st.logged[i]:
                    sched.tasks[i].trials.append(st.logged[i])
                    sched.tasks[i].best.append(tu.best_cost)
            if ex.tasks:
                sched.run(st.one_round)
            trailing = trailing_forms(groups, [tu.best_cost for tu in st.tuners])
            untried = {i: deferred[ex.tasks[i].key] for i in sched.deferred if not sched.tasks[i].trials}
            progress.stage("re-measuring each task's best candidates against its default, interleaved"
                           + (f" ({len(trailing)} forms far behind their layer's best skipped)" if trailing
                              else "")
                           + (f" ({len(untried)} deferred forms never tuned skipped)" if untried else ""))
            for i in range(len(ex.tasks)):
                if i not in trailing and i not in untried:
                    st.settle(i)
        except KeyboardInterrupt:
            interrupted = True
        layout = None
        if searching and not interrupted:
            progress.stage("choosing a channel block per conv layer (measured costs, dynamic program), then "
                           "timing the plan against the per-model pipelines")
            tuned = {t.key for t, old, new in zip(ex.tasks, st.logged, st.new) if old or new}
            layout = search_layout(model, handle, target, threads, memo=memo, tasks=every_form,
                                   workers=build_workers, leave_out=untuned_blocks(screen, tuned))
            prepared = layout.prepared
            try:
                _tune_chosen(st, sched, prepared.extraction.tasks,
                             trials - sum(st.logged) - sum(st.new) - relayout_trials, rounds, seed)
            except KeyboardInterrupt:
                interrupted = True
            untried = {i: r for i, r in untried.items() if st.new[i] == 0}
            trailing = {i: r for i, r in trailing.items() if st.finals[i] is None}
        result = ModelTuneResult(model.name, str(prepared.target), tuner, trials, st.rows(),
                                 ex.skipped, run, 0.0, interrupted,
                                 pipeline=layout.describe() if layout else choice.describe(), layout=layout,
                                 trailing={ex.tasks[i].name: r for i, r in trailing.items()},
                                 deferred={ex.tasks[i].name: r for i, r in untried.items()},
                                 other_forms=max(0, finished[1] - sum(st.logged)) if finished else 0,
                                 relayout_trials=relayout_trials)
        measurer.close()
        measurer = None
        if compare and not interrupted:
            progress.stage("building the model with default and with tuned schedules; timing both")
            _compare(result, prepared, handle, memo, layout.source if layout is not None else None)
        handle.finish_run(run, interrupted=interrupted)
        result.seconds = time.perf_counter() - t0
        return result
    except (KeyboardInterrupt, WorkerStartError):  # the log is intact; the run did not finish
        if run is not None:
            handle.finish_run(run, interrupted=True)
        raise
    finally:
        if measurer is not None:
            measurer.close()
        if own:
            handle.close()


def _run_info(prepared: PreparedModel, pipeline: str, choice: PipelineChoice, seed: int) -> dict[str, Any]:
    """What a tuning run records about itself: its target, the model's key, the pipeline it tuned
    with and how that was chosen (with the pipelines' latencies, when they were timed)."""
    return {"target": str(prepared.target), "model_key": prepared.key, "pipeline": pipeline,
            "pipeline_choice": choice.how, "pipeline_ms": {k: v * 1e3 for k, v in choice.latencies.items()},
            "seed": seed}


def _finished_plan(model: Model, db: Any, target: str, threads: int | None, every_form: list[ModelTask],
                   trials: int) -> tuple[PipelineChoice, int] | None:
    """A plan tune that already ran: the log's layout plan for the model (or the per-model pipeline
    that beat it), when the log also holds at least `trials` trials over `every_form` and the chosen
    build's kernels no form covers (`_tune_chosen` tunes those), with that count; else None.
    Searching again would spend minutes timing builds for no new trial, and the host's speed of the
    moment could choose another plan than the one the tune's last trials went to."""
    got = stored_plan(model, db, target, threads)
    if not isinstance(got, PipelineChoice):
        return None
    forms = {(t.key, t.template) for t in every_form}
    chosen = got.prepared.extraction.tasks if got.prepared else []
    fresh = [t for t in chosen if (t.key, t.template) not in forms]
    spent = sum(logged_trials(db, t) for t in [*every_form, *fresh])
    return (got, spent) if spent >= trials else None


def _tune_chosen(st: TuningState, sched: TaskScheduler, chosen: list[ModelTask], budget: int, rounds: int,
                 seed: int) -> None:
    """Spend what is left of a plan tune's budget (`PLAN_RESERVE` of it, and any trials the first
    scheduler could not place) on the kernels the chosen build runs (`chosen`: its tasks), each
    starting from its progress in `sched`, then re-measure the picks of those that gained trials.
    A chosen kernel no task covered (a fusion variant's: a producer copied into each consumer, a
    prologue fused in a layout no uniform build has) becomes a task here.

    The first scheduler tunes every form a layer may take before the layout search knows which it
    will run, and the search may choose a form the budget never reached: in a 1000-trial plan tune
    of the zoo's Inception (Zen 3) it ran conv2d_9 as F(4x4) in blocks of 8 with a transferred
    config (104 us), where the per-model tune had tuned the same kernel to 78 us. In an 800-trial
    ResNet-18 plan tune (Zen 5) the search chose the fusion variant that copies each block's ReLU
    into its readers, and 9 of the build's 24 kernels had no task: they ran transferred configs."""
    known = {(t.key, t.template): i for i, t in enumerate(st.tasks)}
    picked = [known[t.key, t.template] for t in chosen if (t.key, t.template) in known]
    fresh = [t for t in chosen if (t.key, t.template) not in known]
    if budget <= 0 or not (picked or fresh):
        return
    picked += st.add(fresh) if fresh else []
    st.progress.stage(f"tuning the chosen build's {len(picked)} kernels with the last {budget} trials "
                      f"({sum(1 for i in picked if i >= len(sched.tasks) or not sched.tasks[i].trials)} "
                      f"never tuned{f', {len(fresh)} of them new' if fresh else ''})")
    before = list(st.new)
    finish = TaskScheduler([st.tasks[i].count for i in picked], budget, rounds, seed=seed)
    for k, i in enumerate(picked):
        if i >= len(sched.tasks):  # a new task: no progress yet
            continue
        finish.tasks[k].trials[:], finish.tasks[k].best[:] = sched.tasks[i].trials, sched.tasks[i].best
        if i in sched.finished:
            finish.finished.add(k)
    finish.run(lambda k, n: st.one_round(picked[k], n))
    for i in picked:
        if st.new[i] > before[i]:
            st.settle(i)


def _compare(result: ModelTuneResult, prepared: PreparedModel, db: Any, memo: KernelMemo,
             source: BoundSource | None = None) -> None:
    """Time `prepared` with default and with logged schedules, after confirming the log's picks in
    place (`search.in_place`: a tuned kernel slower there than its default or a runner-up gives way);
    `source`: the log already bound to the model's tasks (a layout search's), else it is bound to
    `prepared`'s own extraction."""
    model = prepared.model
    before = build_model(model, None, prepared=prepared, memo=memo)
    if source is None:
        source = schedule_source(db, model, prepared=prepared)
    after = build_model(model, source, prepared=prepared, memo=memo)
    args = run_inputs(before, model)
    bound = source  # not None from here on: the closure below reads it

    def build_pinned(pins: Any) -> Any:
        return build_model(model, PinnedSource(bound, pins), prepared=prepared, memo=memo)

    result.in_place = confirm_in_place(db, prepared.extraction.tasks, after, before, args, run=result.run,
                                       build_pinned=build_pinned)
    if not all(c.kept for c in result.in_place):
        after = build_model(model, source, prepared=prepared, memo=memo)  # the log's picks changed
    reference = before(*args)
    result.max_abs_diff = max_difference(reference, after(*args))
    result.output_scale = output_scale(reference)
    result.latency_before_s, result.latency_after_s = time_interleaved([before, after], args)
    result.source_counts = dict(after.report.sources)
    result.report = after.report


__all__ = ["TUNER_CHOICES", "TUNER_NAMES", "ModelTuneResult", "Progress", "TaskRow", "tune_model"]
