"""The Relay paper's vision inference comparison: AutoRelay untuned and tuned vs PyTorch eager vs ONNX
Runtime (and Apache TVM when installed), batch 1, latency.

Two units per model. `tune/<model>` tunes the model's kernels into the log exactly as
`autorelay tune --trials N` does (pipeline `auto`: the one the log tuned the model with, else the
measured fastest; resumable, logged trials count toward N). `time/<model>` then times every
backend in its own process in alternated blocks (`reproduce.peers.time_isolated`): AutoRelay with
the heuristic default schedules and with the log's tuned ones (same pipeline, so their ratio is
what tuning gained), and the baselines of `reproduce.baselines` on the same weights and inputs.
A baseline that is not installed is one line in the report, never a failure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.experiments.cnn_models import CNN, FULL, SECONDS_PER_TRIAL, finite, tune, tuned_pipeline
from reproduce.output import md_table

TVM_NOTE = ("Apache TVM untuned, on the ONNX export: Relax's default CPU pipeline (TVM >= 0.20; no "
            "MetaSchedule tuning), else Relay at opt_level 3")

QUICK = (CNN("nature-dqn"), CNN("dcgan"), CNN("resnet-18", 32))
# Trials per model (all of its tasks together). Full: ~40 per tuned task of the ResNet/MobileNet/VGG
# task lists, fewer for the two small networks.
FULL_TRIALS = {"resnet-18": 600, "mobilenet-v2": 800, "vgg-16": 400, "nature-dqn": 160, "dcgan": 160}
QUICK_TRIALS = 12
ROUNDS = {True: 4, False: 15}
DIFF_WARN = 1e-3  # outputs further apart than this (max abs) are named in the report: not the same network
BLOCK_S = {True: 0.15, False: 0.25}
BACKENDS = ("untuned", "tuned", "torch", "onnxruntime", "tvm")
LABELS = {"untuned": "AutoRelay untuned", "tuned": "AutoRelay tuned", "torch": "PyTorch eager",
          "onnxruntime": "ONNX Runtime", "tvm": "Apache TVM (untuned)"}
SHORT = {"untuned": "untuned", "tuned": "tuned", "torch": "torch", "onnxruntime": "ORT", "tvm": "TVM"}


def trials(ctx: Context, cnn: CNN) -> int:
    return QUICK_TRIALS if ctx.quick else FULL_TRIALS[cnn.zoo]


def _units(ctx: Context) -> list[Unit]:
    units = []
    for cnn in QUICK if ctx.quick else FULL:
        n = trials(ctx, cnn)
        units.append(Unit(f"tune/{cnn.name}", {**cnn.as_params(), "trials": n},
                          expected_s=n * SECONDS_PER_TRIAL + (20.0 if ctx.quick else 60.0)))
        units.append(Unit(f"time/{cnn.name}", cnn.as_params(), expected_s=20.0 if ctx.quick else 90.0))
    return units


def _measure(ctx: Context, unit: Unit) -> dict[str, Any]:
    cnn = CNN.from_params(unit.params)
    if unit.key.startswith("tune/"):
        return tune(ctx, cnn.load(), unit.params["trials"], "auto")
    return _time(ctx, cnn)


def _time(ctx: Context, cnn: CNN) -> dict[str, Any]:
    from reproduce.baselines import baseline_peers, make_autorelay, missing, peer_figures
    from reproduce.peers import time_isolated

    tuned = tuned_pipeline(ctx, cnn.load())
    if tuned is None:
        raise RuntimeError(f"the log has no tuning run of {cnn.name}: tune/{cnn.name} must run first")
    pipeline, plan = tuned
    peers: dict[str, Any] = {
        "untuned": (make_autorelay, (cnn.zoo, cnn.options, ctx.threads, pipeline, None, plan)),
        "tuned": (make_autorelay, (cnn.zoo, cnn.options, ctx.threads, pipeline, ctx.db_url, plan))}
    skipped = {p: why for p in ("torch", "onnxruntime", "tvm") if (why := missing(p))}
    for why in skipped.values():
        ctx.note(why)
    with_tvm = "tvm" not in skipped
    peers.update(baseline_peers(cnn.zoo, cnn.options, ctx.threads, log=ctx.log, with_tvm=with_tvm))
    timed = time_isolated(peers, rounds=ROUNDS[ctx.quick], block_s=BLOCK_S[ctx.quick])
    ours = timed["tuned"].error or timed["untuned"].error
    if ours:
        raise RuntimeError(f"AutoRelay failed to build {cnn.name}: {ours}")
    figures = peer_figures(timed, reference="tuned", log=ctx.log)
    return finite({"model": cnn.name, "pipeline": pipeline, "skipped": skipped, **figures})


def _ratio(a: Any, b: Any) -> float:
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else math.nan


def _spread(res: dict[str, Any], peer: str) -> str:
    lo_hi = res.get(f"{peer}_spread")
    return f"{lo_hi[0]:.3g}-{lo_hi[1]:.3g}" if lo_hi and None not in lo_hi else "-"


def _report(ctx: Context, rows: Sequence[Row]) -> Report:
    tunes = {r.result["model"]: r.result for r in rows if r.unit.startswith("tune/")}
    times = {r.result["model"]: (r.result, r.machine) for r in rows if r.unit.startswith("time/")}
    present = [b for b in BACKENDS if any(f"{b}_ms" in res for res, _ in times.values())]
    csv_rows, table = [], []
    for model, (res, machine) in times.items():
        ms = {b: res.get(f"{b}_ms") for b in BACKENDS}
        csv_rows.append({"model": model, "pipeline": res["pipeline"], "machine": machine,
                         **{f"{b}_ms": ms[b] for b in BACKENDS},
                         **{f"{b}_p10_ms": (res.get(f"{b}_spread") or [None, None])[0] for b in BACKENDS},
                         **{f"{b}_p90_ms": (res.get(f"{b}_spread") or [None, None])[1] for b in BACKENDS},
                         **{f"max_abs_diff_{b}": res.get(f"max_abs_diff_{b}") for b in BACKENDS[2:]},
                         "trials": tunes.get(model, {}).get("trials_logged")})
        table.append([model, *(ms[b] for b in present), _ratio(ms["untuned"], ms["tuned"]),
                      *(_ratio(ms["tuned"], ms[b]) for b in present if b not in ("untuned", "tuned")),
                      ", ".join(f"{SHORT[b]} {_spread(res, b)}" for b in present)])
    heads = ["model", *(f"{SHORT[b]} ms" for b in present), "tuning speedup",
             *(f"tuned/{SHORT[b]}" for b in present if b not in ("untuned", "tuned")), "p10-p90 ms"]
    tune_table = [[m, t["pipeline"], t["trials_logged"], t["new_trials"], t["tasks"], t["tune_s"]]
                  for m, t in tunes.items()]
    skipped = sorted({why for res, _ in times.values() for why in res.get("skipped", {}).values()})
    skipped += [f"warning: {m} under {SHORT[b]} differs from AutoRelay tuned by {d:.2g} (max abs)"
                for m, (res, _) in times.items() for b in BACKENDS
                if (d := res.get(f"max_abs_diff_{b}")) is not None and d > DIFF_WARN]
    md = "\n".join([
        f"Batch 1, {ctx.threads} threads, latency in ms (median of all calls; p10-p90 of the block medians). "
        "Each backend runs in its own process, timed in alternated blocks. `untuned`: AutoRelay with the "
        "heuristic default schedules; `tuned`: the log's tuned schedules, same pass pipeline. "
        "`tuned/X` < 1 means AutoRelay tuned is faster than X. Same weights and inputs everywhere.", "",
        md_table(heads, table, 3), "", *(f"- {why}" for why in skipped),
        *([f"- TVM: {TVM_NOTE}"] if "tvm" in present else []), "",
        "Tuning (`autorelay tune`, xgb, pipeline auto):", "",
        md_table(["model", "pipeline", "trials logged", "new trials", "tasks", "tune s"], tune_table, 1), ""])
    return Report(csv_rows, md, {"cnn_comp": lambda fig: _draw(fig, times, present)})


def _draw(fig: Any, times: dict[str, Any], present: list[str]) -> None:
    ax = fig.add_subplot()
    models = list(times)
    width = 0.8 / max(1, len(present))
    for i, b in enumerate(present):
        xs = [m + (i - (len(present) - 1) / 2) * width for m in range(len(models))]
        ys = [times[m][0].get(f"{b}_ms") or math.nan for m in models]
        ax.bar(xs, ys, width, label=LABELS[b])
    ax.set_yscale("log")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("latency, ms (log scale)")
    ax.set_title("Vision inference, batch 1")
    ax.legend(fontsize=8)


EXPERIMENT = Experiment(
    name="cnn_comp",
    title="Vision inference: AutoRelay vs PyTorch vs ONNX Runtime",
    reference="Roesch et al., Relay (arXiv:1904.08368v2), Sec. 5.2 vision inference, Fig. 6",
    quick_minutes=3.0,
    full_minutes=round(sum(FULL_TRIALS.values()) * SECONDS_PER_TRIAL / 60 + len(FULL) * 2.5),
    units=_units,
    measure=_measure,
    report=_report,
)
