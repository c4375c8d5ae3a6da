"""The public API on both backends: record, best, history, has_measured, stats, runs."""

from __future__ import annotations

import os
import random
import time

import numpy as np
import pytest

import tuning_db
from tuning_db import TuningDBError

T = "llvm -mattr=+avx512f -mcpu=skylake-avx512"
WL = {
    "family": "conv2d",
    "shapes": [[1, 64, 56, 56], [64, 64, 3, 3]],
    "dtypes": ["float32", "float32"],
    "layout": "NCHW",
}


def test_record_computes_mean_and_std_like_numpy(db: tuning_db.TuningDB) -> None:
    costs = [1.5e-3, 1.25e-3, 2.0e-3, 1.75e-3]
    mid = db.record("w1", T, {"tile": [8, 4], "unroll": True}, costs, workload=WL)
    assert isinstance(mid, int)
    (rec,) = db.history("w1", T)
    assert rec.id == mid
    assert rec.costs == costs
    assert rec.mean_cost == pytest.approx(np.mean(costs), rel=1e-12)
    assert rec.std_cost == pytest.approx(np.std(costs), rel=1e-12)
    assert rec.config == {"tile": [8, 4], "unroll": True}
    assert rec.error is None and rec.error_kind is None


def test_best_returns_k_fastest_distinct_configs(db: tuning_db.TuningDB) -> None:
    rng = random.Random(7)
    truth: dict[int, float] = {}
    for _ in range(120):
        cfg = rng.randrange(30)
        costs = [rng.uniform(1e-4, 1e-2) for _ in range(3)]
        db.record("w1", T, {"c": cfg}, costs)
        truth[cfg] = min(truth.get(cfg, float("inf")), float(np.mean(costs)))
    db.record("w1", T, {"c": 999}, [], error="segfault in candidate", error_kind="runtime")
    db.record("w1", "llvm", {"c": 1000}, [1e-9])  # another target never leaks in
    db.record("w2", T, {"c": 1001}, [1e-9])  # nor another workload
    expected = sorted(truth.items(), key=lambda kv: kv[1])[:5]
    got = db.best("w1", T, k=5)
    assert [r.config["c"] for r in got] == [c for c, _ in expected]
    assert [r.mean_cost for r in got] == pytest.approx([v for _, v in expected], rel=1e-12)
    assert len(db.best("w1", T, k=1000)) == len(truth)
    assert db.best("nope", T) == [] and db.best("w1", "cuda") == []


def test_best_sees_past_many_repeats_of_one_config(db: tuning_db.TuningDB) -> None:
    for i in range(100):  # the best config measured 100 times: k=2 must still find the runner-up
        db.record("w", T, {"c": "fast"}, [1.0 + i * 1e-3])
    db.record("w", T, {"c": "slow"}, [5.0])
    assert [r.config["c"] for r in db.best("w", T, k=2)] == ["fast", "slow"]


def test_target_strings_are_canonical(db: tuning_db.TuningDB) -> None:
    db.record("w", "llvm  -mcpu=skylake-avx512   -mattr=+avx512f", {"a": 1}, [1.0])
    assert db.best("w", T)[0].target == "llvm -mattr=+avx512f -mcpu=skylake-avx512"


def test_has_measured_for_resume(db: tuning_db.TuningDB) -> None:
    db.record("w", T, {"x": 1, "y": 2}, [1.0])
    db.record("w", T, {"x": 3}, [], error="build failed", error_kind="build")
    assert db.has_measured("w", T, {"y": 2, "x": 1})  # key order is irrelevant
    assert db.has_measured("w", T, {"x": 3})  # failed ones count: don't re-measure them
    assert not db.has_measured("w", T, {"x": 2})
    assert not db.has_measured("w", "cuda", {"x": 1, "y": 2})


def test_stats_counts(db: tuning_db.TuningDB) -> None:
    for i in range(6):
        db.record(f"w{i % 3}", T if i % 2 else "cuda", {"i": i}, [float(i + 1)])
    db.record("w0", T, {"i": 9}, [], error="timeout", error_kind="timeout")
    s = db.stats()
    assert (s["measurements"], s["workloads"], s["targets"], s["errors"]) == (7, 3, 2, 1)
    per = {row["target"]: row for row in s["per_target"]}
    assert per[T]["measurements"] == 4 and per["cuda"]["measurements"] == 3


