"""Whether a process of this machine still exists: how a killed tuner's runs, leases and scratch
folders are recognised as abandoned."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 probes without sending)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
