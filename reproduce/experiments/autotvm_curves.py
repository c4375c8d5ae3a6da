"""AutoTVM (Chen et al., NeurIPS 2018): best-so-far curves of the tuners on ResNet-18's
conv workloads C1-C12, and the number of trials each needs to reach 95% of the best-known speed.

One unit is one (workload, tuner, seed) run: its trials go into the tuning log under the workload's
key tagged with the run (`reproduce.curve_tuning`), so a run resumes where its log ends, and the
unit's stored result is the per-trial GFLOP/s curve. The bar (issue 20): the model-based tuner
(xgb) needs at most half the trials of random search, as the median over C1-C12 of the per-workload
ratio (each the median over 3 seeds). The report states whether this run met it; a `--quick` run
(three small workloads, one seed, 16 trials) is a smoke test of the machinery, too short to judge.
The full budget, 128 trials per run, is shorter than the paper's runs (hundreds to a thousand
trials): 144 runs of it already take hours on a 2-core machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reproduce.conv_workloads import WORKLOADS, ConvWorkload, workloads
from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.tuning_curves import BAR, BASELINE_TUNER, LEVEL, MODEL_TUNER

# `autorelay tune --tuner` names (search.model_tuning.TUNER_CHOICES): model-based, random, genetic, TPE
TUNERS = (MODEL_TUNER, BASELINE_TUNER, "ga", "optuna-tpe")

# Expected seconds per trial on a quiet 2-core machine: compiling the candidate (two build workers)
# plus its timing, 1 warm-up + 3 repeats each lasting at least `min_repeat_ms` (a poor candidate of
# a heavy workload runs longer than that: it is timed at a fraction of the best speed).
COMPILE_S = 0.45
POOR_GFLOPS = 8.0
START_S = 1.0  # starting the measurement workers of one unit, priming its reference


@dataclass(frozen=True)
class Plan:
    """What one mode measures: the workloads, tuners, seeds 0..seeds-1, trials per run, the
    shortest timed repeat (ms) and how long one candidate's timing may take before it counts as a
    failure (s). The tests shrink it to a tiny workload through `QUICK`."""

    workloads: tuple[ConvWorkload, ...]
    tuners: tuple[str, ...]
    seeds: int
    trials: int
    min_repeat_ms: float
    timeout_s: float = 10.0

    def timing(self) -> Any:
        from search.measure import TimingSettings

        return TimingSettings(min_repeat_ms=self.min_repeat_ms, timeout=self.timeout_s)

    def expected_s(self, w: ConvWorkload) -> float:
        """One run of workload `w`."""
        run = 4 * max(self.min_repeat_ms / 1e3, w.flops / (POOR_GFLOPS * 1e9))
        return START_S + self.trials * (COMPILE_S + run)

    def minutes(self) -> float:
        """Every run of the plan."""
        return sum(self.expected_s(w) for w in self.workloads) * len(self.tuners) * self.seeds / 60


# --quick: the three lightest workloads (13 MFLOP each: a good schedule runs them in well under a
# millisecond), so a candidate whose timing takes over 3 s is hopeless and scored as failed
QUICK = Plan(tuple(workloads(("C5", "C8", "C11"))), TUNERS, 1, 16, 5.0, 3.0)
FULL = Plan(WORKLOADS, TUNERS, 3, 128, 20.0)


def plan(ctx: Context) -> Plan:
    return QUICK if ctx.quick else FULL


def variant(ctx: Context, what: str = "") -> str:
    """The log-key variant of a run: quick runs time with shorter repeats, so they never share a
    log key (and resume) with full ones."""
    return "-".join(p for p in (what, "quick" if ctx.quick else "") if p)


def available_tuners(ctx: Context, tuners: Sequence[str]) -> list[str]:
    """The tuners that can run here; each one left out is named once, with how to install it."""
    from reproduce.curve_tuning import tuner_unavailable
    from search.model_tuning import TUNER_CHOICES

    keep = []
    for t in tuners:
        why = f"tuner {t} is not one of {', '.join(TUNER_CHOICES)}" if t not in TUNER_CHOICES else \
            tuner_unavailable(t)
        if why:
            ctx.note(f"skipped: {why}")
        else:
            keep.append(t)
    return keep


def units(ctx: Context) -> list[Unit]:
    p = plan(ctx)
    tuners = available_tuners(ctx, p.tuners)
    # workload by workload, every tuner of it together: the target speed of a workload is the best
    # any of its runs reached, so its runs must meet the same machine (a host's speed drifts between
    # sessions); within a workload, seed by seed, the bar's two tuners first
    ranked = [t for t in tuners if t in (MODEL_TUNER, BASELINE_TUNER)]
    ranked += [t for t in tuners if t not in ranked]
    order = [(w, s, t) for w in p.workloads for s in range(p.seeds) for t in ranked]
    return [Unit(f"{w.name}/{t}/s{s}", {"workload": w.name, "tuner": t, "seed": s}, p.expected_s(w))
            for w, s, t in order]


def measure_run(ctx: Context, w: ConvWorkload, tuner: str, seed: int, p: Plan, tag: str, strategy: str,
                donors: Sequence[str] | None = None) -> dict[str, Any]:
    """Tune one run of workload `w` to the plan's trials (resuming from the log) with its timing and
    return its stored result: the per-trial GFLOP/s and what the run was. Shared with the `transfer`
    experiment."""
    from autorelay.codegen import resolve_target
    from reproduce.conv_workloads import conv_task
    from reproduce.curve_tuning import history_gflops, tune_run
    from search.measure import Measurer

    task = conv_task(w, resolve_target("llvm", ctx.threads))
    with Measurer(settings=p.timing()) as m:
        run = tune_run(task, tuner, seed, p.trials, ctx.db, m, tag=tag, donors=donors)
    gflops = history_gflops(ctx.db, run.task, p.trials)
    if not gflops:
        raise RuntimeError(f"{w.name} {strategy} seed {seed}: no trial in the log after tuning")
    ctx.note(f"{w.name} {strategy} seed {seed}: {run.new} new trials ({len(gflops) - run.new} from the log), "
             f"best {max(gflops):.1f} GFLOP/s" + (f"; model pre-trained on {run.transferred} measurements"
                                                   if run.transferred else ""))
    return {"workload": w.name, "strategy": strategy, "tuner": tuner, "seed": seed, "key": run.task.key,
            "flops": task.flops, "space": len(task.space), "new_trials": run.new,
            "transferred": run.transferred, "gflops": [round(g, 4) for g in gflops]}


def measure(ctx: Context, unit: Unit) -> dict[str, Any]:
    p = plan(ctx)
    w = {x.name: x for x in p.workloads}[unit.params["workload"]]
    tuner, seed = unit.params["tuner"], int(unit.params["seed"])
    from reproduce.curve_tuning import run_tag

    return measure_run(ctx, w, tuner, seed, p, run_tag(tuner, seed, variant(ctx)), tuner)


def titles(p: Plan) -> dict[str, str]:
    return {w.name: f"{w.name} ({w.describe()})" for w in p.workloads}


def report(ctx: Context, rows: Sequence[Row]) -> Report:
    from reproduce.curve_plots import draw_curves, draw_trial_bars
    from reproduce.curve_report import analyse_rows, curve_csv, trials_table
    from reproduce.tuning_curves import summarise, verdict

    p = plan(ctx)
    order = [w.name for w in p.workloads]
    results = analyse_rows(rows, order, titles(p), (MODEL_TUNER, BASELINE_TUNER))
    present = {s for r in results for s in r.curves}
    tuners = [t for t in p.tuners if t in present] + sorted(present - set(p.tuners))
    s = summarise(results)
    lines = [
        "",  # a blank line after the runner's header
        f"Trials to reach {LEVEL:.0%} of the best-known speed (the best any tuner reached on the workload in "
        "the same seed), median over seeds; `never`: not within the budget. Float32 NCHW convolutions, "
        "batch 1, the direct NCHW template; each (workload, tuner, seed) is its own run from scratch.",
        "",
        trials_table(results, tuners),
        "",
        f"Bar: the model-based tuner ({MODEL_TUNER}) needs at most {BAR:g}x the trials of random search "
        f"({BASELINE_TUNER}), median over the workloads ({', '.join(order)}; {p.seeds} seed(s), "
        f"{p.trials} trials per run).",
        "",
        f"- {s.text((MODEL_TUNER, BASELINE_TUNER))}",
        f"- **{verdict(s.median, BAR, least=s.least)}**",
    ]
    if ctx.quick:
        lines.append("- `--quick` measures three small workloads with one seed and a budget of "
                     f"{p.trials} trials: the verdict above describes this run only; the bar is stated "
                     "for the full run (C1-C12, 3 seeds).")
    skipped = [t for t in p.tuners if t not in present]
    if skipped:
        lines.append(f"- not measured: {', '.join(skipped)} (not installed here, or no unit stored yet)")
    figures = {
        "autotvm_curves": lambda fig: draw_curves(fig, results, tuners, "best-so-far GFLOP/s vs trials"),
        "autotvm_curves_trials": lambda fig: draw_trial_bars(fig, results, tuners,
                                                             f"trials to {LEVEL:.0%} of best"),
    }
    return Report(curve_csv(rows), "\n".join(lines) + "\n", figures)


EXPERIMENT = Experiment(
    name="autotvm_curves",
    title="AutoTVM search efficiency: tuners' best-so-far curves on ResNet-18's C1-C12",
    reference="Chen et al., Learning to Optimize Tensor Programs (NeurIPS 2018): search strategies "
              "compared on ResNet-18's conv2d workloads C1-C12; TVM (OSDI 2018) Sec. 5.2, Fig. 12",
    quick_minutes=round(QUICK.minutes(), 1),
    full_minutes=round(FULL.minutes()),
    units=units,
    measure=measure,
    report=report,
)

__all__ = ["EXPERIMENT", "FULL", "QUICK", "TUNERS", "Plan", "measure_run", "plan", "variant"]
