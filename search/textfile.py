"""Reading a program text file for `autorelay check`: bounded and strict, so a wrong argument (a
binary file, /dev/zero, a 5 GB log) gives one line instead of a traceback or an exhausted memory."""

from __future__ import annotations

import os

MAX_PROGRAM_BYTES = 16 * 1024 * 1024  # far above any hand-written or printed Relay program


def read_program_text(path: str | os.PathLike[str], limit: int = MAX_PROGRAM_BYTES) -> str:
    """The file's text. Reads at most `limit` + 1 bytes whatever the file is (a device, a pipe);
    raises ValueError (one line) for a larger file or bytes that are not UTF-8, OSError if unreadable."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    name = os.fspath(path)
    if len(data) > limit:
        raise ValueError(f"{name}: larger than {limit} bytes; not a program text")
    if b"\0" in data:
        raise ValueError(f"{name}: a binary file (NUL byte at offset {data.index(0)}), not a program text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})") from None
