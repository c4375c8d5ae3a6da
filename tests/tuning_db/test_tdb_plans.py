"""The `quantization_plans` table: storing measured plans, the two queries `--precision plan` and the
search ask, and the version-3 -> 4 upgrade of an existing log (its rows untouched)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine

import tuning_db
from tuning_db import TuningDBError
from tuning_db.migrate import create_schema

TARGET = "llvm -mcpu=znver5 -threads=2"


def _store(db: tuning_db.TuningDB, plan: dict, latency: float, drop: float, **kw) -> int:
    fields = {"calibration": "max", "latency_ms": latency, "metric": "top1", "accuracy": 0.9 - drop,
              "accuracy_drop": drop, "fp32_accuracy": 0.9, "fp32_latency_ms": 10.0,
              "latency_spread_ms": (latency * 0.9, latency * 1.1), **kw}
    return db.store_plan("model-a", TARGET, plan, model="net", **fields)


def test_store_and_query_plans(db: tuning_db.TuningDB) -> None:
    rows = [({"default": "fp32"}, 10.0, 0.0), ({"default": "int8"}, 4.0, 0.05),
            ({"default": "int8", "precisions": {"conv2d_0": "fp32"}}, 5.0, 0.01)]
    ids = [_store(db, p, lat, drop, max_drop=0.02, chosen=(lat == 5.0)) for p, lat, drop in rows]
    assert len(set(ids)) == 3
    got = db.plans("model-a")
    # oracle: the rows as given, sorted by latency
    assert [(r.plan, r.latency_ms, r.accuracy_drop) for r in got] == sorted(rows, key=lambda r: r[1])
    assert got[0].latency_spread_ms == pytest.approx((3.6, 4.4)) and got[0].speedup == pytest.approx(2.5)
    assert got[0].target == TARGET and got[0].model == "net" and got[0].metric == "top1"
    # the same target spelled with its options in another order is the same target
    assert len(db.plans("model-a", "llvm -threads=2 -mcpu=znver5")) == 3
    assert db.plans("model-a", "llvm -mcpu=znver3") == [] and db.plans("model-b") == []

    def fastest_within(bound: float) -> float:
        return min(lat for _, lat, drop in rows if drop <= bound)

    for bound in (0.0, 0.01, 0.02, 0.1):
        assert db.best_plan("model-a", TARGET, max_drop=bound).latency_ms == fastest_within(bound)
    assert db.best_plan("model-a", TARGET, max_drop=-1.0) is None
    # fastest against its own rounds' fp32: a lower median from a quieter moment is not faster
    _store(db, {"default": "int8", "precisions": {"conv2d_1": "fp32"}}, 3.0, 0.0, fp32_latency_ms=2.0)
    assert db.best_plan("model-a", TARGET, max_drop=0.0).latency_ms == 10.0  # 1.0x beats 1.5x
    assert db.best_plan("model-a", TARGET, max_drop=0.1).latency_ms == 4.0  # 0.4x
    assert db.best_plan("model-a", TARGET).latency_ms == 5.0  # no bound: the search's pick
    # a later search's pick replaces the earlier one
    _store(db, {"default": "int8", "precisions": {"dense_0": "fp32"}}, 6.0, 0.0, chosen=True)
    assert db.best_plan("model-a", TARGET).plan["precisions"] == {"dense_0": "fp32"}
    assert sum(r.chosen for r in db.plans("model-a")) == 1
    assert db.best_plan("model-b", TARGET) is None
    assert db.plan_targets("model-a") == [TARGET] and db.plan_targets("model-b") == []


def test_db_plans_command(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from search.cli import main

    assert main(["db", "--db", sqlite_url, "plans"]) == 1
    assert capsys.readouterr().err == "no quantization plans stored\n"
    with tuning_db.open(sqlite_url) as db:
        _store(db, {"default": "int8", "precisions": {"a": "int8", "b": "fp32"}}, 2.5, 0.01, chosen=True)
        _store(db, {"default": "fp32", "precisions": {"a": "fp32", "b": "fp32"}}, 4.0, 0.0)
    assert main(["db", "--db", sqlite_url, "plans", "--target", TARGET]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("*") and "2.5 ms" in lines[2] and "1/2" in lines[2]
    assert "4 ms" in lines[3] and "0/2" in lines[3]


def test_bad_plans_are_refused(db: tuning_db.TuningDB) -> None:
    with pytest.raises(TuningDBError, match="metric must be one of top1, rel_error"):
        _store(db, {}, 1.0, 0.0, metric="top5")
    with pytest.raises(TuningDBError, match="latency_ms must be positive"):
        _store(db, {}, 0.0, 0.0)
    with pytest.raises(TuningDBError, match="accuracy_drop must be finite"):
        _store(db, {}, 1.0, float("nan"), accuracy=0.5)
    with pytest.raises(TuningDBError, match="the plan must be a JSON object"):
        _store(db, ["int8"], 1.0, 0.0)  # type: ignore[arg-type]
    assert db.plans() == []


def test_version_3_log_is_upgraded_in_place(tmp_path: Path) -> None:
    """A log written by schema version 3 (made with that version's own table definitions) gains the
    plans table; its measurements and leases stay as they were (oracle: sqlite3 on the file)."""
    path = tmp_path / "v3.sqlite"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        create_schema(conn, 3)
    engine.dispose()
    # a measurement written the way version 3 wrote it, with plain SQL
    con = sqlite3.connect(path)
    assert con.execute("SELECT version FROM schema_info").fetchall() == [(3,)]
    assert "quantization_plans" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.execute("INSERT INTO targets (name, kind, created_at) VALUES ('llvm', 'llvm', 0)")
    con.execute("INSERT INTO workloads (key, family, workload, created_at) VALUES ('w', 'dense', NULL, 0)")
    con.execute("INSERT INTO configs (workload_id, config_hash, config) VALUES (1, 'h', '{\"t\":4}')")
    con.execute("INSERT INTO measurements (uid, workload_id, target_id, config_id, costs, mean_cost, "
                "recorded_at) VALUES ('u1', 1, 1, 1, '[0.002]', 0.002, 0)")
    con.commit()
    before = con.execute("SELECT * FROM measurements").fetchall()
    con.close()

    db = tuning_db.open(path)
    assert db.upgraded_from == 3
    assert [(r.config, r.mean_cost) for r in db.best("w", "llvm")] == [({"t": 4}, 0.002)]
    _store(db, {"default": "int8"}, 2.0, 0.0, chosen=True)
    assert db.best_plan("model-a", TARGET).latency_ms == 2.0
    db.close()
    con = sqlite3.connect(path)
    assert con.execute("SELECT version FROM schema_info").fetchall() == [(tuning_db.SCHEMA_VERSION,)]
    assert con.execute("SELECT * FROM measurements").fetchall() == before
    indexes = {r[1] for r in con.execute("PRAGMA index_list(quantization_plans)")}
    assert "ix_quantization_plans_model" in indexes
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    con.close()
    assert tuning_db.open(path).upgraded_from is None
