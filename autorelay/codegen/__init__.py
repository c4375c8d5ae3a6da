"""Backends: one per target kind, each turning loop IR into backend code (`emit`, pure) and backend
code into something callable (`load`). `autorelay.kernel.compile_kernel` is the one caller; the
graph executor, the VM, AoT and the tuner's measurement workers all compile through it.

`resolve_target` is the one place a target string (``llvm``, ``llvm -mcpu=znver3 -threads=2``) or
value becomes a concrete `Target`: the backend of its kind fills in what the text leaves to the
machine (for the CPU: the host's name and features).

    cpu   LLVM through llvmlite (`autorelay.codegen.llvm`)
    cuda  NVPTX through llvmlite, PTX loaded by the CUDA driver (`autorelay.codegen.nvptx`)
"""

from __future__ import annotations

import os

from autorelay.codegen.base import Backend, BackendCode
from autorelay.codegen.llvm.backend import CPU_BACKEND
from autorelay.codegen.nvptx.backend import NVPTX_BACKEND
from autorelay.target import Target, TargetError, TargetSpec, parse_target

BACKENDS: dict[str, Backend] = {"cpu": CPU_BACKEND, "cuda": NVPTX_BACKEND}


def backend_for(target: Target) -> Backend:
    """The backend compiling for `target`'s kind."""
    backend = BACKENDS.get(target.kind)
    if backend is not None:
        return backend
    raise TargetError(f"no backend for target kind {target.kind!r} yet (known: {', '.join(BACKENDS)})")


def host_threads() -> int:
    """The cores this process may run on: the default thread count, like ONNX Runtime and PyTorch."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_target(target: str | Target | TargetSpec = "llvm", threads: int | None = None) -> Target:
    """A concrete target: `threads` (when given) overrides the text's `-threads=`; otherwise the
    text's, a Target's own, or all of this machine's cores."""
    if isinstance(target, Target):
        return target if threads is None else target.with_threads(threads)
    spec = target if isinstance(target, TargetSpec) else parse_target(str(target))
    n = threads if threads is not None else spec.threads if spec.threads is not None else host_threads()
    if not isinstance(n, int) or n < 1:
        raise TargetError(f"threads must be an integer >= 1, got {n!r}")
    probe = Target(kind=spec.kind)
    return backend_for(probe).resolve(spec, n)


__all__ = ["Backend", "BackendCode", "backend_for", "host_threads", "resolve_target"]
