"""The layout plan in the tuning log: a stored plan is rebuilt exactly (the blocks it names are the
blocks of the built graph, its kernels are the build's kernels); a stale one falls back to the
per-model pipeline and says so; the search stores the fastest of its plan and the per-model
pipelines; `tune --pipeline plan` runs it after tuning."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import autorelay
import tuning_db
from autorelay.codegen import resolve_target
from autorelay.ir.expr import Call, Function
from autorelay.ir.visitor import post_order
from autorelay.lower import model_key, workload_key
from autorelay.transform.convert_layout import channel_block
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers, plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes, pipeline_layout
from autorelay.transform.prepare import prepare
from autorelay.transform.quantize.layers import layer_calls
from search import model_tuning, tune_model
from search.cli import main
from search.fusion_choice import fusion_variants, prologue_edges, without_halos
from search.layout_costs import candidate_blocks
from search.layout_dp import assign, breakdown, plan_cost
from search.layout_search import plan_tasks, search_layout
from search.measure import TimingSettings
from search.models import compile_model, load_model, prepare_model, run_inputs, tuning_target
from search.pipeline_choice import PLAN, candidates, prepare_plan
from search.plan_screen import screen_plan_tasks
from search.scheduler import TaskScheduler
from search.transform_tuning import transform_tasks

pytestmark = pytest.mark.cpu

FAST = TimingSettings(number=1, repeat=2, min_repeat_ms=2.0, warmup=1, timeout=10.0)


@pytest.fixture(scope="module")
def model():
    return load_model("resnet-18", image_size=32)


def _layout_transforms(mod) -> int:
    """The `layout_transform` calls a prepared module runs (in @main and in its fused functions)."""
    seen: set[int] = set()

    def walk(body) -> None:
        for x in post_order(body):
            if isinstance(x, Call) and id(x) not in seen:
                seen.add(id(x))
                if isinstance(x.op, Function):
                    walk(x.op.body)
                elif getattr(x.op, "name", "") == "layout_transform":
                    seen.add(-id(x))
    walk(mod["main"].body)
    return sum(1 for k in seen if k < 0)


def test_the_programs_transforms_are_the_ones_the_plan_build_runs(model, monkeypatch):
    """With every transform costing one second, the program's transform seconds for a plan are the
    number of `layout_transform`s the plan's build runs: a value two consumers read in one layout
    (a residual block's input, for its first conv and its join) is transformed once, and charged once."""
    import search.layout_costs as layout_costs

    monkeypatch.setattr(layout_costs, "transform_seconds", lambda *a, **k: 1.0)
    layers = conv_layers(model.mod)
    costs = {n: layout_costs.LayerCost(kernel={0: 1.0, 8: 1.0, 16: 1.0}) for n in layers}
    graph = layout_costs.layout_graph(model, costs, (8, 16), autorelay.codegen.resolve_target("llvm", 1))
    rng = random.Random(0)
    for _ in range(6):
        blocks = {n: rng.choice([0, 8, 16]) for n in layers}
        charged = sum(t for _, t in breakdown(graph, assign(graph, blocks)))
        assert charged == _layout_transforms(prepare_plan(model, "llvm", 1, LayoutPlan(blocks)).module)


def _store(db, model, plan: LayoutPlan, chosen: bool = True, winner: str = PLAN) -> int:
    return db.store_layout_plan(model_key(model.mod), tuning_target("llvm", 1), plan.to_dict(),
                                latency_ms=1.0, model=model.name, chosen=chosen, info={"winner": winner})


def _kernel_keys(fused) -> Counter:
    return Counter(workload_key(n.op) for n in post_order(fused["main"].body)
                   if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive)


def _reference(model) -> np.ndarray:
    mod = model.mod
    args = [model.inputs[p.name_hint] if p.name_hint in model.inputs else model.params[p.name_hint]
            for p in mod["main"].params]
    return np.asarray(autorelay.evaluate(mod, *args))


@pytest.mark.parametrize("halos", [True, False])
def test_stored_plan_is_rebuilt_exactly(tmp_path, model, halos):
    layers = conv_layers(model.mod)
    rng = random.Random(3)
    plan = LayoutPlan({name: rng.choice([0, 8, 16]) for name in layers},
                      {name: rng.choice([0, 2, 4]) for name in layers})  # Winograd in any layout
    edges = sorted(prologue_edges(model, plan)[0])  # and with some of its prologues fused
    assert edges
    fusion = FusionPlan.prologues().without_edges(rng.sample(edges, len(edges) // 2))
    plan = replace(plan, fusion=replace(fusion, halos=halos))  # zero-bordered values or not
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with tuning_db.open(url) as db:
        _store(db, model, plan)
        res = compile_model(model, db, "llvm", threads=1, pipeline="plan")
        db.start_run(model=model.name, info={"target": tuning_target("llvm", 1), "pipeline": PLAN,
                                             "model_key": model_key(model.mod)})
        auto = compile_model(model, db, "llvm", threads=1, pipeline="auto")
        lib = autorelay.build(model.mod, "llvm", params=model.params, threads=1,
                              schedules=db.schedule_source("llvm"))
    assert res.pipeline == auto.pipeline == PLAN and res.note == ""
    # the blocks of the graph the plan asks for (independently prepared) are the plan's
    fused = prepare(model.mod, model.params, plan_pipeline(plan))
    graph = prepare(model.mod, model.params, Pipeline(graph_passes()))
    calls = layer_calls(graph)
    got = built_layers(graph, fused)
    for name in layers:
        in_c = calls[name].args[0].checked_type.shape[1]
        assert got[name][0] == channel_block(in_c, plan.block(name)), name
    # ... and compile built exactly those kernels (as did auto, and autorelay.build from the log)
    want = _kernel_keys(fused)
    for exe in (res.exe, auto.exe, lib):
        assert Counter(r.workload_key for r in exe.report.rows if r.kind in ("kernel", "fallback")) == want
        assert ("padded" in {s.kind for s in exe.plan.slots}) == halos
    args = run_inputs(res.exe, model)
    out = np.asarray(res.exe(*args))
    default = np.asarray(autorelay.build(model.mod, params=model.params, threads=1)(*args))
    ref = _reference(model)
    scale = max(float(np.abs(ref).max()), 1e-3)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(out, default, rtol=1e-4, atol=1e-4 * scale)


def test_stale_plan_falls_back_and_says_so(tmp_path, model, capsys):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with tuning_db.open(url) as db:
        _store(db, model, LayoutPlan({"conv2d_0": 8, "conv2d_99": 16}))
        res = compile_model(model, db, "llvm", threads=1, pipeline="plan")
        db.start_run(model=model.name, info={"target": tuning_target("llvm", 1), "pipeline": PLAN,
                                             "model_key": model_key(model.mod)})
        with pytest.warns(UserWarning, match="stale"):
            lib = autorelay.build(model.mod, "llvm", params=model.params, threads=1,
                                  schedules=db.schedule_source("llvm"))
    assert "stale layout plan" in res.note and "conv2d_99" in res.note and "fell back" in res.note
    assert res.pipeline in candidates("llvm", 1)
    assert lib.pipeline == "default"
    code = main(["compile", "--db", url, "--model", "resnet-18", "--image-size", "32", "--threads", "1",
                 "--pipeline", "plan"])
    err = capsys.readouterr().err
    assert code == 0 and "warning: stale layout plan" in err and "conv2d_99" in err


def test_no_plan_and_a_lost_plan_use_the_per_model_pipeline(tmp_path, model):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with tuning_db.open(url) as db:
        none = compile_model(model, db, "llvm", threads=1, pipeline="plan")
        _store(db, model, LayoutPlan({"conv2d_0": 8}), chosen=False, winner="nchwc")
        lost = compile_model(model, db, "llvm", threads=1, pipeline="plan")
    assert "no layout plan" in none.note and none.pipeline in candidates("llvm", 1)
    assert lost.pipeline == "nchwc" and lost.note == ""
    other = f"sqlite:///{tmp_path / 'other.db'}"  # tuned with a per-model pipeline: no plan, that one
    with tuning_db.open(other) as db:
        db.start_run(model=model.name, info={"target": tuning_target("llvm", 1), "pipeline": "nchwc-direct",
                                             "model_key": model_key(model.mod)})
        logged = compile_model(model, db, "llvm", threads=1, pipeline="plan")
    assert logged.pipeline == "nchwc-direct"
    assert "no layout plan" in logged.note and "the log tuned it with, nchwc-direct" in logged.note


def test_search_stores_the_fastest_and_the_plan_is_optimal_under_its_model(tmp_path, model, capsys):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with tuning_db.open(url) as db:
        r = search_layout(model, db, "llvm", 1, repeat=3, rounds=3)
        rec = db.layout_plan(model_key(model.mod), tuning_target("llvm", 1))
        res = compile_model(model, db, "llvm", threads=1, pipeline="plan")
    variants = {PLAN, *fusion_variants(r.prologue_edges, r.shared_producers)}
    assert r.prologue_edges and set(r.latencies) == {*variants, *candidates("llvm", 1)}
    first = min(variants, key=r.latencies.__getitem__)  # the best fusion in the first timing
    best_model = min(candidates("llvm", 1), key=r.latencies.__getitem__)
    # the finalists timed again decide: that fusion, the same without halos, the best pipeline
    assert set(r.confirmed) == {first, without_halos(first), best_model}
    assert r.solution.exact and r.fusion == min((first, without_halos(first)), key=r.confirmed.__getitem__)
    assert r.winner == (PLAN if r.confirmed[r.fusion] <= r.confirmed[best_model] else best_model)
    assert (r.plan.fusion is None) == (r.fusion == PLAN)
    assert r.plan.fusion is None or r.plan.fusion.halos == (r.fusion == first)
    assert r.plan_latency == r.confirmed[r.fusion]
    assert rec is not None and rec.id == r.record_id and rec.plan == r.plan.to_dict()
    assert rec.chosen == (r.winner == PLAN) and rec.winner == r.winner
    assert res.pipeline == r.winner
    assert r.max_abs_diff < 1e-3 and r.output_scale > 0 and "computes wrongly" not in r.table()
    assert "computes wrongly" in replace(r, max_abs_diff=r.output_scale).table()
    # no per-model pick, no uniform assignment beats the program's answer under its own cost model
    graph = r.graph
    names = [graph.nodes[k].name for k in graph.convs()]
    costs = {row.layer: row for row in r.rows}
    for p in candidates("llvm", 1):
        assert r.solution.cost <= r.modeled[p] + 1e-12
    for b in (0, 8, 16):
        layouts = {n: b if b in costs[n].kernel_s else 0 for n in names}
        assert r.solution.cost <= plan_cost(graph, assign(graph, layouts)) + 1e-12
    # `default` is all NCHW, each layer in the form it builds: at least the fastest NCHW form's cost
    assert plan_cost(graph, assign(graph, {})) <= r.modeled["default"] + 1e-12
    assert main(["db", "plan", "--db", url, "--model", model.name]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("conv2d_") for line in out.splitlines()) == len(names)
    assert "fusion" in out and all(f"{a}->{c}" in out for a, c in r.prologue_edges)
    halos = r.plan.fusion is None or r.plan.fusion.halos
    assert ("no zero-bordered values" in out) == (not halos), out
    decided = next(line for line in out.splitlines() if line.startswith("layout plan #"))
    decided = decided.split("the finalists again (this timing decided): ")[1]
    assert all(f"{name} " in decided for name in r.confirmed), decided


def test_a_left_out_block_is_neither_in_the_plan_nor_in_a_per_model_build(tmp_path, capsys):
    """Blocks of 8 (the only block on an AVX2 host) left out: the layout program and the per-model
    pipelines run without them, and the report and the log say so."""
    model = load_model("nature-dqn")
    url = f"sqlite:///{tmp_path / 'log.db'}"
    block = candidate_blocks(resolve_target("llvm", 1))[0]
    with tuning_db.open(url) as db:
        r = search_layout(model, db, "llvm", 1, repeat=2, rounds=2, leave_out=frozenset({block}))
    kept = {p for p in candidates("llvm", 1) if pipeline_layout(p)[0] != block}
    assert kept and {p for p in r.latencies if p in candidates("llvm", 1)} == kept
    assert set(r.modeled) == {PLAN, *kept}
    assert block not in r.plan.blocks.values() and all(block not in row.kernel_s for row in r.rows)
    assert r.left_out == (block,) and f"left out: blocks of {block} " in r.table()
    assert main(["db", "plan", "--db", url, "--model", model.name]) == 0
    assert f"not searched: blocks of {block} " in capsys.readouterr().out
    with pytest.raises(ValueError, match="NCHW"):
        search_layout(model, None, "llvm", 1, leave_out=frozenset({0}))


def test_tune_with_pipeline_plan_tunes_or_screens_every_layout_and_stores_a_plan(tmp_path, monkeypatch):
    """Also: a deferred form skips the warm-up. The screening is timed, so which forms it defers
    varies; the heaviest task, which the warm-up would take first, is deferred by hand (every form
    of its layers kept), and the budget's one round must go to another task."""
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    model = load_model("nature-dqn")
    _, every, _ = plan_tasks(model, "llvm", 1)
    heaviest: list[str] = []

    def screen_and_defer(*args, **kwargs):
        screen = screen_plan_tasks(*args, **kwargs)
        first = max(every.tasks, key=lambda t: t.total_flops)  # a conv: a form of its layers' group
        siblings = [k for k, g in screen.groups.items() if g == screen.groups[first.key]]
        assert len(siblings) > 1
        for key in siblings:
            screen.pruned.pop(key, None)
        screen.deferred = {first.key: 1.3}
        heaviest.append(first.key)
        return screen

    monkeypatch.setattr(model_tuning, "screen_plan_tasks", screen_and_defer)
    monkeypatch.setattr(model_tuning, "PLAN_RESERVE", 0.0)  # the chosen build's own round: test below
    result = tune_model(model, trials=4, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                        batch=4, pipeline="plan", compare=False)
    forms = {t.key for t in every.tasks if t.template.startswith("conv2d")}
    tuned = {r.task.key for r in result.rows}
    screened = {s.key for s in result.skipped if "screening prunes" in s.reason}
    assert forms <= tuned | screened and not tuned & screened
    (deferred,) = [r for r in result.rows if r.task.key == heaviest[0]]
    assert deferred.new_trials == 0 and sum(r.new_trials for r in result.rows) == 4
    assert result.deferred[deferred.task.name] == 1.3 and "deferred and never tuned" in result.table()
    # any other deferred task never reached is a kernel the default plan does not run
    assert all(math.isnan(r) for n, r in result.deferred.items() if n != deferred.task.name)
    assert {r.task.template for r in result.rows} & {"conv2d_nchwc", "conv2d_nchw", "conv2d_winograd"}
    assert result.layout is not None and "layout search" in result.table()
    with tuning_db.open(url) as db:
        (run,) = db.runs()
        assert run.info["pipeline"] == PLAN and run.info["tasks"] == len(result.rows)
        relayouts = transform_tasks(model, resolve_target("llvm", 1)).values()  # tuned before the screening
        rows = [r for t in relayouts for r in db.history(t.key, str(t.target))]
        assert rows and {r.run for r in rows} == {run.id}
        rec = db.layout_plan(model_key(model.mod), tuning_target("llvm", 1))
        assert rec is not None and rec.winner == result.layout.winner
        res = compile_model(model, db, "llvm", threads=1, pipeline="auto")
    assert res.pipeline == result.layout.winner and res.note == ""

    # run again on the spent budget: the log's plan is the build, neither screened nor searched again
    def refuse(*args, **kwargs):
        raise AssertionError("a finished plan tune must not screen or search again")

    monkeypatch.setattr(model_tuning, "screen_plan_tasks", refuse)
    monkeypatch.setattr(model_tuning, "search_layout", refuse)
    again = tune_model(model, trials=4, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                       batch=4, pipeline="plan", compare=False)
    assert again.layout is None and sum(r.new_trials for r in again.rows) == 0
    assert sum(r.trials for r in again.rows) + again.other_forms == 4  # every form's trials counted
    assert f"#{rec.id}" in again.pipeline
    chosen = (prepare_plan(model, "llvm", 1, LayoutPlan.from_json(rec.plan)) if rec.chosen
              else prepare_model(model, "llvm", threads=1, pipeline=rec.winner))
    built = {t.key for t in chosen.extraction.tasks}
    assert {r.task.key for r in again.rows} == built  # the chosen build's kernels, settled from the log
    with tuning_db.open(url) as db:
        assert len(db.layout_plans()) == 1 and [r.info["pipeline"] for r in db.runs()] == [PLAN, PLAN]


class _Rounds:
    """A stand-in for a model tune's state: each round lowers the task's best cost."""

    def __init__(self, tasks: list) -> None:
        self.tasks, self.new, self.rounds, self.settled = tasks, [0] * len(tasks), [], []
        self.progress = model_tuning.Progress()

    def one_round(self, i: int, n: int) -> tuple[int, float]:
        self.rounds.append(i)
        self.new[i] += n
        return n, 1e-3 / (1 + self.new[i])

    def settle(self, i: int) -> None:
        self.settled.append(i)

    def add(self, tasks: list) -> list[int]:
        self.tasks.extend(tasks)
        self.new.extend(0 for _ in tasks)
        return list(range(len(self.tasks) - len(tasks), len(self.tasks)))


def _task(key: str, template: str = "t") -> SimpleNamespace:
    return SimpleNamespace(key=key, template=template, count=1)


def test_the_reserve_tunes_the_chosen_builds_kernels_never_tuned_first():
    """After the layout search, the rest of the budget goes to the chosen build's kernels only,
    each from its progress so far: the chosen form the first scheduler never reached warms up
    first, a kernel the build does not run gets nothing, a chosen kernel no task covered (a fusion
    variant's) becomes a task and is tuned too, and every task that gained trials has its pick
    re-measured."""
    tasks = [_task(k) for k in ("tuned", "never", "unused")]
    sched = TaskScheduler([1, 1, 1], 0, 16)
    for i in (0, 2):
        sched.tasks[i].trials.append(16)
        sched.tasks[i].best.append(2e-3)
    st = _Rounds(list(tasks))
    model_tuning._tune_chosen(st, sched, [_task("tuned"), _task("never")], 48, 16, seed=0)
    assert st.rounds[0] == 1 and 2 not in st.rounds and sum(st.new) == 48
    assert sorted(st.settled) == sorted(set(st.rounds))
    st = _Rounds(list(tasks))
    model_tuning._tune_chosen(st, sched, [_task("tuned"), _task("never"), _task("copied")], 64, 16, seed=0)
    assert [t.key for t in st.tasks] == ["tuned", "never", "unused", "copied"]
    assert {1, 3} <= set(st.rounds[:2]) and 2 not in st.rounds and st.new[3] > 0 and 3 in st.settled
    st = _Rounds(list(tasks))
    model_tuning._tune_chosen(st, sched, [_task("tuned"), _task("never")], 0, 16, seed=0)
    assert not st.rounds and not st.settled
