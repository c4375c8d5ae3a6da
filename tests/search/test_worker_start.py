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


_ORPHAN_SCRIPT = """
import os, signal, sys, threading, time
from search.measure.workers import Worker

def main():
    w = Worker("orphan-check")
    w.call(os.getpid, (), timeout=60)  # started and ready
    print(w.pid, flush=True)
    threading.Thread(target=w.call, args=(time.sleep, (120,), 180), daemon=True).start()
    time.sleep(1.0)  # the worker is inside its long job
    os.kill(os.getpid(), signal.SIGKILL)  # the tuner dies without closing anything

if __name__ == "__main__":
    main()
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "getppid") or __import__("sys").platform != "linux",
                    reason="the parent-death signal is Linux's")
def test_a_busy_worker_dies_with_its_killed_tuner(tmp_path) -> None:
    """A tuner killed outright must not leave workers running out their jobs at full speed."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = tmp_path / "tuner.py"
    script.write_text(_ORPHAN_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    paths = [str(root), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = tmp_path / "out.txt"
    with open(out, "w") as sink:  # a file, not a pipe: the orphans would hold a pipe open
        subprocess.run([sys.executable, str(script)], stdout=sink, stderr=subprocess.STDOUT, timeout=120,
                       cwd=root, env=env)
    words = out.read_text().split()
    assert words and words[0].isdigit(), out.read_text()
    pid = int(words[0])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, 9)
    pytest.fail(f"worker {pid} outlived its killed tuner by 15 s")
