"""The measurer's scratch folder (`autorelay-measure-<pid>-<random>` in the system temp folder) and
the sweep that removes those a killed tuner left behind.

`Measurer.close` removes its own folder, but kill -9 or an unhandled SIGTERM skips it and the
compiled objects stay forever. The owner's process id is part of the name, so a later tuner can
tell a stale folder (owner gone) from one a live tuner is using — on this machine or another user's.
A folder whose name carries no pid (an older version's) is left alone: its owner cannot be known.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from tuning_db.processes import process_alive

PREFIX = "autorelay-measure-"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-")


def make_scratch_dir() -> str:
    """A fresh scratch folder owned by this process; stale ones of dead owners are swept first."""
    sweep_stale()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def sweep_stale(root: str | None = None) -> list[str]:
    """Remove every `autorelay-measure-<pid>-*` folder under `root` (default: the temp folder)
    whose owning process no longer exists; returns the removed paths."""
    root = root or tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    removed = []
    for name in names:
        m = _OWNED.match(name)
        path = os.path.join(root, name)
        if m is None or process_alive(int(m.group(1))) or not os.path.isdir(path) or os.path.islink(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed

