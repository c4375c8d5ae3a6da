"""The precision search: every point of the front is a real build whose numbers can be re-derived
(accuracy by the reference interpreter on the quantized module), the front is what a brute-force
dominance check says, and what the log holds is the front with the right pick."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
import tuning_db
from autorelay.codegen import resolve_target
from autorelay.ir.expr import Call, Function
from autorelay.ir.visitor import post_order
from autorelay.lower import model_key
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from autorelay.transform.quantize import calibrate, quantizable_layers
from autorelay.transform.util import op_name
from search.models import Model, compile_model
from search.pipeline_choice import choose_pipeline
from search.quant_data import DataSet, random_batches
from search.quantize_search import (
    PlanPoint,
    pareto_front,
    plan_key,
    quantized,
    relative_error,
    search_precisions,
    spread_prefixes,
)

pytestmark = pytest.mark.cpu

NET = """
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 12, 12), float32], %w1: Tensor[(8, 3, 3, 3), float32], %b1: Tensor[(8), float32],
          %w2: Tensor[(8, 8, 3, 3), float32], %b2: Tensor[(8), float32], %w3: Tensor[(10, 8), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.relu(nn.bias_add(%0, %b1));
  %2 = nn.conv2d(%1, %w2, padding=[1, 1], channels=8, kernel_size=[3, 3]);
  %3 = nn.relu(nn.bias_add(%2, %b2));
  %4 = nn.global_avg_pool2d(%3);
  %5 = nn.batch_flatten(%4);
  nn.dense(%5, %w3, units=10)
}
"""


def tiny_convnet() -> Model:
    rng = np.random.default_rng(3)
    params = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b1": rng.standard_normal(8) * 0.1,
              "w2": rng.standard_normal((8, 8, 3, 3)) * 0.2, "b2": rng.standard_normal(8) * 0.1,
              "w3": rng.standard_normal((10, 8))}
    params = {k: v.astype("float32") for k, v in params.items()}
    inputs = {"x": rng.standard_normal((1, 3, 12, 12)).astype("float32")}
    return Model("tiny-convnet", autorelay.parse(NET), params, inputs)


def _reference_outputs(model: Model, batches: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The reference interpreter on the module (weights passed as arguments where they still are)."""
    out = []
    for b in batches:
        args = [b[p.name_hint] if p.name_hint in b else model.params[p.name_hint]
                for p in model.mod["main"].params]
        res = autorelay.evaluate(model.mod, *args)
        out.append(np.asarray(res[0] if isinstance(res, list | tuple) else res, dtype=np.float64))
    return out


def test_search_front_is_measured_stored_and_consistent(tmp_path) -> None:
    model = tiny_convnet()
    layers = quantizable_layers(model.mod)
    assert len(layers) == 3
    calib, valid = random_batches(model, 4, seed=0), random_batches(model, 6, seed=1)
    url = str(tmp_path / "log.sqlite")
    bound = 0.05
    with tuning_db.open(url) as db:
        result = search_precisions(model, calib, valid, max_drop=bound, db=db, threads=1, trials=4,
                                   rounds=3, min_seconds=0.002, precisions=("int8", "fp32"))
    assert result.metric == "rel_error" and result.fp32_accuracy == 0.0
    # sensitivity: one single-layer plan per layer, ordered from the least damaging
    assert sorted(result.sensitivity) == sorted(layers)
    assert list(result.sensitivity.values()) == sorted(result.sensitivity.values())
    # every point was built and timed: a full plan, a positive latency inside its spread
    keys = {tuple(sorted(p.plan.items())) for p in result.points}
    assert len(keys) == len(result.points) <= len(layers) + 4
    for p in result.points:
        assert set(p.plan) == set(layers) and set(p.plan.values()) <= {"int8", "fp32"}
        assert 0 < p.spread_ms[0] <= p.latency_ms <= p.spread_ms[1] and p.fp32_latency_ms > 0
    # the front: brute-force non-domination over all measured points
    for p in result.points:
        dominated = any(q.relative <= p.relative and q.drop <= p.drop and
                        (q.relative < p.relative or q.drop < p.drop) for q in result.points)
        assert (p in result.front) == (not dominated)
    fp32 = next(p for p in result.points if set(p.plan.values()) == {"fp32"})
    assert fp32.drop == 0.0
    assert any(set(p.plan.values()) == {"int8"} for p in result.points)  # the all-int8 seed
    # accuracy of the all-int8 point, re-derived by the reference interpreter (independent of the build)
    int8 = next(p for p in result.points if set(p.plan.values()) == {"int8"})
    cal = calibrate(model.mod, model.params, calib.batches, method="max", progress=False)
    want = relative_error(_reference_outputs(quantized(model, cal, int8.plan), valid.batches),
                          _reference_outputs(model, valid.batches))
    assert int8.accuracy == pytest.approx(want, rel=1e-3, abs=1e-6)
    # the pick: the fastest front point within the bound
    within = [p for p in result.front if p.drop <= bound]
    assert result.chosen is min(within, key=lambda p: p.relative)
    # the log holds exactly the front, the pick marked
    with tuning_db.open(url) as db:
        rows = db.plans(model_key(model.mod))
        assert sorted((r.latency_ms, r.accuracy_drop) for r in rows) == sorted(
            (p.latency_ms, p.drop) for p in result.front)
        assert len(rows) == len(result.stored) and all(r.target == result.target for r in rows)
        best = db.best_plan(model_key(model.mod), result.target)
        assert best.chosen and best.latency_ms == result.chosen.latency_ms
        assert best.metric == "rel_error" and best.max_drop == bound and best.fp32_accuracy == 0.0


