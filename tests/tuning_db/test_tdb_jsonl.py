"""JSON-lines export/import, merge and prune: nothing lost, nothing duplicated, bad lines reported."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import tuning_db
from tuning_db import JSONLImportError, TuningDBError

T = "llvm -mcpu=x"


def _fill(db: tuning_db.TuningDB, seed: int, n: int = 60, workloads: int = 4) -> None:
    rng = random.Random(seed)
    run = db.start_run(model=f"m{seed}", tuner="random", trial_budget=n)
    for _ in range(n):
        w = rng.randrange(workloads)
        wl = {"family": "dense", "shapes": [[w + 1, 16], [16, 8]], "dtypes": ["float32", "float32"]}
        if rng.random() < 0.1:
            db.record(f"w{w}", T, {"t": rng.randrange(20)}, [], error="boom", error_kind="runtime", run=run)
        else:
            db.record(
                f"w{w}",
                T,
                {"t": rng.randrange(20)},
                [rng.uniform(1e-4, 1e-3) for _ in range(2)],
                workload=wl,
                run=run,
                target_fingerprint={"cores": 2},
            )
    db.finish_run(run)


def _best_map(db: tuning_db.TuningDB, k: int = 3) -> dict[str, list[tuple[str, float]]]:
    return {
        f"w{w}": [(json.dumps(r.config), r.mean_cost) for r in db.best(f"w{w}", T, k=k)] for w in range(4)
    }


def _uids(db: tuning_db.TuningDB) -> list[str]:
    return sorted(r.uid for w in range(4) for r in db.history(f"w{w}", T))


def test_export_import_reproduces_best_configs(db: tuning_db.TuningDB, tmp_path: Path) -> None:
    _fill(db, 1)
    path = tmp_path / "log.jsonl"
    assert db.export_jsonl(path) == 60
    lines = path.read_text().splitlines()
    assert len(lines) == 60 and all(json.loads(line)["target"] == T for line in lines)
    fresh = tuning_db.open(tmp_path / "fresh.sqlite")
    report = fresh.import_jsonl(path)
    assert (report.lines, report.imported, report.duplicates, report.errors) == (60, 60, 0, [])
    assert _best_map(fresh) == _best_map(db)
    assert _uids(fresh) == _uids(db)
    assert fresh.stats()["errors"] == db.stats()["errors"]
    (run,) = fresh.runs()
    assert (run.model, run.status, run.measurements) == ("m1", "finished", 60)
    again = fresh.import_jsonl(path)  # idempotent
    assert (again.imported, again.duplicates) == (0, 60)
    assert fresh.stats()["measurements"] == 60


def test_corrupt_lines_are_reported_by_number_and_the_rest_imports(
    db: tuning_db.TuningDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuning_db import jsonl

    monkeypatch.setattr(jsonl, "CHUNK", 2)  # lines 1-2 are written before line 3 fails: strict must undo them
    _fill(db, 2, n=10)
    good = tmp_path / "good.jsonl"
    db.export_jsonl(good)
    rows = [json.loads(line) for line in good.read_text().splitlines()]
    for row in rows:
        del row["uid"]  # imported back into the same log (same backend) as new measurements
    lines = [json.dumps(row) for row in rows]
    bad_line = json.loads(lines[5])
    bad_line["costs"] = "fast"
    lines[2] = lines[2][: len(lines[2]) // 2]  # truncated JSON: line 3
    lines[5] = json.dumps(bad_line)  # wrong type: line 6
    lines.insert(8, "")  # blank lines are fine: the next bad line is number 10
    lines.insert(9, "[1, 2]")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(JSONLImportError, match=r"line 3: invalid JSON") as exc:
        db.import_jsonl(bad, strict=True)
    assert [n for n, _ in exc.value.report.errors] == [3, 6, 10]
    assert db.stats()["measurements"] == 10  # strict: nothing imported (rolled back)
    report = db.import_jsonl(bad)
    assert [n for n, _ in report.errors] == [3, 6, 10]
    assert "'costs' must be a list of numbers" in report.errors[1][1]
    assert report.imported == 8 and db.stats()["measurements"] == 18


def test_numbers_the_columns_cannot_hold_are_refused_by_line(sqlite_url: str, tmp_path: Path) -> None:
    """Integers beyond a column's range and a run's unreadable times are reported at their line and
    field, as any other bad value is, instead of failing the database write."""
    db = tuning_db.open(sqlite_url)
    row = {"workload_key": "w", "target": T, "config": {"k": 1}, "costs": [1.0]}
    lines = [dict(row, space_index=10**20), dict(row, space_index=-3),
             dict(row, run={"uid": "r1", "trial_budget": 10**12}),
             dict(row, run={"uid": "r2", "started_at": "yesterday"}), dict(row, space_index=7)]
    f = tmp_path / "big.jsonl"
    f.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = db.import_jsonl(f)
    assert [n for n, _ in report.errors] == [1, 2, 3, 4]
    said = [text for _, text in report.errors]
    assert "'space_index' must be in [0, 2**63)" in said[0] and "got -3" in said[1]
    assert "'run.trial_budget' must be in [0, 2**31)" in said[2]
    assert "'run.started_at' is not an ISO 8601 time: 'yesterday'" in said[3]
    assert report.imported == 1 and db.stats()["measurements"] == 1


def test_missing_file_and_missing_field(sqlite_url: str, tmp_path: Path) -> None:
    db = tuning_db.open(sqlite_url)
    with pytest.raises(TuningDBError, match=r"cannot read .*nope.jsonl"):
        db.import_jsonl(tmp_path / "nope.jsonl")
    f = tmp_path / "f.jsonl"
    f.write_text(json.dumps({"workload_key": "w", "target": T, "config": {}}) + "\n")
    assert db.import_jsonl(f).errors == [(1, "missing field 'costs'")]


def test_merge_loses_nothing_and_duplicates_nothing(url: str, tmp_path: Path) -> None:
    a = tuning_db.open(url)
    b = tuning_db.open(tmp_path / "b.sqlite")
    _fill(a, 3)
    _fill(b, 4)
    shared = tmp_path / "shared.jsonl"
    a.export_jsonl(shared)
    b.import_jsonl(shared)  # b already holds all of a's measurements as well as its own
    expected = sorted(set(_uids(a)) | set(_uids(b)))
    report = a.merge_from(b)
    assert (report.imported, report.duplicates) == (60, 60)
    assert _uids(a) == expected and len(expected) == 120
    assert a.merge_from(str(tmp_path / "b.sqlite")).imported == 0  # again: nothing new
    assert len(a.runs()) == 2
    assert _best_map(a) == _best_map(b)


def test_prune_keeps_the_k_best_configs(db: tuning_db.TuningDB) -> None:
    _fill(db, 5, n=80)
    before = _best_map(db, k=2)
    configs_before = {w: {json.dumps(r.config) for r in db.history(w, T)} for w in before}
    errors_before = {w: sorted(json.dumps(r.config) for r in db.history(w, T) if r.error_kind)
                     for w in before}
    assert any(errors_before.values())
    done = db.prune(2, dry_run=True)
    assert db.stats()["measurements"] == 80
    real = db.prune(2)
    assert real == done
    assert _best_map(db, k=2) == before
    for w, best in before.items():
        kept = {json.dumps(r.config) for r in db.history(w, T) if not r.error_kind}
        assert kept == {c for c, _ in best}
        assert kept <= configs_before[w]
        # failures stay: a resumed tuner must not retry a config that crashed
        assert sorted(json.dumps(r.config) for r in db.history(w, T) if r.error_kind) == errors_before[w]
    assert db.stats()["measurements"] == 80 - done["measurements"]
    db.prune(2, keep_errors=False)
    for w, best in before.items():  # now only the failures of the K best configs themselves remain
        assert {json.dumps(r.config) for r in db.history(w, T)} == {c for c, _ in best}
    with pytest.raises(TuningDBError, match="at least 1"):
        db.prune(0)


def test_export_text_matches_the_rows_merge_reads(db: tuning_db.TuningDB, tmp_path: Path) -> None:
    """Export writes stored JSON verbatim (fast path); merge reads parsed rows: they must agree."""
    from tuning_db.jsonl import export_rows

    _fill(db, 6, n=20)
    db.register_workload("described-later", {"family": "x", "shapes": [[1]]})
    path = tmp_path / "e.jsonl"
    db.export_jsonl(path)
    assert [json.loads(line) for line in path.read_text().splitlines()] == list(export_rows(db.engine))
