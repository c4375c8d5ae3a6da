"""Quantization measured: a model quantized with one calibration method and one bit plan, its top-1
accuracy on the held-out digits (or its output error on a zoo model, which has no labels here) and
its latency timed beside the fp32 build (a batch of `LATENCY_BATCH` digits; batch 1 for zoo
models). `reproduce/experiments/quantization.py` and
`experiments/quantize_digits.py` call these; there is no other copy.

Plans (layer names from `quantizable_layers`, in execution order):

* `int8`: every conv2d / dense layer int8;
* `int8-ends-fp32`: the first and the last layer kept in fp32 (the usual fix when they lose most);
* `int8-ends-bf16`: the first and the last layer in bf16 (only where the host has AVX512-BF16:
  elsewhere bf16 kernels widen to fp32 and only save memory);
* `bf16`: every layer bf16 (no calibration), same condition;
* `fp32`: the baseline.

Latency is timed in this process, the quantized and the fp32 executable alternating round by round
(`search.models.interleaved_samples`), so a noisy moment on a shared machine hits both and each
point carries its own fp32 beside it; the spread is the 10th-90th percentile of the rounds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import autorelay
from autorelay.ir import IRModule
from autorelay.transform.quantize import (
    Calibration,
    QuantizePlan,
    calibrate,
    quantizable_layers,
    quantize_model,
)
from reproduce.digits import Digits, Model, top1

PLANS = ("int8", "int8-ends-fp32", "int8-ends-bf16", "bf16", "fp32")
CALIBRATION_BATCH = 32
# The digits nets take microseconds per image: a batch-1 call is mostly call overhead and thread
# wake-up, and on a shared machine its timing is noise. A batch of 32 takes milliseconds.
LATENCY_BATCH = 32


def needs_calibration(plan: str) -> bool:
    return plan.startswith("int8")


def needs_bf16(plan: str) -> bool:
    return "bf16" in plan


def bf16_available(threads: int | None = None) -> bool:
    """Whether the host runs bf16 natively (the precision search's rule: `default_precisions`)."""
    from search.quantize_search import default_precisions

    return "bf16" in default_precisions("llvm", threads)


def plan_for(name: str, layers: Sequence[str]) -> QuantizePlan:
    """The QuantizePlan called `name` for a model with `layers`."""
    if name in ("int8", "bf16", "fp32"):
        return QuantizePlan.uniform(name)
    if name.startswith("int8-ends-"):
        keep = name.removeprefix("int8-ends-")
        return QuantizePlan({layers[0]: keep, layers[-1]: keep})
    raise ValueError(f"unknown plan {name!r}; plans: {', '.join(PLANS)}")


def quantize_digits_model(model: Model, params: dict[str, np.ndarray], data: Digits, method: str, plan: str,
                          batch: int, scheme: Any = None) -> tuple[IRModule, dict[str, np.ndarray]]:
    """`model` at `batch` with `plan` applied, calibrated by `method` on `data.x_cal` (int8 plans), in
    `scheme` (a `QuantizeScheme`; default: the one this host's kernels run fastest)."""
    mod = model.inference(batch)
    if plan == "fp32":
        return mod, dict(params)
    cal = Calibration("none", {})
    if needs_calibration(plan):
        cal_mod = model.inference(CALIBRATION_BATCH)
        batches = [{"data": data.x_cal[i:i + CALIBRATION_BATCH]}
                   for i in range(0, len(data.x_cal) - CALIBRATION_BATCH + 1, CALIBRATION_BATCH)]
        cal = calibrate(cal_mod, params, batches, method=method, progress=False)
    from autorelay.codegen import resolve_target
    from autorelay.transform.quantize.scheme import scheme_for_target

    if scheme is None:
        scheme = scheme_for_target(resolve_target("llvm"))  # 7-bit weights where that is faster (AVX2)
    qmod, qparams = quantize_model(mod, params, cal, plan_for(plan, quantizable_layers(mod)), scheme)
    return qmod, dict(qparams)


def latency(exes: Sequence[Any], x: np.ndarray, rounds: int) -> list[dict[str, float]]:
    """Per executable: median and 10th / 90th percentile of the per-round ms per call, timed in
    alternating rounds."""
    from search.models import interleaved_samples

    samples = interleaved_samples(list(exes), [x], rounds=rounds)
    out = []
    for s in samples:
        lo, med, hi = np.percentile(np.asarray(s) * 1e3, [10, 50, 90])
        out.append({"ms": float(med), "p10": float(lo), "p90": float(hi)})
    return out


def fastest_build(model: Any, threads: int, db: Any = None) -> Any:
    """`model` (a `search.models.Model`) built as `autorelay compile --pipeline auto` builds it: the
    log's pipeline and schedules, else each candidate pipeline with default schedules and the
    fastest kept (that build itself, not a second one). An int8 graph needs the channel-blocked
    pipeline for its dot-product kernels and a float one may not, so each side is measured in its own
    best form."""
    from search.models import build_model, schedule_source
    from search.pipeline_choice import choose_pipeline

    choice = choose_pipeline("auto", model, db, "llvm", threads, keep_build=db is None)
    if choice.exe is not None:
        return choice.exe
    source = schedule_source(db, model, threads=threads, pipeline=choice.pipeline) if db else None
    return build_model(model, source, threads=threads, pipeline=choice.pipeline)


def measure_digits(model: Model, params: dict[str, np.ndarray], data: Digits, method: str, plan: str, *,
                   threads: int, rounds: int = 15) -> dict[str, Any]:
    """Top-1 on `data.x_test`, agreement with fp32, latency of a `LATENCY_BATCH` batch beside fp32,
    each built with its fastest pipeline (`fastest_build`)."""
    t0 = time.perf_counter()
    build = {"target": "llvm", "threads": threads}
    f_mod = model.inference(len(data.x_test))
    fp32_logits = np.asarray(autorelay.build(f_mod, params=params, **build)(data.x_test))
    qmod, qparams = quantize_digits_model(model, params, data, method, plan, len(data.x_test))
    logits = np.asarray(autorelay.build(qmod, params=qparams, **build)(data.x_test))
    q1, p1 = quantize_digits_model(model, params, data, method, plan, LATENCY_BATCH)
    from search.models import Model as ZooModel

    feed = {"data": data.x_test[:LATENCY_BATCH]}
    exes = [fastest_build(ZooModel(f"{model.name}[{plan}]", q1, p1, feed), threads)]
    if plan != "fp32":
        fp32 = ZooModel(model.name, model.inference(LATENCY_BATCH), params, feed)
        exes.append(fastest_build(fp32, threads))
    build_s = time.perf_counter() - t0
    times = latency(exes, data.x_test[:LATENCY_BATCH], rounds)
    q, f = times[0], times[-1]
    acc, fp32_acc = top1(logits, data.y_test), top1(fp32_logits, data.y_test)
    return {"model": model.name, "calibration": method if needs_calibration(plan) else "-", "plan": plan,
            "top1": acc, "fp32_top1": fp32_acc, "drop": fp32_acc - acc, "test_images": len(data.y_test),
            "agree": float(np.mean(np.argmax(logits, 1) == np.argmax(fp32_logits, 1))) * 100.0,
            "logit_err": float(np.mean(np.abs(logits - fp32_logits)) / np.ptp(fp32_logits)) * 100.0,
            "ms": q["ms"], "ms_p10": q["p10"], "ms_p90": q["p90"],
            "fp32_ms": f["ms"], "fp32_ms_p10": f["p10"], "fp32_ms_p90": f["p90"],
            "speedup": f["ms"] / q["ms"], "batch": LATENCY_BATCH, "threads": threads, "rounds": rounds,
            "build_s": build_s}


def measure_zoo(name: str, method: str, plan: str, *, threads: int, db: Any = None, batches: int = 4,
                rounds: int = 10, seed: int = 0) -> dict[str, Any]:
    """A zoo model (MobileNet-v2) without labels: the relative output error against fp32 on seeded
    random inputs (calibrated on other random inputs), and the batch-1 latency beside fp32."""
    from search.models import load_model
    from search.quant_data import random_batches
    from search.quantize_search import quantized, relative_error

    t0 = time.perf_counter()
    model = load_model(name)
    cal_data, valid = random_batches(model, batches, seed=seed), random_batches(model, batches, seed=seed + 1)
    cal = Calibration("none", {})
    if needs_calibration(plan):
        cal = calibrate(model.mod, model.params, cal_data.batches, method=method, progress=False)
    qmodel = quantized(model, cal, plan_for(plan, quantizable_layers(model.mod)))
    f_exe, q_exe = fastest_build(model, threads, db), fastest_build(qmodel, threads, db)
    ref = [np.array(f_exe(*b.values()), np.float64) for b in valid.batches]
    got = [np.array(q_exe(*b.values()), np.float64) for b in valid.batches]
    build_s = time.perf_counter() - t0
    x = next(iter(valid.batches[0].values()))
    q, f = latency([q_exe, f_exe], x, rounds)
    return {"model": name, "calibration": method if needs_calibration(plan) else "-", "plan": plan,
            "rel_error": relative_error(got, ref), "samples": valid.samples,
            "ms": q["ms"], "ms_p10": q["p10"], "ms_p90": q["p90"],
            "fp32_ms": f["ms"], "fp32_ms_p10": f["p10"], "fp32_ms_p90": f["p90"],
            "speedup": f["ms"] / q["ms"], "batch": 1, "threads": threads, "rounds": rounds,
            "build_s": build_s}


__all__ = ["PLANS", "bf16_available", "latency", "measure_digits", "measure_zoo", "needs_bf16",
           "needs_calibration", "plan_for", "quantize_digits_model"]
