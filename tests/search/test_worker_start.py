"""A measurement worker that cannot start is an infrastructure failure, not the candidate's: it is
retried, and if it never starts the tuner stops with one line and logs nothing for the candidates."""

from __future__ import annotations

import pytest
from search_helpers import FailsFirstStart, dense_task, dies_at_start

import tuning_db
from search.measure import Measurer, TimingSettings
from search.measure.workers import START_TRIES, Worker, WorkerStartError
from search.tune import tune_task
from search.tuners import make_tuner

FAST = TimingSettings(number=1, repeat=2, min_repeat_ms=2.0, warmup=1, timeout=10.0)


def test_a_failed_start_is_retried(tmp_path) -> None:
    w = Worker("flaky", serve=FailsFirstStart(str(tmp_path / "started-once")))
    try:
        out = w.call(pow, (2, 10), timeout=30)
    finally:
        w.close()
    assert (out.status, out.value) == ("ok", 1024)
    assert (tmp_path / "started-once").exists() and w.starts == 1


def test_a_worker_that_never_starts_is_one_line() -> None:
    w = Worker("broken", serve=dies_at_start)
    with pytest.raises(WorkerStartError) as info:
        w.call(pow, (2, 10), timeout=30)
    msg = str(info.value)
    assert "\n" not in msg and "broken" in msg and f"{START_TRIES} tries" in msg and "status 3" in msg


def test_tuning_logs_no_candidate_when_workers_cannot_start_and_retries_them_later(tmp_path) -> None:
    task = dense_task(16, 24, 32)
    db = tuning_db.open(tmp_path / "log.sqlite")
    with Measurer(build_workers=1, settings=FAST) as m:
        m.builder.pool.workers[0].serve = dies_at_start
        with pytest.raises(WorkerStartError):
            tune_task(task, make_tuner("random", task, seed=5), 2, db, m, batch=2, top_k=1, rounds=2)
    assert db.history(task.key, str(task.target)) == []  # no candidate blamed for the failure
    with Measurer(build_workers=1, settings=FAST) as m:
        res = tune_task(task, make_tuner("random", task, seed=5), 2, db, m, batch=2, top_k=1, rounds=2)
    rows = [r for r in db.history(task.key, str(task.target)) if r.runner_version != tuning_db.INTERLEAVED]
    assert res.trials == 2 and len(rows) == 2 and all(r.error_kind is None for r in rows)


def test_the_cli_stops_with_one_line_and_closes_the_run(tmp_path, monkeypatch, capsys) -> None:
    from search.cli import main
    from search.measure import workers

    monkeypatch.setattr(workers.Worker, "_try_start", lambda self: "injected: fork failed")
    log = tmp_path / "log.sqlite"
    rc = main(["tune", "--model", "mlp", "--trials", "4", "--tuner", "random", "--db", str(log),
               "--no-compare", "--threads", "1", "--pipeline", "default"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autorelay tune:")]
    assert rc == 1 and len(err) == 1 and "cannot start" in err[0] and "injected: fork failed" in err[0]
    with tuning_db.open(log) as db:
        assert db.stats()["measurements"] == 0
        assert [r.status for r in db.runs()] == ["interrupted"]
