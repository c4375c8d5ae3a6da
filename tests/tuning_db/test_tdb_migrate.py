"""Schema versioning: a version-1 file (committed under data/) is upgraded in place; newer is refused."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import update

import tuning_db
from tuning_db import SchemaVersionError, TuningDBError, schema

V1 = Path(__file__).parent / "data" / "v1.sqlite"


def _raw(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_v1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(V1, path)
    assert _raw(path, "SELECT version FROM schema_info") == [(1,)]
    # the oracle for best(): computed straight from the v1 rows with plain SQL, before the upgrade
    expected = _raw(
        path,
        """
        SELECT c.config, MIN(m.mean_cost) AS best FROM measurements m JOIN configs c ON c.id = m.config_id
        JOIN workloads w ON w.id = m.workload_id JOIN targets t ON t.id = m.target_id
        WHERE w.key = 'conv-56' AND t.name = 'llvm -mcpu=skylake-avx512' AND m.mean_cost IS NOT NULL
        GROUP BY c.id ORDER BY best LIMIT 3""",
    )
    n_before = _raw(path, "SELECT COUNT(*) FROM measurements")[0][0]

    db = tuning_db.open(path)
    assert db.upgraded_from == 1
    assert _raw(path, "SELECT version FROM schema_info") == [(tuning_db.SCHEMA_VERSION,)]
    families = dict(_raw(path, "SELECT key, family FROM workloads"))
    assert families == {"conv-56": "conv2d", "conv-14": "conv2d", "dense-1": "dense", "opaque": None}
    indexes = {row[1] for row in _raw(path, "PRAGMA index_list(measurements)")}
    assert {"ix_measurements_best", "ix_measurements_config"} <= indexes
    assert "ix_measurements_wt" not in indexes
    assert _raw(path, "SELECT name FROM sqlite_master WHERE name = 'leases'") == [("leases",)]  # v3
    assert _raw(path, "SELECT COUNT(*) FROM quantization_plans") == [(0,)]  # v4
    assert _raw(path, "PRAGMA integrity_check") == [("ok",)]

    got = db.best("conv-56", "llvm -mcpu=skylake-avx512", k=3)
    assert [(r.config, r.mean_cost) for r in got] == [(json.loads(c), b) for c, b in expected]
    assert db.stats()["measurements"] == n_before and db.stats()["errors"] == 4
    # the new family column drives transfer: an unseen 28x28 conv borrows from a logged conv
    src = db.schedule_source("llvm -mcpu=skylake-avx512")
    wl = {"family": "conv2d", "shapes": [[1, 64, 28, 28], [64, 64, 3, 3]], "dtypes": ["float32"] * 2}
    assert src.lookup("conv-28", "llvm -mcpu=skylake-avx512", workload=wl).config is not None
    assert src.last_result.kind == "transferred"
    db.record("conv-56", "llvm -mcpu=skylake-avx512", {"tile": 32}, [1e-9])  # writable after upgrade
    db.close()
    again = tuning_db.open(path)
    assert again.upgraded_from is None and again.stats()["measurements"] == n_before + 1


def test_newer_schema_is_refused(sqlite_url: str) -> None:
    tuning_db.open(sqlite_url).close()
    con = sqlite3.connect(sqlite_url)
    con.execute("UPDATE schema_info SET version = 99")
    con.commit()
    con.close()
    with pytest.raises(SchemaVersionError, match="schema version 99, newer than this tuning_db supports"):
        tuning_db.open(sqlite_url)


@pytest.mark.postgres
def test_newer_schema_is_refused_on_postgres(pg_url: str) -> None:
    db = tuning_db.open(pg_url)
    with db.engine.begin() as conn:
        conn.execute(update(schema.schema_info).values(version=schema.CURRENT_VERSION + 1))
    db.close()
    with pytest.raises(SchemaVersionError, match=f"schema version {schema.CURRENT_VERSION + 1}"):
        tuning_db.open(pg_url)


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("this is not a database\n" * 100)
    with pytest.raises(TuningDBError, match=r"cannot open tuning log .*notes.txt: file is not a database"):
        tuning_db.open(junk)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE measurements (x INTEGER)")
    con.close()
    with pytest.raises(TuningDBError, match=r"not a tuning log: .* measurements but no schema_info"):
        tuning_db.open(other)


def test_another_programs_database_is_refused_and_left_byte_identical(tmp_path: Path) -> None:
    """`--db` pointing at an unrelated SQLite file: refused in one line, and the file is exactly as
    it was (no WAL switch, no tables added) — oracle: its bytes and sqlite3's own view of it."""
    from search.cli import main

    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE people (name TEXT)")
    con.execute("INSERT INTO people VALUES ('ada')")
    con.commit()
    con.close()
    before = other.read_bytes()
    with pytest.raises(TuningDBError, match=r"not a tuning log: .*people but no schema_info"):
        tuning_db.open(other)
    assert main(["db", "--db", str(other), "stats"]) == 1
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]  # no -wal / -shm left
    con = sqlite3.connect(other)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["people"]
    con.close()


def test_a_new_log_is_switched_to_wal_once_known(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    tuning_db.open(path).close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_version_5_log_gains_the_experiment_results_table(old_log) -> None:
    path = old_log(5)
    assert "experiment_results" not in {r[0] for r in _raw(path, "SELECT name FROM sqlite_master")}
    with tuning_db.open(str(path)) as db:
        assert db.upgraded_from == 5
        db.store_experiment_result("rnns", "quick-t1", "lstm", "m-1c-abcd", {"vm_us": 12.5})
        assert [r.result for r in db.experiment_results("rnns", "quick-t1")] == [{"vm_us": 12.5}]
    assert _raw(path, "SELECT version FROM schema_info") == [(tuning_db.SCHEMA_VERSION,)]
