"""Many writers at once, a writer killed mid-run, and bad URLs - on SQLite and PostgreSQL.

Writers are forked processes (no interpreter start-up, so the tests stay fast on two cores); each
opens its own connection after the fork, as separate tuning processes do, and appends "ok <id> <i>"
to its own file after every commit, so the parent knows exactly what was committed before a kill.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

import tuning_db
from tuning_db import TuningDBError

PROCS, PER_PROC = 8, 200
FORK = multiprocessing.get_context("fork")


def _writer(url: str, proc: int, count: int, out: str) -> None:
    with open(out, "w") as f:
        db = tuning_db.open(url)
        for i in range(count):
            wl = {"family": "dense", "shapes": [[1 + i % 7, 64], [64, 32]], "dtypes": ["float32", "float32"]}
            cost = 1e-3 * (1 + (proc * 31 + i) % 97)
            mid = db.record(f"wl-{i % 7}", "llvm -mcpu=test", {"proc": proc, "i": i}, [cost], workload=wl)
            f.write(f"ok {mid} {i}\n")
            f.flush()
        db.close()


def _spawn(url: str, proc: int, count: int, tmp: Path) -> tuple[multiprocessing.Process, Path]:
    out = tmp / f"writer{proc}.out"
    p = FORK.Process(target=_writer, args=(url, proc, count, str(out)))
    p.start()
    return p, out


def _committed(out: Path) -> list[int]:
    """Ids a writer reported as committed (complete lines only: it may die mid-write)."""
    text = out.read_text() if out.exists() else ""
    return [int(line.split()[1]) for line in text.split("\n")[:-1]]


def _all_configs(db: tuning_db.TuningDB, tmp: Path) -> Counter[tuple[int, int]]:
    """(proc, i) of every stored measurement, read through a JSONL export (not through best())."""
    out = tmp / "check.jsonl"
    db.export_jsonl(out)
    rows = map(json.loads, out.read_text().splitlines())
    return Counter((row["config"]["proc"], row["config"]["i"]) for row in rows)


def _integrity_ok(url: str) -> None:
    if not url.startswith("postgresql"):
        assert sqlite3.connect(url).execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.slow
def test_concurrent_writers_lose_and_duplicate_nothing(url: str, tmp_path: Path) -> None:
    tuning_db.open(url).close()  # the schema exists before the race (racing creation is tested below)
    writers = [_spawn(url, p, PER_PROC, tmp_path) for p in range(PROCS)]
    ids: list[int] = []
    for p, out in writers:
        p.join(timeout=120)
        assert p.exitcode == 0
        ids += _committed(out)
    assert len(ids) == len(set(ids)) == PROCS * PER_PROC
    db = tuning_db.open(url)
    assert _all_configs(db, tmp_path) == Counter({(p, i): 1 for p in range(PROCS) for i in range(PER_PROC)})
    assert db.stats()["measurements"] == PROCS * PER_PROC
    assert db.stats()["workloads"] == 7 and db.stats()["targets"] == 1
    _integrity_ok(url)


def test_racing_creation_of_a_new_database(url: str, tmp_path: Path) -> None:
    writers = [_spawn(url, p, 5, tmp_path) for p in range(4)]  # all open a log that does not exist yet
    for p, _ in writers:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert tuning_db.open(url).stats()["measurements"] == 20


def test_kill_minus_9_loses_no_committed_measurement(url: str, tmp_path: Path) -> None:
    tuning_db.open(url).close()
    victim, victim_out = _spawn(url, 0, 100_000, tmp_path)
    bystander, _ = _spawn(url, 1, 150, tmp_path)
    deadline = time.monotonic() + 60
    while len(_committed(victim_out)) < 120 and time.monotonic() < deadline and victim.is_alive():
        time.sleep(0.005)
    os.kill(victim.pid, signal.SIGKILL)  # mid-run: it is between or inside transactions right now
    victim.join(timeout=30)
    committed = _committed(victim_out)
    assert victim.exitcode == -signal.SIGKILL and len(committed) >= 120
    bystander.join(timeout=60)
    assert bystander.exitcode == 0

    db = tuning_db.open(url)  # opens cleanly
    seen = _all_configs(db, tmp_path)
    assert set(range(len(committed))) <= {i for (p, i) in seen if p == 0}  # every committed one is there
    assert all(n == 1 for n in seen.values())  # once
    assert {i for (p, i) in seen if p == 1} == set(range(150))
    db.record("after", "llvm", {"ok": True}, [1.0])  # and it is writable
    _integrity_ok(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql://tuner@127.0.0.1:1/log",
            r"cannot open tuning log postgresql\+psycopg://tuner@127.0.0.1:1/log: ",
        ),
        ("postgresql://tuner:secret@127.0.0.1:1/log", r"tuner:\*\*\*@127.0.0.1:1/log: .*refused"),
        ("mysql://x@h/db", "unsupported database URL scheme 'mysql'"),
        ("postgresql://:5432:/x", "malformed database URL"),
        ("postgresql:///nohost", "no host given"),
        ("/definitely/not/a/dir/log.sqlite", "directory /definitely/not/a/dir does not exist"),
    ],
)
def test_bad_urls_give_one_line_errors(url: str, message: str) -> None:
    with pytest.raises(TuningDBError, match=message) as exc:
        tuning_db.open(url)
    assert "\n" not in str(exc.value) and "secret" not in str(exc.value)


def test_cli_prints_one_line_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    from search.cli import main

    assert main(["db", "--db", "postgresql://tuner@127.0.0.1:1/log", "stats"]) == 1
    out, err = capsys.readouterr()
    assert (
        out == "" and len(err.strip().splitlines()) == 1 and err.startswith("autorelay db stats: cannot open")
    )


def _raw_connection(db: tuning_db.TuningDB) -> object:
    with db.engine.connect() as conn:
        return conn.connection.dbapi_connection


def test_a_forked_child_gets_its_own_connections(sqlite_url: str) -> None:
    db = tuning_db.open(sqlite_url)
    db.record("w", "llvm", {"who": "parent-before"}, [1.0])
    # Pooled now: a child that reused it would share the handle. Holding the object here also keeps its
    # address from being recycled for the child's new connection.
    parent_conn = _raw_connection(db)

    def child_work() -> None:
        db.record("w", "llvm", {"who": "child", "conn": id(_raw_connection(db))}, [1.0])

    child = FORK.Process(target=child_work)
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    db.record("w", "llvm", {"who": "parent-after"}, [1.0])
    configs = {r.config["who"]: r.config for r in db.history("w", "llvm")}
    assert sorted(configs) == ["child", "parent-after", "parent-before"]
    assert configs["child"]["conn"] != id(parent_conn)  # same address space, so equal ids would mean reuse
    _integrity_ok(sqlite_url)
