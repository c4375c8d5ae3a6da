"""Relay's automatic quantization: accuracy against latency per calibration method (max,
percentile, KL) and bit plan (all int8; first and last layer kept in fp32 or bf16; all bf16; fp32).

Accuracy needs labels, so the networks are digit classifiers trained here on scikit-learn's digits
(`reproduce.digits`, seconds to train) and scored by top-1 on the held-out images; the full run
adds a ResNet-style digits network and MobileNet-v2 from the zoo, which has no labelled data here
and is scored by its output error relative to fp32 instead. One unit per (model, plan, calibration);
bf16 plans only where the host has AVX512-BF16. Latency: timed beside fp32 (see `quant_measure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.output import md_table

QUICK_MODELS, FULL_MODELS = ("digits-cnn",), ("digits-cnn", "digits-resnet")
ZOO_MODELS = ("mobilenet-v2",)  # full run only: unlabelled, relative output error
QUICK_EPOCHS, FULL_EPOCHS = 8, 20  # the residual net trains half as many (`_epochs`)
METHODS: tuple[str, ...] = ("max", "percentile", "kl")
QUICK_ROUNDS, FULL_ROUNDS = 11, 25  # latency rounds (alternating with fp32)


def _epochs(ctx: Context, model: str) -> int:
    n = QUICK_EPOCHS if ctx.quick else FULL_EPOCHS
    return max(1, n // 2) if model == "digits-resnet" else n


def _plans(ctx: Context) -> list[str]:
    from reproduce.quant_measure import PLANS, bf16_available, needs_bf16

    bf16 = bf16_available(ctx.threads)
    return [p for p in PLANS if bf16 or not needs_bf16(p)]


def _units(ctx: Context) -> list[Unit]:
    from reproduce.quant_measure import needs_calibration

    units = []
    for model in QUICK_MODELS if ctx.quick else FULL_MODELS:
        epochs = _epochs(ctx, model)
        for plan in _plans(ctx):
            for method in METHODS if needs_calibration(plan) else ("-",):
                params = {"model": model, "plan": plan, "method": method, "epochs": epochs}
                units.append(Unit(f"{model} {plan} {method}", params, expected_s=7.0))
    if not ctx.quick:
        for model in ZOO_MODELS:
            for plan in ("int8", "int8-ends-fp32"):
                for method in METHODS:
                    params = {"model": model, "plan": plan, "method": method, "zoo": True}
                    units.append(Unit(f"{model} {plan} {method}", params, expected_s=120.0))
    return units


def _measure(ctx: Context, unit: Unit) -> Mapping[str, Any]:
    from reproduce.digits import MODELS, digits, trained
    from reproduce.quant_measure import measure_digits, measure_zoo

    p = unit.params
    if p.get("zoo"):
        return measure_zoo(p["model"], p["method"], p["plan"], threads=ctx.threads, db=ctx.db, seed=ctx.seed,
                           rounds=FULL_ROUNDS)
    model = MODELS[p["model"]]
    params = trained(model.name, p["epochs"], ctx.seed, ctx.threads)
    row = measure_digits(model, params, digits(model, ctx.seed), p["method"], p["plan"], threads=ctx.threads,
                         rounds=QUICK_ROUNDS if ctx.quick else FULL_ROUNDS)
    row["epochs"] = p["epochs"]
    return row


def _spread(x: Mapping[str, Any], key: str) -> str:
    return f"{x[key]:.4f} ({x[key + '_p10']:.4f}-{x[key + '_p90']:.4f})"


def _noise(rows: Sequence[Row]) -> str:
    """How far the same fp32 build's median moved between units: the scale below which a latency
    difference between plans says nothing on this machine."""
    fp32 = [r.result["fp32_ms"] for r in rows]
    lo, hi = min(fp32), max(fp32)
    hint = ", or with --threads 1" if rows[0].result.get("threads", 1) > 1 else ""
    verdict = ("latency differences smaller than that are noise here (a shared or busy machine; rerun on "
               f"a quiet one{hint})") if hi > 1.25 * lo else "the timings were steady"
    return f"The fp32 build timed beside each unit: {lo:.4f} to {hi:.4f} ms ({hi / lo:.2f}x); {verdict}.\n"


def _digits_table(rows: Sequence[Row]) -> str:
    body = [[x["plan"], x["calibration"], x["top1"], x["drop"], x["agree"], _spread(x, "ms"),
             _spread(x, "fp32_ms"), x["speedup"]] for x in (r.result for r in rows)]
    return md_table(["plan", "calibration", "top-1 %", "drop (points)", "agrees with fp32 %",
                     "ms (p10-p90)", "fp32 ms beside it", "speed-up"], body)


def _zoo_table(rows: Sequence[Row]) -> str:
    body = [[x["model"], x["plan"], x["calibration"], x["rel_error"], _spread(x, "ms"), _spread(x, "fp32_ms"),
             x["speedup"]] for x in (r.result for r in rows)]
    return md_table(["model", "plan", "calibration", "output error vs fp32", "ms (p10-p90)", "fp32 ms",
                     "speed-up"], body, digits=4)


def _report(ctx: Context, rows: Sequence[Row]) -> Report:
    order = {u.key: i for i, u in enumerate(_units(ctx))}
    rows = sorted(rows, key=lambda r: order.get(r.unit, len(order)))
    csv_rows = [{"unit": r.unit, "machine": r.machine, **r.result} for r in rows]
    by_model: dict[str, list[Row]] = {}
    for r in rows:
        if "top1" in r.result:
            by_model.setdefault(r.result["model"], []).append(r)
    zoo = [r for r in rows if "rel_error" in r.result]
    parts = []
    for model, mrows in by_model.items():
        x = mrows[0].result
        parts += [f"## {model}: top-1 on {x['test_images']} held-out digits (trained {x['epochs']} epochs); "
                  f"latency of a batch of {x.get('batch', 1)}", "",
                  _digits_table(mrows), "", _noise(mrows)]
    if zoo:
        parts += ["## Zoo models (no labels here): relative output error against fp32 on random inputs", "",
                  _zoo_table(zoo), ""]
    if not any("bf16" in r.result.get("plan", "") for r in rows):
        parts.append("No bf16 plans: this host has no AVX512-BF16 (bf16 kernels would widen to fp32).\n")
    parts.append(f"Latency: {ctx.threads} threads, median of alternating rounds with the fp32 build "
                 "(p10-p90 of the rounds); on a shared machine the spread says how much to trust a ratio.")
    figures = {f"quantization_{m}": (lambda fig, mr=mr, m=m: _draw(fig, m, mr)) for m, mr in by_model.items()}
    return Report(csv_rows, "\n".join(parts) + "\n", figures)


def _draw(fig: Any, model: str, rows: Sequence[Row]) -> None:
    ax = fig.add_subplot()
    markers = {"int8": "o", "int8-ends-fp32": "s", "int8-ends-bf16": "D", "bf16": "^", "fp32": "*"}
    for method in sorted({r.result["calibration"] for r in rows}):
        for r in (r for r in rows if r.result["calibration"] == method):
            x = r.result
            ax.errorbar(x["ms"], x["top1"], xerr=[[x["ms"] - x["ms_p10"]], [x["ms_p90"] - x["ms"]]],
                        marker=markers.get(x["plan"], "x"), color={"max": "C0", "percentile": "C1",
                                                                    "kl": "C2"}.get(method, "k"),
                        markersize=8, capsize=2, linestyle="none")
    for plan, m in markers.items():
        ax.plot([], [], marker=m, color="gray", linestyle="none", label=plan)
    for method, c in (("max", "C0"), ("percentile", "C1"), ("kl", "C2"), ("- (no calibration)", "k")):
        ax.plot([], [], marker="o", color=c, linestyle="none", label=method)
    ax.set_xlabel(f"latency, batch of {rows[0].result.get('batch', 1)} (ms)")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.set_title(f"{model}: accuracy vs latency per calibration method and bit plan")
    ax.legend(fontsize=7, ncol=2)


EXPERIMENT = Experiment(
    name="quantization",
    title="Automatic quantization: accuracy vs latency",
    reference="Relay (Roesch et al., arXiv:1904.08368v2), Sec. 5.4 automatic quantization: accuracy "
              "table and Fig. 3 (left), latency per bit plan",
    quick_minutes=1.5,
    full_minutes=16.0,
    units=_units,
    measure=_measure,
    report=_report,
)