def test_a_layout_plan_joins_the_precision_search(tmp_path, monkeypatch) -> None:
    """Given the float model's layout plan, every quantized build keeps it (its float layers renamed,
    the int8 convolutions blocked), the log holds the precision plans with that layout and each
    front point's renamed plan under its quantized model's key, and `compile` with `auto` rebuilds a
    stored point exactly so: its outputs are the reference interpreter's on the quantized model.

    Timings are fixed (every quantized build 1 ms, the fp32 one 2 ms): which plans reach the front
    must not depend on a loaded machine's measurements (int8 builds of this tiny network timed
    slower than fp32 under a full test run, leaving no int8 point to check)."""
    import search.quantize_search as qs

    monkeypatch.setattr(qs, "interleaved_samples", lambda exes, inputs, rounds, min_seconds: [
        [1e-3 if k < len(exes) - 1 else 2e-3] * rounds for k in range(len(exes))])
    model = tiny_convnet()
    layers = conv_layers(model.mod)
    layout = LayoutPlan({"conv2d_0": 8, "conv2d_1": 0}, {"conv2d_1": 2})
    calib, valid = random_batches(model, 3, seed=0), random_batches(model, 4, seed=1)
    url = str(tmp_path / "log.sqlite")
    with tuning_db.open(url) as db:
        result = search_precisions(model, calib, valid, max_drop=1.0, db=db, threads=1, trials=4, rounds=2,
                                   min_seconds=0.001, precisions=("int8", "fp32"), layout=layout)
    assert result.layout == layout and result.chosen is not None
    cal = calibrate(model.mod, model.params, calib.batches, method="max", progress=False)
    lanes = resolve_target("llvm", 1).vector_lanes()
    for p in result.points:
        int8 = [n for n, v in p.plan.items() if v == "int8"]
        if not int8:
            assert plan_key(p.plan) not in result.quantized  # all fp32: the float model's own build
            continue
        qkey, qlayout = result.quantized[plan_key(p.plan)]
        assert qlayout == layout.on_quantized([n for n in layers if n not in int8], lanes)
        assert qkey == model_key(quantized(model, cal, p.plan).mod)
    with tuning_db.open(url) as db:
        rows = db.plans(model_key(model.mod))
        assert rows and all(r.info["pipeline"] == "plan" and r.info["layout_plan"] == layout.to_dict()
                            for r in rows)
        stored = [p for p in result.front if "int8" in p.plan.values()]
        assert stored
        for p in stored:
            qmodel = quantized(model, cal, p.plan)
            rec = db.layout_plan(model_key(qmodel.mod), result.target)
            assert rec is not None and rec.chosen and LayoutPlan.from_json(rec.plan) == result.quantized[
                plan_key(p.plan)][1]
            built = compile_model(qmodel, db, threads=1, pipeline="auto")
            assert built.pipeline == "plan"
            prepared = choose_pipeline("auto", qmodel, db, "llvm", 1).prepared
            qconvs = [n for n in post_order(prepared.module["main"].body) if isinstance(n, Call)
                      and isinstance(n.op, Function) for m in post_order(n.op.body)
                      if op_name(m) == "qnn.conv2d" and m.attrs["data_layout"] != "NCHW"]
            assert len(qconvs) == sum(p.plan[n] == "int8" for n in layers)
            got = [np.asarray(built.exe(b["x"]), np.float64) for b in valid.batches]
            want = _reference_outputs(qmodel, valid.batches)
            assert relative_error(got, want) < 1e-4


