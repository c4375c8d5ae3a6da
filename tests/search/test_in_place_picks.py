"""Confirming the log's picks in place: a tuned kernel that runs slower in the model than its
default or a runner-up of its alone re-measurement gives way to it in the log, one that runs
fastest stays, and a rerun's reuse of its alone re-measurement leaves that verdict standing."""

from __future__ import annotations

import math
import shutil

import pytest

import search.in_place as in_place
import tuning_db
from search.in_place import PinnedSource, confirm_in_place, describe_checks
from search.measure.result import MeasureResult
from search.models import build_model, load_model, max_difference, prepare_model, run_inputs, schedule_source
from search.tune import _logged_pick
from search.tuners import make_tuner

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """ResNet-18 (32 px, blocks of 8, one thread) whose log picks a non-default config for two
    convolutions, each having beaten a runner-up and its default alone; the tuned and the default
    builds, and the runner-ups."""
    model = load_model("resnet-18", image_size=32)
    prep = prepare_model(model, "llvm", threads=1, pipeline="nchwc-direct")
    convs = [t for t in prep.extraction.tasks if t.template == "conv2d_nchwc" and len(t.space) > 1]
    path = tmp_path_factory.mktemp("log") / "log.sqlite"
    db = tuning_db.open(path)
    picked, runners_up = {}, {}
    for task in convs[:2]:
        config, second = [c for c in map(task.config, range(len(task.space))) if c != task.default][:2]
        alone = tuning_db.INTERLEAVED
        for cfg, cost, tag in ((config, 1.0e-4, None), (second, 1.2e-4, None), (config, 1.0e-4, alone),
                               (second, 1.5e-4, alone), (task.default, 2.0e-4, alone)):
            db.record(task.key, str(task.target), cfg.to_json(), [cost] * 3, workload=task.workload,
                      runner_version=tag, recorded_at=100.0 if tag else 50.0)
        picked[task.key], runners_up[task.key] = (task, config), second
    tuned = build_model(model, schedule_source(db, model, prepared=prep), prepared=prep)
    default = build_model(model, None, prepared=prep)
    db.close()
    assert {r.workload_key for r in tuned.report.rows if r.source == "tuned"} == set(picked)
    return model, prep, path, picked, tuned, default, runners_up


@pytest.fixture
def setup(built, tmp_path):
    """`built`, with a copy of its log of its own."""
    model, prep, path, picked, tuned, default, runners_up = built
    mine = tmp_path / "log.sqlite"
    shutil.copyfile(path, mine)
    with tuning_db.open(mine) as db:
        yield model, prep, db, picked, tuned, default, runners_up


def test_the_slower_in_place_gives_way_to_its_default(setup, monkeypatch):
    model, prep, db, picked, tuned, default, _ = setup
    (fast, (task_f, cfg_f)), (slow, (task_s, cfg_s)) = picked.items()

    def stand_in(builds, rounds):  # the tuned build's kernels: one faster, one slower than the default's
        assert [b[0] for b in builds] == [tuned, default]
        mine, theirs = {fast: 1e-4, slow: 3e-4}, {fast: 2e-4, slow: 2e-4}
        return [{k: [t] * rounds for k, t in times.items()} for times in (mine, theirs)]

    monkeypatch.setattr(in_place, "profile_key_rounds", stand_in)
    checks = confirm_in_place(db, prep.extraction.tasks, tuned, default, run_inputs(tuned, model), rounds=3)
    assert [(c.key, c.kept) for c in checks] == [(fast, True), (slow, False)]
    assert "the default replaces" in describe_checks(checks)
    target = str(task_f.target)
    assert db.pick(fast, target).config == cfg_f.to_json()
    assert db.pick(slow, target).config == task_s.default.to_json()
    assert db.pick(slow, target).runner_version == tuning_db.IN_PLACE
    # compile builds the verdict, and the build still computes the model
    rebuilt = build_model(model, schedule_source(db, model, prepared=prep), prepared=prep)
    args = run_inputs(rebuilt, model)
    assert max_difference(rebuilt(*args), default(*args)) < 1e-4
    # a rerun with nothing new reuses its alone re-measurement, which in-place rows do not outdate
    tuner = make_tuner("random", task_s, 0)
    tuner.update([task_s.index(cfg_s)], [MeasureResult((1e-4,))])
    reused = _logged_pick(db, task_s, tuner, 3)
    assert reused is not None and reused[0] == cfg_s
    assert db.pick(slow, target).config == task_s.default.to_json()


