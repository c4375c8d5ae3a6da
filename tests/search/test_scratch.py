"""Scratch folders a killed tuner left behind are swept at the next start, and only those."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from search.measure import Measurer
from search.measure.scratch import PREFIX, sweep_stale

_CHILD = """
import sys
from search.measure import Measurer
m = Measurer(build_workers=1)
print(m.cache_dir, flush=True)
sys.stdin.read()  # until killed
"""


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_kill_9_leftover_is_removed_at_the_next_start(tmp_path: Path, monkeypatch) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, text=True, cwd=Path(__file__).resolve().parents[2])
    left = Path(child.stdout.readline().strip())  # the event: the child's folder exists
    (left / "kernel.o").write_bytes(b"x")
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert left.is_dir() and left.parent == tmp_path
    alive = tmp_path / f"{PREFIX}{os.getpid()}-live"  # owned by a live process (this one)
    legacy = tmp_path / f"{PREFIX}nopid"  # an older version's name: owner unknown
    other = tmp_path / "someone-else"
    for d in (alive, legacy, other):
        d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with Measurer(build_workers=1) as m:
        mine = Path(m.cache_dir)
        assert not left.exists()
        assert alive.is_dir() and legacy.is_dir() and other.is_dir() and mine.is_dir()
    assert not mine.exists()


def test_sweep_removes_only_dead_owners(tmp_path: Path) -> None:
    dead = tmp_path / f"{PREFIX}{_dead_pid()}-abc"
    live = tmp_path / f"{PREFIX}{os.getpid()}-abc"
    dead.mkdir()
    live.mkdir()
    assert sweep_stale(str(tmp_path)) == [str(dead)]
    assert live.is_dir()
