"""Writing a cache's files (emitted kernels, compiled objects) so that no reader sees half of one."""

from __future__ import annotations

import contextlib
import os

__all__ = ["write_cache_file"]


def write_cache_file(path: str, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place: a reader finds the
    whole file or none. A folder that cannot be made or written to is left alone: what a cache
    cannot keep is made again next time."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