def _pinned_builder(db, model, prep, calls):
    """A `build_pinned` over the log's schedules that records the pins it was asked for."""
    def build_pinned(pins):
        calls.append(dict(pins))
        source = PinnedSource(schedule_source(db, model, prepared=prep), pins)
        return build_model(model, source, prepared=prep)
    return build_pinned


def test_a_runner_up_faster_in_place_replaces_the_pick(setup, monkeypatch):
    model, prep, db, picked, tuned, default, runners_up = setup
    (lost, (task_l, _)), (held, (_, cfg_h)) = picked.items()
    calls, profiled = [], []

    def stand_in(builds, rounds):  # one pick loses to its runner-up in place, the other holds
        profiled.extend(b[0] for b in builds)
        times = [{lost: 3e-4, held: 1e-4}, {lost: 2e-4, held: 2e-4}, {lost: 1e-4, held: 3e-4}]
        return [{k: [t] * rounds for k, t in each.items()} for each in times]

    monkeypatch.setattr(in_place, "profile_key_rounds", stand_in)
    checks = confirm_in_place(db, prep.extraction.tasks, tuned, default, run_inputs(tuned, model), rounds=3,
                              build_pinned=_pinned_builder(db, model, prep, calls))
    assert calls == [runners_up]  # one runner-up each: one runner-up build, pinning both
    assert profiled[:2] == [tuned, default] and len(profiled) == 3
    pinned_rows = {r.workload_key: r for r in profiled[2].report.rows if r.workload_key in picked}
    assert {k: r.source for k, r in pinned_rows.items()} == {lost: "tuned", held: "tuned"}
    assert [(c.key, c.winner) for c in checks] == [(lost, "runner-up"), (held, "tuned")]
    assert "the runner-up replaces" in describe_checks(checks)
    target = str(task_l.target)
    assert db.pick(lost, target).config == runners_up[lost].to_json()
    assert db.pick(lost, target).runner_version == tuning_db.IN_PLACE
    assert db.pick(held, target).config == cfg_h.to_json()
    in_place_rows = [r for r in db.history(lost, target) if r.runner_version == tuning_db.IN_PLACE]
    batch = tuning_db.latest_batch(in_place_rows)
    assert len(batch) == 3  # the pick, the default and the runner-up, timed together
    rebuilt = build_model(model, schedule_source(db, model, prepared=prep), prepared=prep)
    args = run_inputs(rebuilt, model)
    assert max_difference(rebuilt(*args), default(*args)) < 1e-4


def test_real_profiles_decide_the_log_s_pick(setup):
    model, prep, db, picked, tuned, default, runners_up = setup
    calls = []
    checks = confirm_in_place(db, prep.extraction.tasks, tuned, default, run_inputs(tuned, model), rounds=2,
                              build_pinned=_pinned_builder(db, model, prep, calls))
    assert calls == [runners_up] and {c.key for c in checks} == set(picked)
    for c in checks:
        task, cfg = picked[c.key]
        assert min(c.tuned_s, c.default_s, c.runner_up_s) > 0
        assert math.isfinite(c.tuned_s) and math.isfinite(c.default_s) and math.isfinite(c.runner_up_s)
        want = {"tuned": cfg, "default": task.default, "runner-up": runners_up[c.key]}[c.winner]
        assert db.pick(c.key, str(task.target)).config == want.to_json()


def test_a_build_without_tuned_kernels_logs_nothing(setup):
    model, prep, db, _, _, default, _ = setup
    before = sum(len(db.history(t.key, str(t.target))) for t in prep.extraction.tasks)
    assert confirm_in_place(db, prep.extraction.tasks, default, default, run_inputs(default, model)) == []
    assert sum(len(db.history(t.key, str(t.target))) for t in prep.extraction.tasks) == before
