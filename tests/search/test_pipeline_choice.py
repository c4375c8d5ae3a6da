"""`--pipeline auto`: the graph-level layout choice is measured once, logged with the tuning run,
and reused by every later command on the same log (so a build finds what the tuner tuned)."""

from __future__ import annotations

import pytest

import tuning_db
from autorelay.lower import model_key
from search import tune_model
from search.measure import TimingSettings
from search.models import compile_model, load_model, tuning_target
from search.pipeline_choice import candidates, choose_pipeline, logged_pipeline

pytestmark = pytest.mark.cpu

FAST = TimingSettings(number=1, repeat=2, min_repeat_ms=2.0, warmup=1, timeout=10.0)


def _log(tmp_path, name="log.db"):
    return tuning_db.open(f"sqlite:///{tmp_path / name}")


def test_logged_pipeline_is_the_latest_run_of_that_model_and_target(tmp_path):
    model = load_model("mlp")
    target = tuning_target("llvm", 1)
    with _log(tmp_path) as db:
        assert logged_pipeline(db, model, "llvm", 1) is None
        db.start_run(model="mlp", info={"target": target, "pipeline": "nchwc"})
        db.start_run(model="mlp", info={"target": target, "pipeline": "default"})
        db.start_run(model="other", info={"target": target, "pipeline": "tune"})
        db.start_run(model="mlp", info={"target": tuning_target("llvm", 2), "pipeline": "O0"})
        assert logged_pipeline(db, model, "llvm", 1) == "default"
        assert logged_pipeline(db, model, "llvm", 2) == "O0"
        choice = choose_pipeline("auto", model, db, "llvm", 1)
        assert (choice.pipeline, choice.how) == ("default", "logged")
        assert choose_pipeline("nchwc", model, db, "llvm", 1).how == "given"
        # a run that logged the model's key is found by it, whatever name it was tuned under
        db.start_run(model="mlp:b1", info={"target": target, "model_key": model_key(model.mod),
                                           "pipeline": "nchwc"})
        db.start_run(model="mlp", info={"target": target, "model_key": "0" * 32, "pipeline": "tune"})
        assert logged_pipeline(db, model, "llvm", 1) == "nchwc"


def test_measured_choice_is_the_fastest_candidate_and_compile_builds_with_it():
    model = load_model("mobilenet-v2", image_size=32)
    choice = choose_pipeline("auto", model, None, "llvm", 1)
    assert choice.how == "measured" and set(choice.latencies) == set(candidates("llvm", 1))
    assert choice.latencies[choice.pipeline] == min(choice.latencies.values())
    assert "measured" in choice.describe() and choice.pipeline in choice.describe()
    res = compile_model(model, None, "llvm", threads=1, pipeline="nchwc")
    assert res.pipeline == "nchwc"
    assert any(r.detail.startswith("depthwise_nchwc") for r in res.exe.report.rows)


def test_tune_records_its_pipeline_and_compile_auto_reuses_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    model = load_model("mlp")
    result = tune_model(model, trials=4, tuner="random", db=url, threads=1, timing=FAST, round_trials=4,
                        batch=4, pipeline="nchwc", compare=False)
    assert "pipeline nchwc (given)" in result.table()
    with tuning_db.open(url) as db:
        (run,) = db.runs()
        assert run.info["pipeline"] == "nchwc" and run.info["pipeline_choice"] == "given"
        res = compile_model(model, db, "llvm", threads=1, pipeline="auto")
    assert res.pipeline == "nchwc" and res.source_counts.get("tuned", 0) >= 1


def test_a_candidate_that_does_not_build_drops_out(monkeypatch):
    import search.pipeline_choice as pc
    from autorelay.build_module import BuildError

    real = pc.build_model

    def build(model, source, target="llvm", *, threads=None, pipeline="default", prepared=None):
        if pipeline.startswith("nchwc"):  # nchwc, and nchwc16 where the host has 16 lanes
            raise BuildError("no NCHWc compute for this op")
        return real(model, source, target, threads=threads, pipeline=pipeline, prepared=prepared)

    monkeypatch.setattr(pc, "build_model", build)
    choice = pc.measure_pipelines(load_model("mlp"), "llvm", 1)
    assert choice.pipeline == "default" and set(choice.latencies) == {"default"}
    assert "pipeline nchwc did not build: no NCHWc compute for this op" in choice.note  # the user is told
    with pytest.raises(BuildError, match="no NCHWc compute"):
        pc.measure_pipelines(load_model("mlp"), "llvm", 1, pipelines=("nchwc",))


def test_compile_without_a_log_reuses_the_measured_winner_build(monkeypatch):
    import search.pipeline_choice as pc

    builds = []
    real = pc.build_model

    def counting(model, source, target="llvm", *, threads=None, pipeline="default", prepared=None):
        builds.append(pipeline)
        return real(model, source, target, threads=threads, pipeline=pipeline, prepared=prepared)

    monkeypatch.setattr(pc, "build_model", counting)
    monkeypatch.setattr("search.models.build_model", counting)
    res = compile_model(load_model("mlp"), None, "llvm", threads=1, pipeline="auto")
    assert sorted(builds) == sorted(candidates("llvm", 1))  # one build per candidate, none after
    assert res.pipeline in candidates("llvm", 1)


def test_a_python_build_uses_the_pipeline_tune_logged_for_the_model(tmp_path):
    """`autorelay.build(mod, schedules=source)` without a pipeline builds with the one `tune` logged
    for this model and target (found by the model's key), and `default` when none is logged."""
    import autorelay
    from autorelay.codegen import resolve_target
    from autorelay.lower import model_key

    model = load_model("mlp")
    target = str(resolve_target("llvm", 1))
    with tuning_db.open(f"sqlite:///{tmp_path / 'log.db'}") as db:
        src = db.schedule_source("llvm")
        assert autorelay.build(model.mod, params=model.params, schedules=src, threads=1).pipeline == "default"
        db.start_run(model="renamed", info={"target": target, "model_key": model_key(model.mod),
                                            "pipeline": "O0"})
        db.start_run(model="other", info={"target": target, "model_key": "0" * 32, "pipeline": "tune"})
        exe = autorelay.build(model.mod, params=model.params, schedules=src, threads=1)
        assert exe.pipeline == "O0"
        given = autorelay.build(model.mod, params=model.params, schedules=src, threads=1, pipeline="nchwc")
        assert given.pipeline == "nchwc"


def test_the_candidates_follow_the_vector_width():
    assert candidates("llvm -mcpu=znver3", 1) == ("default", "nchwc", "nchwc-direct")
    assert candidates("llvm -mcpu=znver5", 1) == ("default", "nchwc", "nchwc16", "nchwc16-direct")