def test_runs_lifecycle(db: tuning_db.TuningDB) -> None:
    run = db.start_run(model="resnet18", tuner="xgb", trial_budget=64, info={"seed": 1})
    for i in range(3):
        db.record("w", T, {"i": i}, [1.0], run=run)
    (info,) = db.runs(status="running")
    assert (info.id, info.model, info.tuner, info.trial_budget, info.measurements) == (
        run,
        "resnet18",
        "xgb",
        64,
        3,
    )
    assert info.info["seed"] == 1 and info.info["pid"] == os.getpid()
    db.update_run(run, info={"tasks": 7, "seed": 2})  # added and replaced; the rest kept
    assert db.runs(ids=[run])[0].info == {"seed": 2, "pid": os.getpid(), "tasks": 7}
    with pytest.raises(TuningDBError, match="no tuning run with id 12345"):
        db.update_run(12345, info={"tasks": 1})
    db.finish_run(run, interrupted=True)
    assert [r.id for r in db.runs(status="interrupted")] == [run]
    assert db.resume_run(run).status == "running"
    db.finish_run(run)
    (done,) = db.runs()
    assert done.status == "finished" and done.finished_at is not None
    assert {r.run for r in db.history("w", T)} == {run}
    with pytest.raises(TuningDBError, match="no tuning run with id 12345"):
        db.record("w", T, {"i": 9}, [1.0], run=12345)
    with pytest.raises(TuningDBError, match="no tuning run"):
        db.finish_run(12345)


def test_extra_fields_round_trip(db: tuning_db.TuningDB) -> None:
    db.record(
        "w",
        T,
        {"i": 1},
        [2.0, 4.0],
        space_index=12345678901,
        builder_version="b1",
        runner_version="r2",
        compiler_version="autorelay 0.1.0",
        target_fingerprint={"cpu": "Xeon", "cores": 2, "isa": ["avx512f"]},
        workload=WL,
    )
    (r,) = db.history("w", T)
    assert (r.space_index, r.builder_version, r.runner_version, r.compiler_version) == (
        12345678901,
        "b1",
        "r2",
        "autorelay 0.1.0",
    )
    assert db.workload("w") == WL


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("", T, {}, [1.0]), {}, "'workload_key' must not be empty"),
        (("w", T, [1, 2], [1.0]), {}, "'config' must be a JSON object"),
        (("w", T, {"a": object()}, [1.0]), {}, "'config' is not JSON-serialisable"),
        (("w", T, {}, [1.0, float("nan")]), {}, r"'costs'\[1\] must be a finite non-negative number"),
        (("w", T, {}, [-1.0]), {}, "'costs'.0. must be a finite"),
        (("w", T, {}, "1.0"), {}, "'costs' must be a list of numbers"),
        (("w", T, {}, []), {}, "'costs' is empty for a successful measurement"),
        (("w", T, {}, [1.0]), {"workload": [1]}, "'workload' must be a JSON object"),
        ((3, T, {}, [1.0]), {}, "'workload_key' must be a string"),
        (("w", T, {}, [1.0]), {"space_index": 10**20}, r"'space_index' must be in \[0, 2\*\*63\)"),
        (("w", T, {}, [1.0]), {"space_index": -1}, r"'space_index' must be in \[0, 2\*\*63\), got -1"),
    ],
)
def test_bad_record_input_names_the_field(sqlite_url: str, args: tuple, kwargs: dict, message: str) -> None:
    db = tuning_db.open(sqlite_url)
    with pytest.raises(TuningDBError, match=message):
        db.record(*args, **kwargs)
    assert db.stats()["measurements"] == 0


def test_default_location_honours_xdg_and_env(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    s = tuning_db.Settings.from_env()
    assert s.default_path == tmp_path / "data" / "autorelay" / "tuning.sqlite"
    db = tuning_db.open(config=s)
    db.record("w", T, {}, [1.0])
    assert s.default_path.is_file()
    other = tmp_path / "other.sqlite"
    s2 = tuning_db.Settings.from_env({"AUTORELAY_DB": str(other), "XDG_DATA_HOME": str(tmp_path)})
    tuning_db.open(config=s2).record("w", T, {}, [1.0])
    assert other.is_file()


def test_tuning_db_imports_nothing_from_the_compiler_or_the_search() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, tuning_db, tuning_db.cli\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('autorelay', 'search'))\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_a_run_whose_process_died_is_closed_as_interrupted(tmp_path):
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    # another process opens a run and dies without closing it (as kill -9 leaves it)
    script = f"import tuning_db, os; db = tuning_db.open({url!r}); db.start_run(model='m'); os._exit(9)"
    subprocess.run([sys.executable, "-c", script], check=False)
    with tuning_db.open(url) as db:
        mine = db.start_run(model="still tuning")
        [dead] = [r.id for r in db.runs("running") if r.id != mine]
        assert db.close_dead_runs() == [dead]
        assert db.runs(ids=[dead])[0].status == "interrupted"
        assert db.runs(ids=[mine])[0].status == "running"  # this process is alive
        assert db.close_dead_runs() == []


