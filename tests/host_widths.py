"""Tests that force a CPU target (``llvm -mcpu=znver5``, ``-mcpu=skylake-avx512``, …) whatever CPU
runs them: compile for it always, run the code only where this host has the target's features.

Running code for a CPU the host lacks is refused (`autorelay.target.TargetError`; it would die of
SIGILL), so a test compiles first — that exercises the schedules, templates and code generation of
the wider CPU on every host — and then calls `run_here_or_skip` before running anything: on a host
without the features the test is skipped with a reason naming them; on one with them it runs as
written. Import it as ``from host_widths import …`` (pytest puts tests/ on the path, see conftest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_supports, require_host_supports
from autorelay.target import Target, TargetError

T = TypeVar("T")


def _target(target: str | Target) -> Target:
    return resolve_target(target, 1) if isinstance(target, str) else target


def runs_here(target: str | Target) -> bool:
    """Whether this host runs code compiled for `target` (a target string or a resolved Target)."""
    return host_supports(_target(target))


def run_here_or_skip(target: str | Target) -> None:
    """Skip the rest of the test where this host cannot run code compiled for `target` (call it
    after compiling, before running), with the library's refusal, which names the missing
    features, as the reason; return where it can. The skip is reported at the caller's line."""
    __tracebackhide__ = True
    try:
        require_host_supports(_target(target), "the code this test compiled")
    except TargetError as refusal:
        pytest.skip(str(refusal))


__all__ = ["run_here_or_skip", "runs_here"]


def build_runnable(build: Callable[[Target], T], wide: str, narrow: str, threads: int = 2) -> T:
    """`build(wide target)`, compiled on every host, where this host can run it; elsewhere
    `build(narrow target)` instead, so the test still runs (skipped only where neither runs)."""
    built = build(resolve_target(wide, threads))
    if runs_here(wide):
        return built
    built = build(resolve_target(narrow, threads))
    run_here_or_skip(narrow)
    return built
