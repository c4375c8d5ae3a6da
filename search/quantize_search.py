"""Which layers of a model to run in int8 (or bf16): a measured search over per-layer precision.

Quantizing every layer is fastest but can cost too much accuracy; some layers (often the first and
the last) lose far more than others. The search answers "the fastest plan that loses at most X":

1. sensitivity: each layer alone in int8 (the rest fp32), built and scored; layers ordered from the
   least to the most damaging;
2. a multi-objective search (Optuna's NSGA-II) over one precision per layer (int8 / fp32, and bf16
   for layers with a bf16 kernel on targets with AVX512-BF16), minimising the measured end-to-end
   latency and the accuracy drop, seeded with all-int8, all-fp32, all-bf16 (where offered) and the
   sensitivity-ordered prefixes (the k least sensitive layers in int8, k spread over 1..n-1 so a
   small budget still spans the range);
3. the Pareto front of every measured point; its fastest point within the bound is the pick.

Every point is a real build (`quantize_model`, then the compiler with the tuning log's schedules —
logged or transferred — through the quantized model's own schedule source), run on the validation
set and timed interleaved with the fp32 build, so a noisy moment hits both and each point carries
its own baseline: points are ranked by their latency over that baseline's (`PlanPoint.relative`),
never by medians taken in different rounds. Accuracy is top-1 against labels when the validation
set has them, else the relative error of the outputs against the fp32 model's (`drop` is then that
error).

Precision is the last of the graph-level choices: given the float model's per-layer layout plan
(`layout`, what `autorelay tune --pipeline plan` stored), every point keeps it — each float layer in
its block and Winograd tile, the int8 convolutions blocked for the dot-product instructions
(`LayoutPlan.on_quantized`) — and the log gets, next to each front point, the plan its quantized
model was built with, under that model's key, so `--precision plan` builds rebuild it exactly. The
layouts are not searched again per precision plan: the int8 layers take the target's vector block,
which the plan's float layers mostly use already.

    result = search_precisions(model, calib, valid, max_drop=0.01, db=db, trials=16)
    print(result.table()); result.chosen.plan
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import autorelay
from autorelay.codegen import resolve_target
from autorelay.lower import model_key
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from autorelay.transform.quantize import (
    QuantizePlan,
    annotate,
    bf16_support,
    calibrate,
    float_layers,
    prepare_for_quantize,
    quantizable_layers,
    quantize_model,
)
from autorelay.transform.quantize.scheme import scheme_for_target
from search.models import (
    Model,
    build_model,
    interleaved_samples,
    prepare_model,
    schedule_source,
    tuning_target,
)
from search.pipeline_choice import PLAN, prepare_plan
from search.precision_points import PlanPoint, pareto_front, plan_key, relative_error, top1
from search.quant_data import DataSet

log = logging.getLogger(__name__)
PRECISIONS = ("int8", "fp32")  # bf16 joins where the target has AVX512-BF16 (`default_precisions`)
Progress = Callable[[str], None]


def _outputs(exe: Any, batches: Sequence[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The first output of every batch (copied: an executor may reuse its output buffers)."""
    out = []
    for b in batches:
        res = exe(*[b[n] for n in exe.input_names])
        first = res[0] if isinstance(res, list | tuple) else res
        out.append(np.array(first, dtype=np.float64))
    return out


def quantized(model: Model, calibration: Any, plan: Mapping[str, str] | Any, target: str = "llvm",
              threads: int | None = None) -> Model:
    """The model with `plan` applied (a layer -> precision mapping or a QuantizePlan), in the
    integer scheme whose kernels are fastest on `target` (`scheme_for_target`)."""
    qplan = plan if isinstance(plan, QuantizePlan) else QuantizePlan(dict(plan))
    scheme = scheme_for_target(resolve_target(target, threads))
    qmod, qparams = quantize_model(model.mod, model.params, calibration, qplan, scheme)
    return Model(f"{model.name}[quantized]", qmod, dict(qparams), model.inputs)


def plan_json(plan: Mapping[str, str]) -> dict[str, Any]:
    """The QuantizePlan's own JSON (what `QuantizePlan.from_json` reads back), as a dict."""
    raw = QuantizePlan(dict(plan)).to_json()
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


