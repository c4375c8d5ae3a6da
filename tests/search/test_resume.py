"""kill -9 in the middle of tuning, rerun the same command: it continues from the log and measures
no logged config again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from search_helpers import dense_task

import tuning_db
from search.tune import REMEASURE_TAG

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def _trials(url: str) -> list:
    task = dense_task(16, 24, 32)
    with tuning_db.open(url) as db:
        return [r for r in db.history(task.key, str(task.target)) if r.runner_version != REMEASURE_TAG]


def _start(url: str, trials: int) -> subprocess.Popen:
    path = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    cmd = [sys.executable, str(HERE / "resume_script.py"), url, str(trials)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_kill9_then_resume_measures_nothing_twice(tmp_path):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    tuning_db.open(url).close()
    total = 12
    proc = _start(url, total)
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None and len(_trials(url)) < 4:
        time.sleep(0.2)
    assert proc.poll() is None, f"tuner ended before it could be killed: {proc.stdout.read()}"
    os.killpg(proc.pid, signal.SIGKILL)  # the tuner and its measurement workers, mid-tune
    proc.wait()
    before = _trials(url)
    assert 4 <= len(before) < total
    proc2 = _start(url, total)
    out, _ = proc2.communicate(timeout=120)
    assert proc2.returncode == 0, out
    assert f"resumed={len(before)}" in out
    after = _trials(url)
    keys = Counter(repr(sorted(r.config["knobs"].items())) for r in after)
    assert len(after) == total and max(keys.values()) == 1  # every config measured exactly once
    assert {r.id for r in before} <= {r.id for r in after}
