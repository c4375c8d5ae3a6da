"""The reproduce runner against a toy experiment: units stored as measured, reused on rerun, redrawn
by --replot without measuring, a failing unit reported and retried, machines kept apart."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

import tuning_db
from reproduce import Context, Experiment, Report, ReproduceError, Unit, run_experiment
from reproduce.machine import fingerprint, machine_info


def _toy(calls: list[str], fail: set[str] | None = None) -> Experiment:
    def units(ctx: Context) -> list[Unit]:
        return [Unit(f"n{i}", {"i": i}, expected_s=0.01) for i in range(3)]

    def measure(ctx: Context, unit: Unit) -> dict:
        calls.append(unit.key)
        if fail and unit.key in fail:
            raise RuntimeError("candidate crashed")
        return {"square": unit.params["i"] ** 2}

    def report(ctx: Context, rows) -> Report:
        data = [{"unit": r.unit, "square": r.result["square"], "machine": r.machine} for r in rows]
        return Report(data, "| unit | square |\n", {"toy": lambda fig: fig.add_subplot().plot([1, 2])})

    return Experiment("toy", "A toy", "nobody, Fig. 0", 0.1, 0.2, units, measure, report)


def test_units_are_stored_reused_and_replotted_without_measuring(ctx: Context) -> None:
    calls: list[str] = []
    first = run_experiment(_toy(calls), ctx)
    assert calls == ["n0", "n1", "n2"] and first.measured == calls and not first.reused
    names = {p.name for p in first.files}
    assert names == {"toy.csv", "toy.md", "toy.png"}
    with (ctx.out_dir / "toy.csv").open() as f:
        assert sorted(int(r["square"]) for r in csv.DictReader(f)) == [0, 1, 4]
    md = (ctx.out_dir / "toy.md").read_text()
    assert "nobody, Fig. 0" in md and "![toy](toy.png)" in md and "quick-t1" in md

    again = run_experiment(_toy(calls), ctx)
    assert calls == ["n0", "n1", "n2"] and again.reused == ["n0", "n1", "n2"] and not again.measured
    run_experiment(_toy(calls), ctx, replot=True)
    assert len(calls) == 3
    run_experiment(_toy(calls), ctx, remeasure=True)
    assert len(calls) == 6
    assert len(ctx.db.experiment_results("toy", ctx.mode)) == 3  # the latest row of each unit


def test_a_failing_unit_is_reported_kept_out_and_retried(ctx: Context) -> None:
    calls: list[str] = []
    summary = run_experiment(_toy(calls, fail={"n1"}), ctx)
    assert summary.measured == ["n0", "n2"] and "RuntimeError: candidate crashed" in summary.failed["n1"]
    run_experiment(_toy(calls), ctx)
    assert calls[-1:] == ["n1"]


def test_replot_with_nothing_stored_is_a_clear_error(ctx: Context) -> None:
    with pytest.raises(ReproduceError, match="no stored results of toy"):
        run_experiment(_toy([]), ctx, replot=True)


def test_a_slice_measures_only_its_units_and_reports_every_stored_one(ctx: Context) -> None:
    calls: list[str] = []
    first = run_experiment(_toy(calls), ctx, only=["n1", "n2"])
    assert calls == ["n1", "n2"] and first.measured == ["n1", "n2"]
    second = run_experiment(_toy(calls), ctx, only=["n[0-9]"])
    assert calls == ["n1", "n2", "n0"] and second.reused == ["n1", "n2"]
    with (ctx.out_dir / "toy.csv").open() as f:
        assert sorted(int(r["square"]) for r in csv.DictReader(f)) == [0, 1, 4]
    with pytest.raises(ReproduceError, match=r"no unit matches C3/\*; the units are n0, n1, n2"):
        run_experiment(_toy(calls), ctx, only=["C3/*"])


def test_modes_and_machines_are_kept_apart(ctx: Context, tmp_path: Path) -> None:
    calls: list[str] = []
    run_experiment(_toy(calls), ctx)
    full = Context(quick=False, threads=1, db_url=ctx.db_url, db=ctx.db, out_dir=ctx.out_dir,
                   log=io.StringIO())
    run_experiment(_toy(calls), full)
    assert len(calls) == 6  # a quick row never stands in for a full one
    other = tuning_db.open(tmp_path / "other.db")
    info = dict(machine_info(), cpu="Some Other CPU", llvm_cpu="othercpu")
    assert fingerprint(info) != fingerprint()
    other.store_experiment_result("toy", ctx.mode, "n0", fingerprint(info), {"square": 7}, machine_info=info)
    report = ctx.db.merge_from(other)
    other.close()
    assert report.experiment_results == 1
    assert len(ctx.db.experiment_results("toy", ctx.mode)) == 4
    assert len(ctx.db.experiment_results("toy", ctx.mode, fingerprint())) == 3
    summary = run_experiment(_toy(calls), ctx, all_machines=True)
    assert not summary.measured
    with (ctx.out_dir / "toy.csv").open() as f:
        assert {r["machine"] for r in csv.DictReader(f)} == {fingerprint(), fingerprint(info)}
    md = (ctx.out_dir / "toy.md").read_text()
    assert "## On Some Other CPU (othercpu" in md and md.count("## On ") == 2
    assert {p.name for p in summary.files} >= {"toy-m1.png", "toy-m2.png"}


def test_results_must_be_json_objects_without_nan(ctx: Context) -> None:
    with pytest.raises(tuning_db.TuningDBError, match="store None"):
        ctx.db.store_experiment_result("toy", "quick-t1", "u", "m", {"ms": float("nan")})
    with pytest.raises(tuning_db.TuningDBError, match="bad unit"):
        ctx.db.store_experiment_result("toy", "quick-t1", "", "m", {})
