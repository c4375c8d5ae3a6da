"""The AutoTVM curves experiment: C1-C12 as tuning tasks (shapes and FLOPs against the formula, the
NumPy reference against a direct loop), and one tiny end-to-end run through the reproduce runner
(a shrunken plan: one small conv, two tuners, four trials) writing CSV + Markdown + PNG, then a
rerun that measures nothing."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

import tuning_db
from autorelay.codegen import resolve_target
from reproduce import Context, run_experiment
from reproduce.conv_workloads import WORKLOADS, ConvWorkload, conv_reference, conv_task
from reproduce.curve_tuning import history_gflops, run_tag, tagged
from reproduce.experiments import autotvm_curves


def test_c1_to_c12_tasks_have_the_paper_shapes_and_flops() -> None:
    target = resolve_target("llvm", 1)
    # output sizes of ResNet-18's stages at 224 px: 112 after the stem, then 56, 28, 14, 7
    want_out = {"C1": 112, "C2": 56, "C3": 56, "C4": 28, "C5": 28, "C6": 28, "C7": 14, "C8": 14, "C9": 14,
                "C10": 7, "C11": 7, "C12": 7}
    assert [w.name for w in WORKLOADS] == [f"C{i}" for i in range(1, 13)]
    for w in WORKLOADS:
        task = conv_task(w, target)
        oh = (w.size + 2 * w.pad - w.kernel) // w.stride + 1
        assert oh == want_out[w.name]
        assert task.cdef.outputs[0].shape == (1, w.cout, oh, oh)
        assert [tuple(t.shape) for t in task.cdef.inputs] == [(1, w.cin, w.size, w.size),
                                                              (w.cout, w.cin, w.kernel, w.kernel)]
        # the task counts FLOPs from the compute's loop nest; the formula from the shapes
        assert task.flops == pytest.approx(2.0 * w.cout * oh * oh * w.cin * w.kernel ** 2)
        assert task.flops == pytest.approx(w.flops)
        assert task.template == "conv2d_nchw" and len(task.space) > 1000


def test_conv_reference_against_a_direct_loop() -> None:
    rng = np.random.default_rng(0)
    x, wt = rng.standard_normal((1, 3, 7, 7)), rng.standard_normal((4, 3, 3, 3))
    for stride, pad in ((1, 1), (2, 1), (2, 0)):
        got = conv_reference(x, wt, stride, pad)
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        oh = (7 + 2 * pad - 3) // stride + 1
        want = np.zeros((1, 4, oh, oh))
        for o in range(4):
            for i in range(oh):
                for j in range(oh):
                    want[0, o, i, j] = np.sum(xp[0, :, i * stride:i * stride + 3, j * stride:j * stride + 3]
                                              * wt[o])
        np.testing.assert_allclose(got, want, rtol=1e-12)


TINY = ConvWorkload("T1", 8, 8, 16, 3, 1, 2)


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(autotvm_curves, "QUICK", autotvm_curves.Plan((TINY,), ("xgb", "random"), 1, 4, 1.0))
    db = tuning_db.open(tmp_path / "log.db")
    yield Context(quick=True, threads=1, db_url=db.url, db=db, out_dir=tmp_path / "out", log=io.StringIO())
    db.close()


def test_tiny_run_end_to_end_then_a_rerun_measures_nothing(ctx: Context) -> None:
    exp = autotvm_curves.EXPERIMENT
    first = run_experiment(exp, ctx)
    assert sorted(first.measured) == ["T1/random/s0", "T1/xgb/s0"] and not first.failed
    assert {p.name for p in first.files} == {"autotvm_curves.csv", "autotvm_curves.md", "autotvm_curves.png",
                                             "autotvm_curves_trials.png"}
    task = conv_task(TINY, resolve_target("llvm", 1))
    for tuner in ("xgb", "random"):  # the trials are in the log, under the run's own key
        speeds = history_gflops(ctx.db, tagged(task, run_tag(tuner, 0, "quick")), 100)
        assert len(speeds) == 4 and max(speeds) > 0
    with (ctx.out_dir / "autotvm_curves.csv").open() as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == 8 and {r["strategy"] for r in lines} == {"xgb", "random"}
    md = (ctx.out_dir / "autotvm_curves.md").read_text()
    assert "VERDICT: " in md and "T1 (8x8, 8->16, k3 p1 s2)" in md and "xgb: trials" in md
    assert "![autotvm_curves](autotvm_curves.png)" in md
    stored = {r.unit: r.result for r in ctx.db.experiment_results("autotvm_curves", ctx.mode)}
    logged = history_gflops(ctx.db, tagged(task, "xgb-quick-s0"), 100)
    assert stored["T1/xgb/s0"]["gflops"] == pytest.approx(logged, abs=1e-3)

    again = run_experiment(exp, ctx)
    assert not again.measured and sorted(again.reused) == ["T1/random/s0", "T1/xgb/s0"]
    assert len(history_gflops(ctx.db, tagged(task, run_tag("xgb", 0, "quick")), 100)) == 4


def test_tiny_transfer_run_learns_from_exactly_its_donors(ctx: Context,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tiny donors pre-train the model tuning a third conv; its own scratch run, logged just
    before (the nearest workload the log holds, at distance 0), must not be among the donors."""
    from reproduce.experiments import transfer
    from search.tuners.model_based import lower_features

    donors = (ConvWorkload("D1", 8, 8, 16, 3, 1, 1), ConvWorkload("D2", 10, 8, 16, 3, 1, 1))
    target = ConvWorkload("T2", 12, 8, 16, 3, 1, 1)
    curves = autotvm_curves.Plan(donors + (target,), ("xgb",), 1, 4, 1.0)
    monkeypatch.setattr(transfer, "QUICK", transfer.TransferPlan(donors, (target,), 1, curves))
    summary = run_experiment(transfer.EXPERIMENT, ctx)
    assert summary.measured == ["pretrain/D1", "pretrain/D2", "T2/scratch/s0", "T2/transfer/s0"]
    stored = {r.unit: r.result for r in ctx.db.experiment_results("transfer", ctx.mode)}
    tt = conv_task(target, resolve_target("llvm", 1))
    lowerable = 0
    for d in donors:
        key = tagged(conv_task(d, resolve_target("llvm", 1)), run_tag("xgb", 0, "quick")).key
        for rec in ctx.db.history(key, str(tt.target)):
            lowerable += lower_features(tt, tt.config_from_json(rec.config)) is not None
    assert 0 < stored["T2/transfer/s0"]["transferred"] == lowerable <= 8
    assert stored["T2/scratch/s0"]["transferred"] == 0
    assert len(stored["T2/transfer/s0"]["gflops"]) == 4
    assert "transfer faster on" in (ctx.out_dir / "transfer.md").read_text()
