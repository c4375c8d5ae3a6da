"""The re-layouts a plan tune weighs: tuned kernels of the log, read back by the layout program and
by the builds that run them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import autorelay
import tuning_db
from autorelay.codegen import resolve_target
from autorelay.ir.expr import Call
from autorelay.ir.visitor import post_order
from autorelay.lower import workload_key
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from autorelay.transform.util import op_name
from search import layout_costs, relayout_kernels
from search.extract import primitive_calls
from search.layout_costs import candidate_blocks, layout_graph, relayouts
from search.measure import Measurer, TimingSettings
from search.models import load_model
from search.pipeline_choice import prepare_plan
from search.relayout_kernels import transform_key, transform_module, transform_task
from search.transform_tuning import (
    MAX_TRANSFORM_TRIALS,
    MIN_TRANSFORM_TRIALS,
    TRANSFORM_SHARE,
    logged_transform_trials,
    transform_tasks,
    trials_per_transform,
    tune_transforms,
)
from search.tune import logged_trials, tune_task
from search.tuners.base import RandomTuner

pytestmark = pytest.mark.cpu

FAST = TimingSettings(number=1, repeat=2, min_repeat_ms=0.0, warmup=0, timeout=30.0)


def _uniform_costs(model, blocks) -> dict:
    """Every conv layer convertible to every block, at one cost: the graph's edges do not depend on it."""
    return {n: layout_costs.LayerCost({0: 1.0, **{b: 1.0 for b in blocks}}) for n in conv_layers(model.mod)}


def _graph_edges(model, blocks, tgt, monkeypatch) -> set:
    """The re-layouts `layout_graph` asks the timer for (the oracle of `relayouts`)."""
    asked: set = set()

    def record(shape, src, dst, target, **kwargs):
        if src != dst:
            asked.add((tuple(shape), src, dst))
        return 1.0

    monkeypatch.setattr(layout_costs, "transform_seconds", record)
    layout_graph(model, _uniform_costs(model, blocks), blocks, tgt)
    return asked


@pytest.mark.parametrize("name", ["nature-dqn", "resnet-18"])
def test_relayouts_are_the_edges_the_layout_graph_weighs(name, monkeypatch):
    model = load_model(name, image_size=32) if name == "resnet-18" else load_model(name)
    tgt = resolve_target("llvm", 1)
    blocks = candidate_blocks(tgt)
    found = relayouts(model, blocks)
    assert len(found) == len(set(found)) and all(src != dst for _, src, dst in found)
    assert set(found) == _graph_edges(model, blocks, tgt, monkeypatch)


@pytest.mark.parametrize("cpu", ["znver3", "znver5"])  # 8 and 16 float lanes: blocks of 8 and 16
def test_a_plan_build_runs_the_relayout_kernels_tuned_for_it(cpu):
    """The workload a plan's build runs between two layers in different layouts is a re-layout task
    (so the build looks up what the tune logged for it)."""
    model = load_model("nature-dqn")
    tgt = resolve_target(f"llvm -mcpu={cpu}", 1)
    blocks = candidate_blocks(tgt)
    layers = conv_layers(model.mod)
    plan = LayoutPlan({name: (0, *blocks)[i % (len(blocks) + 1)] for i, name in enumerate(layers)})
    built = prepare_plan(model, str(tgt), 1, plan)
    ran = {workload_key(fn) for fn in primitive_calls(built.module)
           if [op_name(c) for c in post_order(fn.body) if isinstance(c, Call)] == ["layout_transform"]}
    tasks = {t.key for t in transform_tasks(model, tgt).values()}
    assert ran and ran <= tasks


def test_a_share_below_the_minimum_each_tunes_no_relayout():
    """The share is spread evenly, capped per re-layout, and spent on the kernels instead where it
    would give each fewer than `MIN_TRANSFORM_TRIALS`."""
    def share(trials: int) -> int:
        return int(trials * TRANSFORM_SHARE)

    n = 32
    below = (MIN_TRANSFORM_TRIALS * n) // TRANSFORM_SHARE - 1  # one trial short of the minimum each
    assert share(int(below)) // n == MIN_TRANSFORM_TRIALS - 1 and trials_per_transform(int(below), n) == 0
    at = math.ceil(MIN_TRANSFORM_TRIALS * n / TRANSFORM_SHARE)
    assert trials_per_transform(at, n) == MIN_TRANSFORM_TRIALS
    assert trials_per_transform(100 * at, n) == MAX_TRANSFORM_TRIALS


