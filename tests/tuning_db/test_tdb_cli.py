"""`autorelay db ...` through the real console entry point (search.cli.main)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tuning_db
from search.cli import main

T = "llvm -mcpu=x"


@pytest.fixture
def logged(tmp_path: Path) -> str:
    path = str(tmp_path / "cli.sqlite")
    db = tuning_db.open(path)
    for i, cost in enumerate([3e-3, 1e-3, 2e-3, 5e-6]):
        db.record("wk", T, {"tile": i}, [cost, cost])
    db.record("wk", T, {"tile": 9}, [], error="timeout", error_kind="timeout")
    db.close()
    return path


def test_stats_and_best_tables(logged: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "--db", logged, "stats"]) == 0
    out = capsys.readouterr().out
    header, rule, row = out.splitlines()[1:4]
    assert header.split() == ["measurements", "workloads", "targets", "configs", "runs", "errors"]
    assert set(rule.replace(" ", "")) == {"-"} and row.split() == ["5", "1", "1", "5", "0", "1"]
    assert main(["db", "best", "--db", logged, "--workload", "wk", "--target", T, "-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["rank", "mean", "std", "repeats"]
    assert [line.split()[1:3] for line in lines[2:]] == [["5.000", "us"], ["1.000", "ms"], ["2.000", "ms"]]
    assert lines[2].endswith('{"tile": 3}')
    assert main(["db", "best", "--db", logged, "--workload", "wk", "--target", T, "-k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == {"tile": 3}
    assert main(["db", "best", "--db", logged, "--workload", "nope", "--target", T]) == 1
    assert "no successful measurement of workload 'nope'" in capsys.readouterr().err


def test_export_import_merge_prune(logged: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.jsonl"
    assert main(["db", "--db", logged, "export", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 5
    other = str(tmp_path / "other.sqlite")
    assert main(["db", "--db", other, "import", str(out)]) == 0
    assert "5 imported" in capsys.readouterr().out
    with out.open("a") as f:
        f.write('{"workload_key": "wk", "target": \n')
    assert main(["db", "--db", other, "import", "--strict", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{out}:6: invalid JSON" in err and "nothing imported (strict)" in err
    assert main(["db", "--db", other, "import", str(out)]) == 1  # rest imports (all duplicates here)
    assert "5 already present, 1 rejected" in capsys.readouterr().out
    assert main(["db", "--db", other, "merge", logged]) == 0
    assert "merged 0 new measurements" in capsys.readouterr().out
    assert main(["db", "--db", logged, "prune", "--keep-best", "2", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split() == ["would", "delete", "2", "2"]  # not the failure
    assert main(["db", "--db", logged, "prune", "--keep-best", "2"]) == 0
    assert tuning_db.open(logged).stats()["measurements"] == 3
    assert main(["db", "--db", logged, "prune", "--keep-best", "2", "--drop-errors"]) == 0
    assert tuning_db.open(logged).stats()["measurements"] == 2


def test_experiment_results_travel_as_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`export --results` / `import --results`: every row with its uid, machine and code version;
    reading the file again adds nothing; a bad line is named by its number and the rest is read."""
    src = str(tmp_path / "a.sqlite")
    db = tuning_db.open(src)
    for unit in ("C1/xgb/s0", "C2/xgb/s0"):
        db.store_experiment_result("curves", "full-t2", unit, "m1", {"gflops": [1.5, 2.0]},
                                   machine_info={"cpu": "x"}, code_version="0.1+abc")
    db.store_experiment_result("other", "quick-t1", "u", "m1", {"x": 1})
    db.close()
    out = tmp_path / "r.jsonl"
    assert main(["db", "--db", src, "export", "--results", "--experiment", "curves", str(out)]) == 0
    assert "exported 2 experiment results" in capsys.readouterr().out
    dst = str(tmp_path / "b.sqlite")
    assert main(["db", "--db", dst, "import", "--results", str(out)]) == 0
    assert "imported 2 experiment results" in capsys.readouterr().out
    rows = tuning_db.open(dst).experiment_results("curves", "full-t2")
    assert [(r.unit, r.result, r.machine_info, r.code_version) for r in rows] == [
        (u, {"gflops": [1.5, 2.0]}, {"cpu": "x"}, "0.1+abc") for u in ("C1/xgb/s0", "C2/xgb/s0")]
    with out.open("a") as f:
        f.write('{"uid": "z", "experiment": "curves"}\n')
    assert main(["db", "--db", dst, "import", "--results", str(out)]) == 1
    captured = capsys.readouterr()
    assert "0 experiment results" in captured.out and "2 already present, 1 bad lines" in captured.out
    assert f"{out}:3: missing field(s) mode, unit" in captured.err
    assert main(["db", "--db", src, "export", "--experiment", "curves", str(out)]) == 1
    assert "--experiment applies to --results only" in capsys.readouterr().err


