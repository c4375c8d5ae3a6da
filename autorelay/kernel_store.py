"""Emitted CPU kernels kept in a folder, so a model built again in another process skips emission.

`autorelay.kernel.emit_kernel` keeps every kernel's backend code in memory for the process's life,
and the LLVM loader keeps compiled objects on disk where it is given a folder. A new process,
though, emitted every kernel again: `autorelay run` on a tuned ResNet-18 spent most of its 12-14 s
build scheduling and emitting kernels it had emitted the run before. With a folder (`compile` and
`run`'s `--kernel-cache`), `emit_kernel` files each kernel's LLVM IR there and reads it back
instead of emitting it, and the loader finds the compiled object beside it.

A kernel's key digests its loop IR and the target's code-changing part, not the code generator
that turned them into LLVM IR (the emitter, and the simplifier it runs on unrolled copies): a file
is therefore named by the key and a fingerprint of the compiler (every source file of the
`autorelay` package, and llvmlite's version), so a changed compiler never serves code it would no
longer emit. A file that cannot be read as a kernel's code is ignored and written again. Only the
CPU backend's code (`BackendCode`) is kept: it is text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import llvmlite

from autorelay.codegen.base import BackendCode
from autorelay.utils.files import write_cache_file

__all__ = ["compiler_fingerprint", "has_code", "load_code", "save_code"]


@functools.cache
def compiler_fingerprint() -> str:
    """A digest of what turns loop IR into LLVM IR: every source file of the `autorelay` package
    and llvmlite's version (read once: the sources a process runs do not change under it)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(llvmlite.__version__.encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _path(folder: str, key: str) -> str:
    return os.path.join(folder, f"{key}-{compiler_fingerprint()}.ll.json")


def has_code(folder: str, key: str) -> bool:
    """Whether kernel `key` is filed in `folder`."""
    return os.path.exists(_path(folder, key))


def load_code(folder: str, key: str) -> BackendCode | None:
    """The code filed for kernel `key`, or None (never filed, or unreadable)."""
    try:
        with open(_path(folder, key), encoding="utf-8") as fh:
            data = json.load(fh)
        return BackendCode(str(data["text"]), tuple((str(n), int(p)) for n, p in data["segments"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_code(folder: str, key: str, code: BackendCode) -> None:
    """File `code` for kernel `key` (written whole, then renamed: a reader never sees half of it).
    Only the CPU backend's plain `BackendCode` is filed; a folder that cannot be written to is
    left alone (the kernel is emitted again next time)."""
    if type(code) is not BackendCode:
        return
    text = json.dumps({"text": code.text, "segments": [list(s) for s in code.segments]})
    write_cache_file(_path(folder, key), text.encode("utf-8"))