@dataclass
class SearchResult:
    model: str
    target: str
    metric: str  # "top1" | "rel_error"
    max_drop: float
    fp32_accuracy: float
    sensitivity: dict[str, float]  # layer -> drop when quantized alone, least sensitive first
    points: list[PlanPoint]  # every measured point, in measurement order
    front: list[PlanPoint]
    chosen: PlanPoint | None  # the fastest front point (against fp32 in its rounds) with drop <= max_drop
    stored: list[int] = field(default_factory=list)  # ids in the log's quantization_plans
    layout: LayoutPlan | None = None  # the float model's layout plan every build kept, if any
    # plan_key -> the quantized model's key and the layout plan it was built with (None: a named pipeline)
    quantized: dict[str, tuple[str, LayoutPlan | None]] = field(default_factory=dict)

    def table(self) -> str:
        """The front as text: plan summary, latency (spread), accuracy, drop, speedup; * = chosen."""
        pct = self.metric == "top1"

        def acc(v: float) -> str:
            return f"{v * 100:.2f}%" if pct else f"{v:.4g}"

        head = (f"{self.model} on {self.target}: Pareto front of {len(self.points)} measured plans "
                f"({'top-1' if pct else 'relative output error'}; fp32 {acc(self.fp32_accuracy)}; "
                f"bound: drop <= {f'{self.max_drop * 100:.2f} pt' if pct else f'{self.max_drop:.4g}'})")
        rows = [("", "plan", "latency ms", "spread ms", "accuracy", "drop", "vs fp32")]
        for p in self.front:
            drop = f"{p.drop * 100:.2f} pt" if pct else f"{p.drop:.4g}"
            rows.append(("*" if p is self.chosen else "", p.summary(), f"{p.latency_ms:.4g}",
                         f"{p.spread_ms[0]:.4g}-{p.spread_ms[1]:.4g}", acc(p.accuracy), drop,
                         f"{p.fp32_latency_ms / p.latency_ms:.2f}x"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        if self.chosen is None:
            lines.append("no plan is within the bound")
        else:
            stored = " (stored in the log)" if self.stored else ""
            lines.append(f"* chosen: {self.chosen.summary()}{stored}")
        return "\n".join(lines)


class _Evaluator:
    """Builds, scores and times plans, once each; the fp32 build is the baseline of every timing."""

    def __init__(self, model: Model, calibration: Any, valid: DataSet, layers: list[str], *, db: Any,
                 target: str, threads: int | None, pipeline: str, layout: LayoutPlan | None, rounds: int,
                 min_seconds: float, progress: Progress) -> None:
        self.model, self.calibration, self.valid, self.layers = model, calibration, valid, layers
        self.db, self.target, self.threads, self.pipeline = db, target, threads, pipeline
        self.layout, self.conv_layers = layout, conv_layers(model.mod)
        self.int8_block = resolve_target(target, threads).vector_lanes()  # int32 sums: one vector
        self.rounds, self.min_seconds, self.progress = rounds, min_seconds, progress
        self.points: dict[str, PlanPoint] = {}
        self.quantized: dict[str, tuple[str, LayoutPlan | None]] = {}  # plan key -> model key, layout
        self.fp32_exe = self._build(model, layout)
        self.reference = _outputs(self.fp32_exe, valid.batches)
        self.metric = "top1" if valid.labels is not None else "rel_error"
        self.fp32_accuracy = self._score(self.reference)
        self.timing_inputs = [valid.batches[0][n] for n in self.fp32_exe.input_names]

    def _build(self, model: Model, layout: LayoutPlan | None) -> Any:
        if layout is not None:
            prepared = prepare_plan(model, self.target, self.threads, layout)
        else:
            prepared = prepare_model(model, self.target, threads=self.threads, pipeline=self.pipeline)
        src = schedule_source(self.db, model, prepared=prepared) if self.db is not None else None
        return build_model(model, src, prepared=prepared)

    def _score(self, outputs: list[np.ndarray]) -> float:
        if self.valid.labels is not None:
            return top1(outputs, self.valid.labels)
        return relative_error(outputs, self.reference)

    def drop(self, accuracy: float) -> float:
        return self.fp32_accuracy - accuracy if self.metric == "top1" else accuracy

    def __call__(self, plan: Mapping[str, str], stage: str) -> PlanPoint:
        key = plan_key(plan)
        if key in self.points:
            return self.points[key]
        if all(p == "fp32" for p in plan.values()):
            exe = self.fp32_exe  # the plan that quantizes nothing is the fp32 model itself
        else:
            qmodel = quantized(self.model, self.calibration, plan, self.target, self.threads)
            layout = None
            if self.layout is not None:  # the float layers keep their layouts, int8 ones take a vector
                kept = [n for n in float_layers(qmodel.mod) if n in self.conv_layers]
                layout = self.layout.on_quantized(kept, self.int8_block)
            self.quantized[key] = (model_key(qmodel.mod), layout)
            exe = self._build(qmodel, layout)
        accuracy = self._score(_outputs(exe, self.valid.batches))
        exes = [exe] if exe is self.fp32_exe else [exe, self.fp32_exe]
        samples = interleaved_samples(exes, self.timing_inputs, rounds=self.rounds,
                                      min_seconds=self.min_seconds)
        ms = [np.asarray(s) * 1e3 for s in samples]
        lo, hi = np.percentile(ms[0], [10, 90])
        point = PlanPoint(dict(plan), float(np.median(ms[0])), (float(lo), float(hi)),
                          float(np.median(ms[-1])), accuracy, self.drop(accuracy), stage)
        self.points[key] = point
        self.progress(f"[{len(self.points)}] {stage}: {point.summary()}: {point.latency_ms:.4g} ms "
                      f"(fp32 {point.fp32_latency_ms:.4g}), drop {point.drop:.4g}")
        return point


def spread_prefixes(n: int) -> list[int]:
    """1 .. n-1 in an order that covers the range early: the middle first, then the middles of the
    halves, and so on (n = 9: 4, 2, 6, 1, 3, 5, 7, 8). A budget smaller than n then still tries
    prefixes from few int8 layers to almost all, not only the first few counted down from n-1."""
    out: list[int] = []
    spans = [(1, n - 1)]
    while spans:
        nxt = []
        for lo, hi in spans:
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            out.append(mid)
            nxt += [(lo, mid - 1), (mid + 1, hi)]
        spans = nxt
    return out


def _seeds(layers: list[str], order: list[str]) -> list[dict[str, str]]:
    """All-int8, all-fp32, then the k least sensitive layers in int8, k from 1 to n-1 in the order of
    `spread_prefixes` (a small budget samples the whole latency/accuracy range)."""
    seeds = [dict.fromkeys(layers, "int8"), dict.fromkeys(layers, "fp32")]
    for k in spread_prefixes(len(order)):
        chosen = set(order[:k])
        seeds.append({n: "int8" if n in chosen else "fp32" for n in layers})
    return seeds


def default_precisions(target: str, threads: int | None = None) -> tuple[str, ...]:
    """int8 and fp32; bf16 too where the target has AVX512-BF16 (elsewhere its kernels widen to
    fp32 and only save memory, so it is rarely worth a place in the search)."""
    return (*PRECISIONS, "bf16") if resolve_target(target, threads).has("avx512bf16") else PRECISIONS


def _choices(model: Model, layers: list[str], precisions: Sequence[str]) -> dict[str, list[str]]:
    unknown = sorted(set(precisions) - {"int8", "bf16", "fp32"})
    if unknown or "fp32" not in precisions:
        raise ValueError(f"precisions must include fp32 and be among int8, bf16, fp32; "
                         f"got {list(precisions)}")
    bf16_ok: set[str] = set()
    if "bf16" in precisions:
        ann = annotate(prepare_for_quantize(model.mod, model.params))
        bf16_ok = {layer.name for layer in ann.layers.values() if not bf16_support(layer)}
    return {n: [p for p in precisions if p != "bf16" or n in bf16_ok] for n in layers}


def search_precisions(model: Model, calibration_data: DataSet, validation: DataSet, *, max_drop: float,
                      db: Any = None, target: str = "llvm", threads: int | None = None,
                      pipeline: str = "default", method: str = "max", trials: int = 16, seed: int = 0,
                      rounds: int = 7, min_seconds: float = 0.02, store: bool = True,
                      progress: Progress | None = None, precisions: Sequence[str] | None = None,
                      layout: LayoutPlan | None = None) -> SearchResult:
    """Search per-layer precisions of `model` (see the module docstring). `trials`: plans the NSGA-II
    stage measures (seeds included; duplicates are not measured again); the sensitivity stage adds one
    build per layer. With `db` (a TuningDB) builds use its schedules and, when `store`, the front is
    stored in its `quantization_plans` table with the pick marked. `precisions`: the choices per
    layer (default `default_precisions(target)`); bf16 is offered only to layers with a bf16 kernel.
    `layout`: the float model's per-layer layout plan (`autorelay tune --pipeline plan`); every build
    then keeps each float layer in its layout and runs the int8 ones blocked (`LayoutPlan.on_quantized`),
    and `pipeline` is ignored."""
    import optuna

    if not (max_drop >= 0 and math.isfinite(max_drop)):
        raise ValueError(f"max_drop must be a finite number >= 0, got {max_drop}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if not validation.batches:
        raise ValueError("the validation set is empty")
    say = progress or (lambda msg: log.info("%s", msg))
    layers = list(quantizable_layers(model.mod))
    if not layers:
        raise ValueError(f"model {model.name} has no quantizable layer (conv2d or dense)")
    say(f"{model.name}: {len(layers)} quantizable layers; calibrating ({method}) on "
        f"{len(calibration_data.batches)} batches")
    calib = calibrate(model.mod, model.params, calibration_data.batches, method=method, progress=False)
    if layout is not None:
        pipeline = PLAN
    evaluate = _Evaluator(model, calib, validation, layers, db=db, target=target, threads=threads,
                          pipeline=pipeline, layout=layout, rounds=rounds, min_seconds=min_seconds,
                          progress=say)

    choices = _choices(model, layers, precisions or default_precisions(target, threads))
    sensitivity = {n: evaluate({m: "int8" if m == n else "fp32" for m in layers}, "sensitivity").drop
                   for n in layers}
    order = sorted(layers, key=lambda n: (sensitivity[n], layers.index(n)))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.NSGAIISampler(population_size=max(4, min(16, trials // 2)), seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    seeds = _seeds(layers, order)
    if any("bf16" in c for c in choices.values()):  # everything that can, in bf16
        seeds.insert(2, {n: "bf16" if "bf16" in choices[n] else "fp32" for n in layers})
    for s in seeds:
        study.enqueue_trial(s, skip_if_exists=True)
    searched: set[str] = set()
    space = math.prod(len(c) for c in choices.values())
    attempts = 0
    while len(searched) < min(trials, space) and attempts < 10 * trials:
        attempts += 1
        trial = study.ask()
        plan = {n: trial.suggest_categorical(n, choices[n]) for n in layers}
        stage = "seed" if attempts <= len(seeds) else "search"
        point = evaluate(plan, stage)
        searched.add(plan_key(plan))
        study.tell(trial, [point.relative, point.drop])

    points = list(evaluate.points.values())
    front = pareto_front(points)
    within = [p for p in front if p.drop <= max_drop]
    chosen = min(within, key=lambda p: (p.relative, p.drop)) if within else None
    result = SearchResult(model.name, tuning_target(target, threads), evaluate.metric, max_drop,
                          evaluate.fp32_accuracy, {n: sensitivity[n] for n in order}, points, front, chosen,
                          layout=layout, quantized=evaluate.quantized)
    if db is not None and store:
        result.stored = store_front(db, model, result, calibration_data, validation, method=method,
                                    pipeline=pipeline, calibration=calib)
    return result


def store_front(db: Any, model: Model, result: SearchResult, calibration_data: DataSet, validation: DataSet,
                *, method: str, pipeline: str, calibration: Any = None) -> list[int]:
    """Store every front point of `result` (the pick marked chosen); returns the row ids."""
    info: dict[str, Any] = {"pipeline": pipeline, "calibration_source": calibration_data.source,
                            "validation_source": validation.source, "validation_samples": validation.samples,
                            "points_measured": len(result.points)}
    if result.layout is not None:
        info["layout_plan"] = result.layout.to_dict()
    if calibration is not None and hasattr(calibration, "to_json"):
        raw = calibration.to_json()
        info["calibration_ranges"] = json.loads(raw) if isinstance(raw, str) else raw
    ids = []
    key = model_key(model.mod)
    for p in result.front:
        ids.append(db.store_plan(
            key, result.target, plan_json(p.plan), model=model.name, calibration=method,
            latency_ms=p.latency_ms, latency_spread_ms=p.spread_ms, metric=result.metric, accuracy=p.accuracy,
            accuracy_drop=p.drop, max_drop=result.max_drop, fp32_latency_ms=p.fp32_latency_ms,
            fp32_accuracy=result.fp32_accuracy, chosen=p is result.chosen,
            compiler_version=autorelay.__version__, info={**info, "stage": p.stage}))
        qkey, layout = result.quantized.get(plan_key(p.plan), (key, None))
        if layout is not None:  # the quantized model's builds find the layouts it was measured with
            db.store_layout_plan(qkey, result.target, layout.to_dict(), latency_ms=p.latency_ms,
                                 model=f"{model.name}[precision plan #{ids[-1]}]", chosen=True,
                                 compiler_version=autorelay.__version__,
                                 info={"winner": PLAN, "precision_plan": ids[-1],
                                       "float_layout_plan": info.get("layout_plan")})
    return ids


__all__ = ["PRECISIONS", "PlanPoint", "SearchResult", "pareto_front", "plan_json", "quantized",
           "relative_error", "search_precisions", "store_front", "top1"]
