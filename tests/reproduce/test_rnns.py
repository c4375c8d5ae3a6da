"""The `rnns` experiment: its PyTorch baselines against the NumPy oracles, every executor computing
the same answer, the bar verdicts, and one tiny run end to end through the runner."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

import tuning_db
from autorelay.frontend import zoo
from autorelay.frontend.zoo.treelstm import tree_lstm_reference
from reproduce import Context, Row, run_experiment
from reproduce.experiments import rnns
from reproduce.rnn_baselines import model_inputs, to_torch, torch_runner

pytest.importorskip("torch")


def test_torch_baselines_match_the_numpy_oracles() -> None:
    _, params = zoo.get("lstm", seq_len=5)
    xs = model_inputs("lstm", 5, params)
    np.testing.assert_allclose(torch_runner("lstm", params, 5)(to_torch(xs)),
                               zoo.rnn.lstm_reference(xs, params), rtol=1e-4, atol=1e-5)
    _, tparams = zoo.get("tree-lstm")
    tree = model_inputs("tree-lstm", 3, tparams, seed=4)
    assert len(tree[1]) == 2 and len(tree[1][0][1]) == 2 and not tree[1][0][1][0][1]  # 7 nodes
    np.testing.assert_allclose(torch_runner("tree-lstm", tparams, 3)(to_torch(tree)),
                               tree_lstm_reference(tree, tparams), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", rnns.MODELS)
def test_every_executor_computes_what_pytorch_computes(name: str) -> None:
    steps = 3 if name == "tree-lstm" else 4
    _, want = rnns.make_executor("torch", name, steps, 1, 0)
    backends = ("vm",) if name == "tree-lstm" else ("vm", "aot")
    for backend in backends:
        run, got = rnns.make_executor(backend, name, steps, 1, 0)
        if name == "char-rnn":
            assert np.array_equal(got, want) and got.shape == (steps,)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rnns._as_array(name, run()), got)  # the timed call, again


def _row(unit: str, **ms: float) -> Row:
    per = rnns.PER.get(unit, "step")
    return Row(unit, {"steps": 10, "per": per, **{f"{k}_ms": v for k, v in ms.items()}}, "m", "M", "v")


def test_the_bar_is_judged_on_the_best_executor_per_step_or_per_tree() -> None:
    ctx = Context(quick=True, threads=1, db_url="", db=None, out_dir=Path("."))
    rep = rnns.report(ctx, [_row("lstm", vm=1.0, aot=0.5, torch=1.45), _row("tree-lstm", vm=1.0, torch=2.1)])
    by_model = {r["model"]: r for r in rep.csv_rows}
    assert by_model["lstm"]["aot_us"] == pytest.approx(50.0)  # 0.5 ms over 10 steps
    assert by_model["lstm"]["torch_over_best"] == pytest.approx(2.9)
    assert by_model["tree-lstm"]["vm_us"] == pytest.approx(1000.0)  # per tree, not per step
    lines = rep.markdown.splitlines()
    assert any(ln.startswith("| lstm") and ln.endswith("| NO |") for ln in lines)
    assert any(ln.startswith("| tree-lstm") and ln.endswith("| yes |") for ln in lines)


def test_a_tiny_run_end_to_end_then_a_rerun_measures_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(rnns, "MODELS", ("rnn", "tree-lstm"))
    monkeypatch.setitem(rnns.SCALE, True, {"steps": 3, "levels": 2, "rounds": 1, "block_s": 0.02})
    db = tuning_db.open(tmp_path / "log.db")
    ctx = Context(quick=True, threads=1, db_url=db.url, db=db, out_dir=tmp_path / "out", log=io.StringIO())
    first = run_experiment(rnns.EXPERIMENT, ctx)
    assert first.measured == ["rnn", "tree-lstm"] and not first.failed
    with (ctx.out_dir / "rnns.csv").open() as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert float(rows["rnn"]["aot_us"]) > 0 and float(rows["tree-lstm"]["vm_us"]) > 0
    assert rows["tree-lstm"]["aot_us"] == ""  # the AoT compiler takes static tensors only
    assert (ctx.out_dir / "rnns.png").stat().st_size > 0
    again = run_experiment(rnns.EXPERIMENT, ctx)
    assert not again.measured and again.reused == ["rnn", "tree-lstm"]
    db.close()
