"""cnn_comp and relay_opt: every ablation step computes what O0 computes and really changes the
build, the PyTorch baseline runs the same network, quick runs are a strict subset of full ones, and
a tiny relay_opt runs end to end through the runner (CSV, Markdown, PNG), then reruns measuring
nothing."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

import autorelay
import tuning_db
from autorelay.frontend.zoo.builder import NetBuilder
from autorelay.op.registry import call
from autorelay.transform.pass_base import Pipeline
from reproduce import Context, run_experiment
from reproduce.experiments import cnn_comp, cnn_models, relay_opt
from reproduce.experiments.cnn_models import CNN


def _tiny_cnn() -> tuple[object, dict[str, np.ndarray]]:
    """Conv-BN-ReLU twice (the second one 3x3, stride 1, 32 channels: Winograd takes it), pool, dense."""
    b = NetBuilder(0)
    data = b.input("data", (1, 3, 8, 8))
    x = b.conv_bn_relu(data, "c1", 3, 32, 3, 1)
    x = b.conv_bn_relu(x, "c2", 32, 32, 3, 1)
    y = call("nn.batch_flatten", call("nn.global_avg_pool2d", x))
    return b.finish([data], b.dense(y, "fc", 32, 10))


def test_each_ablation_step_computes_what_o0_computes_and_changes_the_build() -> None:
    mod, params = _tiny_cnn()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    _, block = relay_opt.layout_pipeline(1)
    outs, kernels = {}, {}
    for step in relay_opt.STEPS[:-1]:  # the tuned step builds +winograd's passes with the log's schedules
        exe = autorelay.build(mod, params=params, threads=1,
                              pipeline=Pipeline(relay_opt.step_passes(step, block)))
        outs[step] = np.asarray(exe(x))
        kernels[step] = [r.workload_key for r in exe.report.rows if r.kind == "kernel"]
    ref = outs["O0"]
    for step, out in outs.items():
        assert np.abs(out - ref).max() <= relay_opt.tolerance(ref), step
    # each step is a different build: fewer kernels when fused, other kernels when packed / Winograd
    assert len(kernels["O0"]) > len(kernels["+fold"]) > len(kernels["+fuse"])
    assert set(kernels["+layout"]) != set(kernels["+fold-scale-axis"])
    assert set(kernels["+winograd"]) != set(kernels["+layout"])
    with pytest.raises(ValueError, match="unknown ablation step"):
        relay_opt.step_passes("O9", block)


def test_the_pytorch_baseline_matches_autorelay() -> None:
    pytest.importorskip("torch")
    from reproduce.baselines import make_autorelay, make_torch

    _, ours = make_autorelay("nature-dqn", {}, 1, "default", None)
    run, theirs = make_torch("nature-dqn", {}, 1)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(theirs, ours, rtol=1e-3, atol=1e-4)
    run()


def test_the_tvm_baseline_matches_pytorch_when_installed() -> None:
    pytest.importorskip("tvm")
    pytest.importorskip("onnx")
    from reproduce.baselines import make_torch, make_tvm

    _, theirs = make_torch("nature-dqn", {}, 1)
    _, tvm_out = make_tvm("nature-dqn", {}, 1)
    np.testing.assert_allclose(tvm_out, theirs, rtol=1e-3, atol=1e-4)


def test_a_missing_baseline_is_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from reproduce import baselines

    monkeypatch.setitem(baselines.BASELINE_MODULES, "onnxruntime", "no_such_module_for_this_test")
    why = baselines.missing("onnxruntime")
    assert why and "pip install -e '.[onnx-test]'" in why and "\n" not in why
    log = io.StringIO()
    peers = baselines.baseline_peers("nature-dqn", {}, 1, log=log)
    assert "onnxruntime" not in peers and "onnxruntime skipped" in log.getvalue()


@pytest.mark.parametrize("exp", [cnn_comp, relay_opt])
def test_quick_models_are_a_strict_subset_of_the_full_run(exp, tmp_path: Path) -> None:
    def models(quick: bool) -> set[str]:
        ctx = Context(quick=quick, threads=1, db_url="", db=None, out_dir=tmp_path)
        return {u.params["zoo"] for u in exp.EXPERIMENT.units(ctx)}

    assert models(True) < models(False) == {m.zoo for m in cnn_models.FULL}
    full = Context(quick=False, threads=1, db_url="", db=None, out_dir=tmp_path)
    assert exp.EXPERIMENT.full_minutes * 60 >= sum(u.expected_s for u in exp.EXPERIMENT.units(full)) * 0.9


def test_a_tiny_relay_opt_runs_end_to_end_and_reruns_measuring_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # shrunk, not faked: a small model, no tuning budget (the tuned step builds with what the log
    # has), one short timed block per step; every step still builds in its own process and is checked
    monkeypatch.setattr(relay_opt, "QUICK", (CNN("mlp"),))
    monkeypatch.setattr(relay_opt, "QUICK_TRIALS", 0)
    monkeypatch.setitem(relay_opt.ROUNDS, True, 1)
    monkeypatch.setitem(relay_opt.BLOCK_S, True, 0.01)
    db = tuning_db.open(tmp_path / "log.db")
    ctx = Context(quick=True, threads=1, db_url=db.url, db=db, out_dir=tmp_path / "out", log=io.StringIO())
    try:
        first = run_experiment(relay_opt.EXPERIMENT, ctx)
        assert first.measured == ["ablation/mlp"] and not first.failed
        assert {p.name for p in first.files} == {"relay_opt.csv", "relay_opt.md", "relay_opt.png"}
        with (ctx.out_dir / "relay_opt.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert [r["step"] for r in rows] == list(relay_opt.STEPS)
        assert all(float(r["ms"]) > 0 and float(r["max_abs_diff"]) >= 0 for r in rows)
        assert float(rows[0]["speedup_o0"]) == 1.0
        assert "| mlp | +fuse |" in (ctx.out_dir / "relay_opt.md").read_text()
        again = run_experiment(relay_opt.EXPERIMENT, ctx)
        assert not again.measured and again.reused == ["ablation/mlp"]
    finally:
        db.close()


def test_the_cnn_comp_report_leaves_out_a_skipped_baseline_and_says_why(tmp_path: Path) -> None:
    from reproduce import Row

    why = "onnxruntime skipped: onnxruntime is not installed (pip install -e '.[onnx-test]' adds it)"
    timed = {"model": "m", "pipeline": "default", "skipped": {"onnxruntime": why},
             "untuned_ms": 4.0, "untuned_spread": [3.9, 4.2], "tuned_ms": 2.0, "tuned_spread": [1.9, 2.1],
             "torch_ms": 8.0, "torch_spread": [7.5, 9.0], "max_abs_diff_torch": 1e-6}
    tuned = {"model": "m", "pipeline": "default", "trials_logged": 12, "new_trials": 12, "tasks": 3,
             "tune_s": 9.0}
    rows = [Row("tune/m", tuned, "x", "x", None), Row("time/m", timed, "x", "x", None)]
    ctx = Context(quick=True, threads=2, db_url="", db=None, out_dir=tmp_path)
    report = cnn_comp.EXPERIMENT.report(ctx, rows)
    assert "ORT ms" not in report.markdown and f"- {why}" in report.markdown
    line = next(ln for ln in report.markdown.splitlines() if ln.startswith("| m |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:6] == ["4.000", "2.000", "8.000", "2.000", "0.250"]  # ms, tuning speedup, tuned/torch
    assert report.csv_rows[0]["onnxruntime_ms"] is None and report.csv_rows[0]["trials"] == 12