def test_bad_usage_fails(logged: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["db", "--db", logged, "prune"])
    assert exc.value.code == 2
    assert "required: --keep-best" in capsys.readouterr().err
    assert main(["db", "--db", logged, "prune", "--keep-best", "0"]) == 1
    assert capsys.readouterr().err.strip() == "autorelay db prune: --keep-best must be at least 1, got 0"
    assert main(["db", "--db", "mysql://a/b", "stats"]) == 1
    assert main(["db", "--db", logged, "export", str(Path(logged).parent / "no" / "x.jsonl")]) == 1
    assert "cannot write" in capsys.readouterr().err


def test_best_names_the_config_build_uses_after_interleaved_rounds(
    logged: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "--db", logged, "best", "--workload", "wk", "--target", T]) == 0
    assert "build uses" not in capsys.readouterr().out  # never re-measured: the fastest is used
    with tuning_db.open(logged) as db:
        db.record("wk", T, {"tile": 3}, [9e-6, 9e-6], runner_version=tuning_db.INTERLEAVED)
        db.record("wk", T, {"tile": 1}, [8e-6, 8e-6], runner_version=tuning_db.INTERLEAVED)
    assert main(["db", "--db", logged, "best", "--workload", "wk", "--target", T]) == 0
    out = capsys.readouterr().out
    assert 'build uses (won the interleaved re-measurement, median 8.000 us): {"tile": 1}' in out


@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "--model", "mlp", "--trials", "4", "--timeout", "0"],
        ["tune", "--model", "mlp", "--trials", "4", "--timeout", "-1"],
        ["tune", "--model", "mlp", "--trials", "4", "--timeout", "nan"],
        ["tune", "--model", "mlp", "--trials", "0"],
        ["tune", "--model", "mlp", "--trials", "4", "--seed", "-3"],
        ["tune", "--model", "mlp", "--trials", "4", "--threads", "0"],
        ["tune", "--model", "mlp", "--trials", "4", "--image-size", "-8"],
        ["run", "--model", "mlp", "--repeat", "0"],
        ["db", "best", "--workload", "wk", "--target", T, "-k", "0"],
    ],
)
def test_numeric_options_out_of_range_are_refused_before_any_work(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused by the parser (exit 2, one error line naming the option); the log is never created,
    so no candidate was logged as a timeout."""
    log = tmp_path / "never.sqlite"
    with pytest.raises(SystemExit) as exc:
        main([*argv[:1], *(["--db", str(log)] if argv[0] == "db" else []), *argv[1:],
              *([] if argv[0] == "db" else ["--db", str(log)])])
    assert exc.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    option = next(a for a in reversed(argv[:-1]) if a.startswith("-"))
    assert len(err) == 1 and f"argument {option}" in err[0], err
    assert not log.exists()


def test_best_k_below_one_is_refused_by_the_api(logged: str) -> None:
    with pytest.raises(tuning_db.TuningDBError, match="k must be at least 1"):
        tuning_db.open(logged).best("wk", T, k=0)