def test_top1_with_labels_and_a_tight_bound(tmp_path) -> None:
    """Labels that the fp32 model gets all right: fp32 top-1 is 1.0 and a zero bound picks a plan
    that loses nothing."""
    model = tiny_convnet()
    valid = random_batches(model, 5, seed=2)
    fp32 = _reference_outputs(model, valid.batches)
    valid = DataSet(valid.batches, np.array([int(o.argmax()) for o in fp32]), "labelled")
    result = search_precisions(model, random_batches(model, 3), valid, max_drop=0.0, threads=1, trials=2,
                               rounds=3, min_seconds=0.002)
    assert result.metric == "top1" and result.fp32_accuracy == 1.0
    assert result.chosen is not None and result.chosen.drop <= 0.0
    assert all(p.drop == pytest.approx(1.0 - p.accuracy) for p in result.points)
    assert result.stored == []  # no log given: nothing stored


def test_pareto_front_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    pts = [PlanPoint({"a": "int8" if i % 2 else "fp32", "b": str(i)}, float(lat), (lat, lat), float(base),
                     0.0, float(d), "search")
           for i, (lat, base, d) in enumerate(rng.integers(1, 6, (40, 3)))]
    front = pareto_front(pts)
    for p in pts:  # latency counts against fp32 in the point's own rounds
        ratio = p.latency_ms / p.fp32_latency_ms
        beaten = any(q.latency_ms / q.fp32_latency_ms <= ratio and q.drop <= p.drop and
                     (q.latency_ms / q.fp32_latency_ms < ratio or q.drop < p.drop) for q in pts)
        assert (p in front) == (not beaten)
    assert [p.relative for p in front] == sorted(p.relative for p in front)
    # a plan whose own median is lower but which ran slower than fp32 beside it loses to fp32
    fp32 = PlanPoint({"a": "fp32"}, 1.0, (1.0, 1.0), 1.0, 0.0, 0.0, "seed")
    slower = PlanPoint({"a": "int8"}, 0.9, (0.9, 0.9), 0.8, 0.0, 0.01, "seed")
    assert pareto_front([slower, fp32]) == [fp32]


def test_bad_arguments() -> None:
    model = tiny_convnet()
    data = random_batches(model, 1)
    with pytest.raises(ValueError, match="max_drop must be a finite number >= 0"):
        search_precisions(model, data, data, max_drop=-0.1)
    with pytest.raises(ValueError, match="trials must be >= 1"):
        search_precisions(model, data, data, max_drop=0.1, trials=0)
    classes = _reference_outputs(model, data.batches)[0].shape[1]
    labelled = DataSet(data.batches, np.full(data.batches[0]["x"].shape[0], classes), "labelled")
    with pytest.raises(ValueError, match=f"labels.npy holds class {classes}, but the model's output has "
                                         f"{classes} classes"):
        search_precisions(model, data, labelled, max_drop=0.1)


def test_bf16_is_a_searched_precision_where_a_layer_has_a_kernel() -> None:
    """With bf16 offered, the all-bf16 seed is measured; each point's drop is re-derived from a
    fresh build of its plan; a plan naming bf16 builds and runs bf16 kernels."""
    model = tiny_convnet()
    calib, valid = random_batches(model, 3, seed=0), random_batches(model, 4, seed=1)
    result = search_precisions(model, calib, valid, max_drop=0.5, threads=1, trials=6, rounds=2,
                               min_seconds=0.001, precisions=("int8", "bf16", "fp32"), store=False)
    bf16_points = [p for p in result.points if "bf16" in p.plan.values()]
    assert bf16_points and any(set(p.plan.values()) == {"bf16"} for p in bf16_points)
    point = bf16_points[0]
    assert "bf16:" in point.summary()
    q = quantized(model, calibrate(model.mod, model.params, calib.batches, progress=False), point.plan)
    exe = autorelay.build(q.mod, params=q.params, threads=1)
    assert any("bf16" in r.detail for r in exe.report.rows) and not exe.report.fallbacks
    fp32 = autorelay.build(model.mod, params=model.params, threads=1)  # the search's baseline
    ref = [np.asarray(fp32(b["x"]), np.float64) for b in valid.batches]
    got = [np.asarray(exe(b["x"]), np.float64) for b in valid.batches]
    assert relative_error(got, ref) == pytest.approx(point.drop, rel=1e-5, abs=1e-9)
    with pytest.raises(ValueError, match="precisions"):
        search_precisions(model, calib, valid, max_drop=0.1, precisions=("int8",))


@pytest.mark.parametrize("n", [1, 2, 3, 9, 53])
def test_prefix_seeds_cover_the_range_early(n: int) -> None:
    """Every prefix length 1..n-1 once; the first few already span it (a small budget is not spent
    on n-1, n-2, ... only)."""
    ks = spread_prefixes(n)
    assert sorted(ks) == list(range(1, n))
    if n >= 9:
        first = ks[:3]
        assert min(first) <= n // 4 + 1 and max(first) >= 3 * n // 4 - 1
