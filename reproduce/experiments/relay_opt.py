"""The Relay paper's optimisation ablation: each graph optimisation added in turn, per model.

O0 -> +FoldConstant/SimplifyExpr (the graph clean-ups, still one op per kernel) -> +FuseOps -> +FoldScaleAxis
-> +layout (NCHW{b}c, b the channel block of the named pipeline that fills one vector on this target)
-> +Winograd -> tuned (the +Winograd build with the log's tuned schedules). Each step is a cumulative
list of the pass objects of `autorelay.transform.pipelines`, built as a `Pipeline` value; the
+Winograd step is exactly the named pipeline `nchwc`/`nchwc16`, so the tuned step can use it.

Why one unit per model: the steps are timed against each other (each in its own process, alternated,
`reproduce.peers.time_isolated`), so they must share one noisy stretch of time. Every step's output
is compared with O0's (computed in its worker before its first timed block); a step that computes
something else fails the unit instead of being stored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.experiments.cnn_models import CNN, FULL, SECONDS_PER_TRIAL, finite, tune, tuned_pipeline
from reproduce.output import md_table

STEPS = ("O0", "+fold", "+fuse", "+fold-scale-axis", "+layout", "+winograd", "tuned")
QUICK = (CNN("nature-dqn"), CNN("resnet-18", 32))
QUICK_TRIALS = 24  # the tuned step's budget when the log has no tuning run of the model
FULL_TRIALS = 400
ROUNDS = {True: 4, False: 10}  # timed blocks per step
BLOCK_S = {True: 0.15, False: 0.25}


def layout_pipeline(threads: int) -> tuple[str, int]:
    """The named channel-packing pipeline for this target and its block: the block of 16 where a
    vector holds 16 floats, else 8 (`pipeline_choice.candidates` offers the same two)."""
    from autorelay.codegen import resolve_target

    return ("nchwc16", 16) if resolve_target("llvm", threads).vector_lanes() >= 16 else ("nchwc", 8)


def step_passes(step: str, block: int) -> list[Any]:
    """The cumulative pass list of an ablation step (the tuned step's is +winograd's)."""
    from autorelay.transform.convert_layout import ConvertLayout
    from autorelay.transform.fold_constant import FoldConstant
    from autorelay.transform.fold_scale_axis import FoldScaleAxis
    from autorelay.transform.fuse_ops import FuseOps
    from autorelay.transform.fusion_plan import FusionPlan
    from autorelay.transform.pipelines import graph_passes, pipeline_passes
    from autorelay.transform.simplify_expr import SimplifyExpr
    from autorelay.transform.winograd_conv import WinogradConv

    if step not in STEPS:
        raise ValueError(f"unknown ablation step {step!r}; known: {', '.join(STEPS)}")
    if step == "O0":
        return pipeline_passes("O0")
    graph = graph_passes() if STEPS.index(step) >= STEPS.index("+fold-scale-axis") else [
        p for p in graph_passes() if not isinstance(p, FoldScaleAxis)]
    if step == "+fold":
        return [*graph, FuseOps(plan=FusionPlan.none())]
    if step in ("+fuse", "+fold-scale-axis"):
        return [*graph, FuseOps()]
    packing = [ConvertLayout(dst="NCHWc", block=block), FoldConstant(), SimplifyExpr()]
    if step == "+layout":
        return [*graph, *packing, FuseOps()]
    return [*graph, WinogradConv(), FoldConstant(), *packing, FuseOps()]  # +winograd, tuned


def make_step(zoo: str, options: dict[str, Any], threads: int, step: str, block: int,
              tuned: tuple[str, str | None] = ("default", None), db_url: str | None = None
              ) -> tuple[Any, np.ndarray]:
    """A `time_isolated` factory: the model built by one step (the tuned step: with `tuned`'s
    pipeline and layout plan, and the log's schedules)."""
    import autorelay
    from autorelay.transform.pass_base import Pipeline
    from reproduce.baselines import make_autorelay, zoo_model

    if step == "tuned":
        return make_autorelay(zoo, options, threads, tuned[0], db_url, tuned[1])
    mod, params, inputs = zoo_model(zoo, options)
    exe = autorelay.build(mod, params=params, threads=threads, pipeline=Pipeline(step_passes(step, block)))
    args = [inputs[n] for n in exe.input_names]
    return (lambda: exe(*args)), np.asarray(exe(*args))


def tolerance(reference: np.ndarray) -> float:
    """How far a rewritten build may drift from O0: float32 reassociation (Winograd's transforms,
    folded scales) scaled by the output's magnitude."""
    return 1e-4 + 1e-3 * float(np.abs(reference).max())


def _units(ctx: Context) -> list[Unit]:
    models = QUICK if ctx.quick else FULL
    # the worst case: the log has no tuning run of the model (cnn_comp did not run), so it tunes here
    budget = QUICK_TRIALS if ctx.quick else FULL_TRIALS
    seconds = budget * SECONDS_PER_TRIAL + (40.0 if ctx.quick else 150.0)
    return [Unit(f"ablation/{m.name}", m.as_params(), expected_s=seconds) for m in models]


def _measure(ctx: Context, unit: Unit) -> dict[str, Any]:
    from reproduce.peers import time_isolated

    cnn = CNN.from_params(unit.params)
    model = cnn.load()
    named, block = layout_pipeline(ctx.threads)
    result: dict[str, Any] = {"model": cnn.name, "block": block}
    tuned = tuned_pipeline(ctx, model)
    if tuned is None:  # no run of cnn_comp (or autorelay tune) tuned this model: tune it here
        trials = QUICK_TRIALS if ctx.quick else FULL_TRIALS
        ctx.note(f"{cnn.name}: not tuned in the log; tuning {trials} trials with pipeline {named}")
        result["tuning"] = tune(ctx, model, trials, named)
        tuned = (named, None)
    result["tuned_pipeline"] = tuned[0]
    peers = {s: (make_step, (cnn.zoo, cnn.options, ctx.threads, s, block, tuned, ctx.db_url)) for s in STEPS}
    timed = time_isolated(peers, rounds=ROUNDS[ctx.quick], block_s=BLOCK_S[ctx.quick])
    failed = {s: t.error for s, t in timed.items() if t.error}
    if failed:
        raise RuntimeError(f"{cnn.name}: steps failed to build: {failed}")
    ref = timed["O0"].output
    for s in STEPS:
        diff = float(np.abs(timed[s].output - ref).max())
        if not diff <= tolerance(ref):
            raise AssertionError(f"{cnn.name}: step {s} differs from O0 by {diff:.3g}")
        result[s] = {"ms": timed[s].median_ms, "spread_ms": list(timed[s].spread_ms), "max_abs_diff": diff}
    return finite(result)


def speedups(result: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """Per step: (step, ms, speedup over the previous step, speedup over O0)."""
    out, prev = [], None
    base = result["O0"]["ms"]
    for s in STEPS:
        ms = result[s]["ms"]
        out.append((s, ms, prev / ms if prev else math.nan, base / ms))
        prev = ms
    return out


def _report(ctx: Context, rows: Sequence[Row]) -> Report:
    csv_rows, table, per_model = [], [], {}
    for r in sorted(rows, key=lambda r: r.unit):
        res = r.result
        per_model[res["model"]] = speedups(res)
        for s, ms, over_prev, over_o0 in per_model[res["model"]]:
            lo, hi = res[s]["spread_ms"]
            csv_rows.append({"model": res["model"], "step": s, "ms": ms, "p10_ms": lo, "p90_ms": hi,
                             "speedup_prev": over_prev, "speedup_o0": over_o0,
                             "max_abs_diff": res[s]["max_abs_diff"], "machine": r.machine})
            table.append([res["model"], s, ms, f"{lo:.3f}-{hi:.3f}", over_prev, over_o0,
                          f"{res[s]['max_abs_diff']:.1e}"])
    notes = [f"- {r.result['model']}: tuned step built with pipeline `{r.result['tuned_pipeline']}` and the "
             "log's schedules" + (f" (tuned here: {r.result['tuning']['new_trials']} new trials)"
                                  if "tuning" in r.result else " (tuned earlier, e.g. by cnn_comp)")
             for r in rows]
    block = rows[0].result["block"] if rows else "?"
    md = "\n".join([
        "Batch 1, latency per build; each step adds passes to the previous one (`reproduce/experiments/"
        f"relay_opt.py`, `step_passes`). +layout packs channels in blocks of {block}. Each step runs in its "
        "own process, timed in alternated blocks; median and p10-p90 of block medians. Every step's "
        "output is checked against O0's (max abs diff) before its timing is accepted.", "",
        md_table(["model", "step", "ms", "p10-p90 ms", "x prev", "x O0", "max abs diff vs O0"], table, 3),
        "", *notes, ""])
    return Report(csv_rows, md, {"relay_opt": lambda fig: _draw(fig, per_model)})


def _draw(fig: Any, per_model: dict[str, list[tuple[str, float, float, float]]]) -> None:
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(STEPS))
    for i, s in enumerate(STEPS):
        xs = [m + (i - (len(STEPS) - 1) / 2) * width for m in range(len(per_model))]
        ys = [dict((st, o0) for st, _, _, o0 in steps)[s] for steps in per_model.values()]
        ax.bar(xs, ys, width, label=s)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(per_model)), list(per_model))
    ax.set_ylabel("speedup over O0 (x)")
    ax.set_title("Relay optimisation ablation, batch 1 (cumulative passes)")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))


EXPERIMENT = Experiment(
    name="relay_opt",
    title="Optimisation ablation: O0 to tuned, pass by pass",
    reference="Roesch et al., Relay (arXiv:1904.08368v2), Sec. 5.3 optimisation ablation, Fig. 5; "
              "Chen et al., TVM (OSDI 2018), Sec. 3 / Fig. 4 operator fusion 1.2-2x",
    quick_minutes=3.0,
    full_minutes=round(len(FULL) * (FULL_TRIALS * SECONDS_PER_TRIAL + 150.0) / 60),
    units=_units,
    measure=_measure,
    report=_report,
)
