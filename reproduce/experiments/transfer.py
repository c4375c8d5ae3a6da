"""AutoTVM's transfer learning (Chen et al., NeurIPS 2018): a cost model pre-trained
on the measurements of C1-C6 tunes C7-C12, against the same tuner with a model from scratch.

Pre-training data: the model-based tuner's run (xgb, seed 0) of each of C1-C6, the same run
`autotvm_curves` logs — when that experiment has run in the same mode, its trials are reused and
nothing is measured again; else the `pretrain/...` units measure them. The transferred model learns
from exactly those six workloads (`search.tune.tune_task(transfer_donors=...)`), never from other
workloads the log holds (C7-C12's own runs above all). Each target run, scratch or transfer, is its
own log key; the scratch runs are `autotvm_curves`' xgb runs of the same workloads and seeds. The
question (issue 20): does transfer reach 95% of the best-known speed in fewer trials (median over
C7-C12 of the per-workload ratio transfer/scratch below 1)?
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reproduce.conv_workloads import ConvWorkload, workloads
from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.experiments import autotvm_curves as ac
from reproduce.tuning_curves import LEVEL, MODEL_TUNER

DONORS = ("C1", "C2", "C3", "C4", "C5", "C6")
TARGETS = ("C7", "C8", "C9", "C10", "C11", "C12")
PAIR = ("transfer", "scratch")
LOWER_S = 0.03  # lowering one donor config on the target workload for its features


@dataclass(frozen=True)
class TransferPlan:
    """Donor and target workloads, seeds of the target runs, and the autotvm_curves plan whose
    budget and timing both the pre-training runs and the target runs use."""

    donors: tuple[ConvWorkload, ...]
    targets: tuple[ConvWorkload, ...]
    seeds: int
    curves: ac.Plan

    def expected_s(self, w: ConvWorkload, transfer: bool) -> float:
        lower = LOWER_S * self.curves.trials * len(self.donors) if transfer else 0.0
        return self.curves.expected_s(w) + lower

    def minutes(self) -> float:
        pre = sum(self.curves.expected_s(w) for w in self.donors)
        runs = sum(self.expected_s(w, t) for w in self.targets for t in (False, True)) * self.seeds
        return (pre + runs) / 60


QUICK = TransferPlan(tuple(workloads(DONORS)), tuple(workloads(("C8", "C11"))), 1, ac.QUICK)
FULL = TransferPlan(tuple(workloads(DONORS)), tuple(workloads(TARGETS)), 3, ac.FULL)


def plan(ctx: Context) -> TransferPlan:
    return QUICK if ctx.quick else FULL


def units(ctx: Context) -> list[Unit]:
    p = plan(ctx)
    pre = [Unit(f"pretrain/{w.name}", {"workload": w.name, "role": "pretrain"}, p.curves.expected_s(w))
           for w in p.donors]
    runs = [Unit(f"{w.name}/{arm}/s{s}", {"workload": w.name, "role": arm, "seed": s},
                 p.expected_s(w, arm == "transfer"))
            for w in p.targets for s in range(p.seeds) for arm in ("scratch", "transfer")]
    return pre + runs


def donor_keys(ctx: Context, p: TransferPlan) -> list[str]:
    """The log keys of the pre-training runs; raises when one holds fewer trials than planned (its
    unit failed or is still to come), so a transfer run never learns from a partial set."""
    from autorelay.codegen import resolve_target
    from reproduce.conv_workloads import conv_task
    from reproduce.curve_tuning import history_gflops, run_tag, tagged

    target = resolve_target("llvm", ctx.threads)
    keys = []
    for w in p.donors:
        t = tagged(conv_task(w, target), run_tag(MODEL_TUNER, 0, ac.variant(ctx)))
        have = len(history_gflops(ctx.db, t, p.curves.trials))
        if have < p.curves.trials:
            raise RuntimeError(f"pre-training run of {w.name} has {have} of {p.curves.trials} trials in the "
                               "log; its unit must succeed first (rerun)")
        keys.append(t.key)
    return keys


def measure(ctx: Context, unit: Unit) -> dict[str, Any]:
    from reproduce.curve_tuning import run_tag

    p = plan(ctx)
    role = unit.params["role"]
    c = p.curves
    if role == "pretrain":
        w = {x.name: x for x in p.donors}[unit.params["workload"]]
        return ac.measure_run(ctx, w, MODEL_TUNER, 0, c, run_tag(MODEL_TUNER, 0, ac.variant(ctx)), "pretrain")
    w = {x.name: x for x in p.targets}[unit.params["workload"]]
    seed = int(unit.params["seed"])
    if role == "scratch":
        return ac.measure_run(ctx, w, MODEL_TUNER, seed, c, run_tag(MODEL_TUNER, seed, ac.variant(ctx)),
                              "scratch")
    tag = run_tag(MODEL_TUNER, seed, ac.variant(ctx, "transfer"))
    return ac.measure_run(ctx, w, MODEL_TUNER, seed, c, tag, "transfer", donors=donor_keys(ctx, p))


def report(ctx: Context, rows: Sequence[Row]) -> Report:
    from reproduce.curve_plots import draw_curves, draw_trial_bars
    from reproduce.curve_report import analyse_rows, curve_csv, trials_table
    from reproduce.tuning_curves import summarise, verdict

    p = plan(ctx)
    order = [w.name for w in p.targets]
    runs = [r for r in rows if r.result.get("strategy") in PAIR]
    pre = sorted((r for r in rows if r.result.get("strategy") == "pretrain"), key=lambda r: r.unit)
    results = analyse_rows(runs, order, {w.name: f"{w.name} ({w.describe()})" for w in p.targets}, PAIR)
    s = summarise(results)
    faster = sum(r.ratio < 1 for r in results)
    learned = sorted({r.result.get("transferred", 0) for r in runs if r.result.get("strategy") == "transfer"})
    lines = [
        "",  # a blank line after the runner's header
        f"Trials of the model-based tuner ({MODEL_TUNER}) to reach {LEVEL:.0%} of the best-known speed (the "
        "best either arm reached on the workload in the same seed), median over seeds; `never`: not within "
        "the budget. `transfer`: its cost model pre-trained on the measurements of "
        f"{', '.join(w.name for w in p.donors)}; `scratch`: no pre-training.",
        "",
        "Pre-training runs (xgb, seed 0): " + (", ".join(f"{r.result['workload']} {len(r.result['gflops'])} "
                                                          f"trials" for r in pre) or "none stored") + ".",
        f"Donor measurements the transferred models learned from: {', '.join(map(str, learned)) or '-'} "
        "(configs of C1-C6 that lower on the target workload).",
        "",
        trials_table(results, list(reversed(PAIR))),
        "",
        f"Question: does transfer reach {LEVEL:.0%} of the best faster than from scratch (median over "
        f"{', '.join(order)} of the ratio transfer/scratch below 1; {p.seeds} seed(s), {p.curves.trials} "
        "trials per run)?",
        "",
        f"- {s.text(PAIR)}; transfer faster on {faster} of {len(results)} workloads",
        f"- **{verdict(s.median, 1.0, PAIR, strict=True, least=s.least)}**",
    ]
    if ctx.quick:
        lines.append(f"- `--quick` pre-trains on {p.curves.trials} trials per donor and tunes "
                     f"{', '.join(order)} with one seed: this describes this run only, not the full one.")
    arms = list(reversed(PAIR))
    figures = {
        "transfer": lambda fig: draw_curves(fig, results, arms, "best-so-far GFLOP/s vs trials"),
        "transfer_trials": lambda fig: draw_trial_bars(fig, results, arms, f"trials to {LEVEL:.0%} of best"),
    }
    return Report(curve_csv(rows), "\n".join(lines) + "\n", figures)


def _available() -> str | None:
    from reproduce.curve_tuning import tuner_unavailable

    return tuner_unavailable(MODEL_TUNER)


EXPERIMENT = Experiment(
    name="transfer",
    title="AutoTVM transfer learning: a cost model pre-trained on C1-C6 tuning C7-C12",
    reference="Chen et al., Learning to Optimize Tensor Programs (NeurIPS 2018): transfer learning of "
              "the cost model across workloads",
    quick_minutes=round(QUICK.minutes(), 1),
    full_minutes=round(FULL.minutes()),
    units=units,
    measure=measure,
    report=report,
    available=_available,
)

__all__ = ["DONORS", "EXPERIMENT", "FULL", "QUICK", "TARGETS", "TransferPlan", "plan"]
