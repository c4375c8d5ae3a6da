"""The seam every backend implements (see `autorelay.codegen`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from autorelay.target import Target, TargetSpec
from autorelay.tir.nodes import PrimFunc


@dataclass(frozen=True)
class BackendCode:
    """A backend's code for one kernel: text (LLVM IR for the CPU) and its entry points (segment
    name, parallel extent or 0). Plain data: it pickles from a builder process to a runner."""

    text: str
    segments: tuple[tuple[str, int], ...]


class Backend(Protocol):
    kind: str

    def emit(self, func: PrimFunc, target: Target, symbol: str) -> BackendCode:
        """Loop IR -> backend code. Pure: the same function and target give the same code."""

    def load(self, code: BackendCode, nbuffers: int, target: Target, key: str,
             cache_dir: str | None) -> Any:
        """Backend code -> a loaded module whose entry points the runtime calls."""

    def resolve(self, spec: TargetSpec, threads: int) -> Target:
        """The concrete target a parsed target string names on this machine."""