def test_pick_trusts_the_interleaved_rounds_over_a_lucky_figure(tmp_path):
    url = f"sqlite:///{tmp_path / 'pick.db'}"
    with tuning_db.open(url) as db:
        a, b = {"tile": 4}, {"tile": 8}
        db.record("wk", "llvm", a, [1.0e-3])
        db.record("wk", "llvm", a, [0.5e-3])  # a lucky quiet moment
        db.record("wk", "llvm", b, [0.8e-3])
        assert db.pick("wk", "llvm").config == a  # never re-measured: the fastest figure
        # re-timed in alternation: b wins
        db.record("wk", "llvm", a, [0.90e-3, 0.95e-3, 0.92e-3], runner_version=tuning_db.INTERLEAVED)
        db.record("wk", "llvm", b, [0.80e-3, 0.82e-3, 0.81e-3], runner_version=tuning_db.INTERLEAVED)
        assert db.best("wk", "llvm")[0].config == a
        assert db.pick("wk", "llvm").config == b
        assert db.schedule_source("llvm").lookup("wk").config == b
        # a later re-measurement (seconds later) replaces the earlier one
        later = time.time() + 60
        db.record("wk", "llvm", a, [0.70e-3, 0.71e-3, 0.72e-3], runner_version=tuning_db.INTERLEAVED,
                  recorded_at=later)
        assert db.pick("wk", "llvm").config == a
        assert db.pick("other", "llvm") is None


def test_pick_compares_only_the_configs_timed_together(tmp_path):
    """A config that won nothing in the latest re-measurement cannot win with an older, faster
    figure: the machine may have been quicker then (a plan tune re-measures a kernel twice, and
    the second time its first winner may not be among the contenders)."""
    again = tuning_db.INTERLEAVED
    with tuning_db.open(f"sqlite:///{tmp_path / 'pick.db'}") as db:
        old, new, default = {"template": "t", "tile": 4}, {"template": "t", "tile": 8}, {"template": "t"}
        for cfg, cost in ((old, 0.80e-3), (default, 0.70e-3)):  # the first re-measurement
            db.record("wk", "llvm", cfg, [cost] * 3, runner_version=again, recorded_at=100.0)
        assert db.pick("wk", "llvm").config == default
        for cfg, cost in ((new, 0.90e-3), (default, 0.95e-3)):  # a slower moment, `old` not timed
            db.record("wk", "llvm", cfg, [cost] * 3, runner_version=again, recorded_at=200.0)
        assert db.pick("wk", "llvm").config == new
        assert tuning_db.latest_batch(db.history("wk", "llvm"))[0].recorded_at == 200.0
        # rows logged one after another, moments apart (logs written before batches shared a time)
        db.record("wk", "llvm", old, [0.85e-3] * 3, runner_version=again, recorded_at=300.0)
        db.record("wk", "llvm", new, [0.90e-3] * 3, runner_version=again, recorded_at=300.2)
        assert db.pick("wk", "llvm").config == old


def test_alternative_templates_each_keep_their_latest_winner(tmp_path):
    again = tuning_db.INTERLEAVED
    with tuning_db.open(f"sqlite:///{tmp_path / 'pick.db'}") as db:
        direct, igemm = {"template": "direct", "tile": 4}, {"template": "igemm", "tile": 2}
        db.record("wk", "llvm", direct, [0.5e-3] * 3, runner_version=again, recorded_at=100.0)
        db.record("wk", "llvm", igemm, [0.9e-3] * 3, runner_version=again, recorded_at=200.0)
        assert db.pick("wk", "llvm").config == direct


def test_an_in_place_verdict_is_not_overturned_by_another_templates_alone_figure(tmp_path):
    """The build ran the direct pick, and timing it in place against its own rivals kept it. The
    in-place figures are slower than igemm's alone figure (a kernel in a model runs colder), yet
    igemm never ran in place: the log's pick stays the confirmed one until a later alone
    re-measurement outdates the verdict."""
    alone, in_place = tuning_db.INTERLEAVED, tuning_db.IN_PLACE
    with tuning_db.open(f"sqlite:///{tmp_path / 'pick.db'}") as db:
        direct, default = {"template": "direct", "tile": 4}, {"template": "direct"}
        igemm = {"template": "igemm", "tile": 2}
        for cfg, cost, at in ((direct, 0.5e-3, 100.0), (default, 0.6e-3, 100.0), (igemm, 0.55e-3, 200.0)):
            db.record("wk", "llvm", cfg, [cost] * 3, runner_version=alone, recorded_at=at)
        assert db.pick("wk", "llvm").config == direct
        for cfg, cost in ((direct, 0.70e-3), (default, 0.75e-3)):
            db.record("wk", "llvm", cfg, [cost] * 3, runner_version=in_place, recorded_at=300.0)
        assert db.pick("wk", "llvm").config == direct
        for cfg, cost in ((direct, 0.80e-3), (default, 0.72e-3)):  # a later in-place run: the default won
            db.record("wk", "llvm", cfg, [cost] * 3, runner_version=in_place, recorded_at=400.0)
        assert db.pick("wk", "llvm").config == default
        # igemm tuned further and re-measured alone: the verdict is outdated, the templates' winners compete
        db.record("wk", "llvm", igemm, [0.40e-3] * 3, runner_version=alone, recorded_at=500.0)
        assert db.pick("wk", "llvm").config == igemm