def test_relayouts_are_tuned_into_the_log_and_read_back_without_timing(tmp_path, monkeypatch):
    model = load_model("nature-dqn")
    tgt = resolve_target("llvm", 1)
    tasks = transform_tasks(model, tgt)
    trials = math.ceil(2 * len(tasks) / TRANSFORM_SHARE)  # two each, whatever blocks the host offers
    each = trials_per_transform(trials, len(tasks))
    assert each == 2 <= MAX_TRANSFORM_TRIALS and each * len(tasks) <= trials * TRANSFORM_SHARE
    url = f"sqlite:///{tmp_path / 't.db'}"
    measurer = Measurer(settings=FAST)
    try:
        with tuning_db.open(url) as db:
            got = tune_transforms(model, tasks, db, measurer, trials)
            assert got.new == got.trials == each * len(tasks)
            assert set(got.seconds) == set(tasks) and all(s > 0 for s in got.seconds.values())
            for edge, task in tasks.items():
                assert logged_trials(db, task) == each
                assert model.transforms[transform_key(*edge, tgt)] == got.seconds[edge]
                pick = db.pick(task.key, str(tgt))  # the re-measured pick is what a build compiles
                assert pick is not None and pick.config["template"] == "injective"
            assert logged_transform_trials(tasks, db) == got.trials
    finally:
        measurer.close()

    # a rerun measures nothing: the log's picks give the same seconds
    class Refuse:
        builder = type("B", (), {"pool": None})()

        def measure(self, *a, **k):
            raise AssertionError("a re-layout the log has picked must not be measured again")

        remeasure = measure

    again = load_model("nature-dqn")
    with tuning_db.open(url) as db:
        second = tune_transforms(again, transform_tasks(again, tgt), db, Refuse(), trials)
    assert second.new == 0 and second.trials == got.trials and second.seconds == got.seconds
    # the layout program reads them: no re-layout of the graph is timed afresh
    monkeypatch.setattr(relayout_kernels, "time_candidate", lambda *a, **k: pytest.fail("timed afresh"))
    blocks = candidate_blocks(tgt)
    graph = layout_graph(again, _uniform_costs(again, blocks), blocks, tgt)
    weighed = {v for n in graph.nodes for t in n.transform for v in t.values() if v > 0}
    assert weighed == set(got.seconds.values())


def test_the_logged_relayout_pick_builds_a_correct_kernel(tmp_path):
    """What the log picked compiles into the re-layout (NumPy's reshape and transpose as the oracle)
    and the build says it came from the log."""
    tgt = resolve_target("llvm", 1)
    shape = (1, 24, 14, 14)
    edge = (shape, 8, 0)
    task = transform_task(edge, tgt)
    assert task is not None and task.template == "injective" and len(task.space) > 1
    measurer = Measurer(settings=FAST)
    try:
        with tuning_db.open(f"sqlite:///{tmp_path / 't.db'}") as db:
            tune_task(task, RandomTuner(task, 0), 4, db, measurer, transfer=False)
            exe = autorelay.build(transform_module(*edge), target=tgt, schedules=db.schedule_source(str(tgt)))
    finally:
        measurer.close()
    x = np.random.default_rng(0).standard_normal((1, 3, 14, 14, 8)).astype("float32")
    want = x.transpose(0, 1, 4, 2, 3).reshape(shape)
    np.testing.assert_array_equal(exe(x), want)
    assert [r.source for r in exe.report.rows] == ["tuned"]


def test_a_relayout_config_serves_its_own_workload_only(tmp_path):
    """An injective config is never transferred to a neighbouring shape (its vector split follows
    its extents), while the lookup of its own workload finds it."""
    tgt = resolve_target("llvm", 1)
    tuned, other = transform_task(((1, 24, 14, 14), 8, 0), tgt), transform_task(((1, 24, 28, 28), 8, 0), tgt)
    with tuning_db.open(f"sqlite:///{tmp_path / 't.db'}") as db:
        db.register_workload(tuned.key, tuned.workload)
        db.register_workload(other.key, other.workload)
        cfg = tuned.config(len(tuned.space) - 1)
        db.record(tuned.key, str(tgt), cfg.to_json(), [1e-5], workload=tuned.workload)
        source = db.schedule_source(str(tgt))
        assert source.lookup(tuned.key).kind == "exact"
        assert tuning_db.shape_distance(tuned.workload, other.workload) is not None  # a neighbour ...
        assert source.lookup(other.key).kind == "default"  # ... that does not take it
