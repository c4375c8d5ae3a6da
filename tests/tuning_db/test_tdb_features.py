"""Feature vectors in the log (`tuning_db.features`): stored by (workload, target, version, config
hash), read back exactly, never overwritten, and added to an older log by its upgrade."""

from __future__ import annotations

import sqlite3

import tuning_db

T = "llvm -mcpu=znver3 -threads=2"


def test_vectors_round_trip_by_workload_target_and_version(url: str) -> None:
    a, b = tuning_db.config_key({"tile": 8}), tuning_db.config_key({"tile": 16})
    with tuning_db.open(url) as db:
        assert db.store_features("dense-1", T, "r1", {a: (0.0, 1.5, 1 / 3), b: None}) == 2
        got = db.features("dense-1", T, "r1")
        assert got == {a: (0.0, 1.5, 1 / 3), b: None}  # exact floats; None: an illegal schedule
        # the same target spelled with its options in another order is the same target
        assert db.features("dense-1", "llvm -threads=2 -mcpu=znver3", "r1") == got
        assert db.features("dense-1", T, "r2") == {}  # another feature definition reads nothing
        assert db.features("dense-2", T, "r1") == {}
        assert db.features("dense-1", "llvm -mcpu=znver5 -threads=2", "r1") == {}
        db.store_features("dense-1", T, "r1", {a: (9.0,)})  # a stored key keeps its row
        assert db.features("dense-1", T, "r1")[a] == (0.0, 1.5, 1 / 3)


def test_config_key_ignores_the_order_of_knobs() -> None:
    assert tuning_db.config_key({"a": 1, "b": [2, 3]}) == tuning_db.config_key({"b": [2, 3], "a": 1})
    assert tuning_db.config_key({"a": 1}) != tuning_db.config_key({"a": 2})


def test_version_6_log_gains_the_config_features_table(old_log) -> None:
    path = old_log(6)
    with tuning_db.open(str(path)) as db:
        assert db.upgraded_from == 6
        db.store_features("w", T, "r1", {tuning_db.config_key({"x": 1}): (1.0, 2.0)})
        assert list(db.features("w", T, "r1").values()) == [(1.0, 2.0)]
    con = sqlite3.connect(path)
    try:
        assert con.execute("SELECT version FROM schema_info").fetchall() == [(tuning_db.SCHEMA_VERSION,)]
    finally:
        con.close()
