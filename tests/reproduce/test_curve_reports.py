"""The reports of autotvm_curves and transfer from hand-made stored rows (nothing measured): the
grouping by workload and seed, the tables, the verdicts against hand-computed medians, and which
workloads the transfer experiment pre-trains on."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import tuning_db
from reproduce import Context, Row
from reproduce.curve_report import group_runs
from reproduce.experiments import autotvm_curves, transfer


def _row(workload: str, strategy: str, seed: int, gflops: list[float], machine: str = "m") -> Row:
    return Row(f"{workload}/{strategy}/s{seed}", {"workload": workload, "strategy": strategy, "seed": seed,
                                                  "gflops": gflops, "transferred": 7}, machine, machine, "v")


@pytest.fixture
def ctx(tmp_path: Path):
    db = tuning_db.open(tmp_path / "log.db")
    yield Context(quick=False, threads=1, db_url=db.url, db=db, out_dir=tmp_path, log=io.StringIO())
    db.close()


def test_group_runs_orders_workloads_and_fills_missing_seeds() -> None:
    rows = [_row("C3", "xgb", 1, [2.0]), _row("C1", "xgb", 0, [1.0]), _row("C1", "random", 0, [3.0])]
    got = group_runs(rows, ["C1", "C2", "C3"])
    assert list(got) == [("m", "C1"), ("m", "C3")]
    assert got[("m", "C3")] == {"xgb": [[], [2.0]]}
    assert got[("m", "C1")] == {"xgb": [[1.0]], "random": [[3.0]]}


def test_autotvm_curves_report_verdict(ctx: Context) -> None:
    # C1: xgb reaches 95 of 100 at trial 1, random at 4 -> 0.25; C2: xgb 2, random 2 -> 1.0;
    # C3: xgb 1 (seed 0) and 3 (seed 1), median 2; random 4 and 4 -> 0.5. Median of (0.25, 1, 0.5) = 0.5.
    rows = [_row("C1", "xgb", 0, [100, 1, 1, 1]), _row("C1", "random", 0, [1, 2, 3, 99]),
            _row("C2", "xgb", 0, [1, 100]), _row("C2", "random", 0, [1, 100]),
            _row("C3", "xgb", 0, [100, 1, 1, 1]), _row("C3", "xgb", 1, [1, 1, 100, 1]),
            _row("C3", "random", 0, [1, 1, 1, 100]), _row("C3", "random", 1, [1, 1, 1, 100])]
    rep = autotvm_curves.report(ctx, rows)
    assert "median ratio xgb/random over 3 tasks: 0.5" in rep.markdown
    assert "VERDICT: PASS" in rep.markdown
    assert "| C1 (224x224, 3->64, k7 p3 s2) |" in rep.markdown
    assert len(rep.csv_rows) == sum(len(r.result["gflops"]) for r in rows)
    assert set(rep.figures) == {"autotvm_curves", "autotvm_curves_trials"}
    # one more workload where random is twice as fast: median of (0.25, 0.5, 1, 2) = 0.75 -> FAIL
    rows += [_row("C4", "xgb", 0, [1, 1, 1, 100]), _row("C4", "random", 0, [1, 100])]
    assert "VERDICT: FAIL" in autotvm_curves.report(ctx, rows).markdown


def test_transfer_report_verdict_and_pretraining_rows(ctx: Context) -> None:
    rows = [_row("C1", "pretrain", 0, [5.0] * 3), _row("C7", "transfer", 0, [100, 1]),
            _row("C7", "scratch", 0, [1, 1, 100]), _row("C8", "transfer", 0, [1, 100]),
            _row("C8", "scratch", 0, [100, 1])]
    rep = transfer.report(ctx, rows)
    # C7: 1/3, C8: 2/1; the median of the two is 1.17, not below 1 -> FAIL; pretrain rows are no target
    assert "median ratio transfer/scratch over 2 tasks: 1.17" in rep.markdown
    assert "VERDICT: FAIL" in rep.markdown and "transfer faster on 1 of 2 workloads" in rep.markdown
    assert "C1 3 trials" in rep.markdown and "C1 (" not in rep.markdown
    rows.append(_row("C9", "transfer", 0, [100]))
    rows.append(_row("C9", "scratch", 0, [1, 1, 1, 100]))  # 1/4: median of (1/3, 2, 1/4) = 1/3 -> PASS
    assert "VERDICT: PASS" in transfer.report(ctx, rows).markdown


def test_transfer_pretrains_on_exactly_c1_to_c6_and_waits_for_them(ctx: Context) -> None:
    assert [w.name for w in transfer.FULL.donors] == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert [w.name for w in transfer.FULL.targets] == ["C7", "C8", "C9", "C10", "C11", "C12"]
    assert not {w.name for w in transfer.QUICK.targets} & set(transfer.DONORS)
    keys = [u.key for u in transfer.units(ctx)]
    assert keys[:6] == [f"pretrain/C{i}" for i in range(1, 7)]  # measured before any transfer run
    assert len(keys) == 6 + 6 * 3 * 2
    with pytest.raises(RuntimeError, match="pre-training run of C1 has 0 of"):
        transfer.donor_keys(ctx, transfer.FULL)
