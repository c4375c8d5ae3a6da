"""Which machine measured a row, and with which code.

The fingerprint names the *kind* of machine: the CPU model, LLVM's name for it, its feature set and
the number of cores. Two runs on the same kind of machine share rows (a warm log re-measures
nothing); a different CPU gets its own rows, so logs from two machines merge and compare side by
side. The host name is recorded beside it but is not part of it: a container's host name changes on
every start, the hardware does not.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def machine_info() -> dict[str, Any]:
    """What the fingerprint is made of, plus the host name (JSON-able). The features digest is the
    host target's (`-mattr-hash` of its tuning-log name)."""
    from autorelay.codegen.llvm.host import host_target

    host = host_target()
    return {
        "cpu": _cpu_model(),
        "llvm_cpu": host.cpu,
        "features_sha": host.features_hash(),
        "cores": os.cpu_count() or 1,
        "host": socket.gethostname(),
    }


def fingerprint(info: dict[str, Any] | None = None) -> str:
    """A short stable name for this kind of machine: `znver5-2c-1a2b3c4d`."""
    info = info or machine_info()
    stable = {k: info[k] for k in ("cpu", "llvm_cpu", "features_sha", "cores")}
    digest = hashlib.sha256(repr(sorted(stable.items())).encode()).hexdigest()[:8]
    return f"{info['llvm_cpu']}-{info['cores']}c-{digest}"


def label(info: dict[str, Any]) -> str:
    """How a report names a machine: `AMD EPYC 9B45 (znver5, 2 cores)`."""
    return f"{info.get('cpu', '?')} ({info.get('llvm_cpu', '?')}, {info.get('cores', '?')} cores)"


@lru_cache(maxsize=1)
def code_version() -> str:
    """The package version, and the source checkout's commit when there is one (`0.1.0+58b3af6`,
    `+dirty` when it has uncommitted changes)."""
    import autorelay

    version = autorelay.__version__
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return version
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    if not commit:
        return version
    return f"{version}+{commit}" + (".dirty" if dirty else "")


__all__ = ["code_version", "fingerprint", "label", "machine_info"]
