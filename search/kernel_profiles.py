"""Profiling builds kernel by kernel, to compare kernels where a model runs them.

A search times candidates inside whole builds: per conv layer in each layout (`layout_costs`), the
expansion probe against its band kernels (`expansion_choice`), and the log's picks against the
defaults they replaced (`in_place`). Each figure is per workload key, the calls of one key (a
kernel a model runs several times) taken together.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

Build = tuple[Any, Sequence[Any], int]  # an executable, its inputs, and its runs per profiling


def profile_keys(builds: Sequence[Build], rounds: int = 3) -> list[dict[str, float]]:
    """Per build (an executable, its inputs, and its runs per profiling), the seconds of each
    workload key's calls: each call's median over `rounds` profilings, taken round-robin (the
    host's speed drifts over the minutes a search takes: builds profiled one after the other
    would compare one measured in a fast minute with one measured in a slow one), then the median
    over the calls of that key."""
    out = []
    for exe, runs in zip((b[0] for b in builds), _profiles(builds, rounds)):
        out.append({k: statistics.median(statistics.median(r[i] for r in runs) for i in idx)
                    for k, idx in _calls(exe).items()})
    return out


def profile_key_rounds(builds: Sequence[Build], rounds: int = 3) -> list[dict[str, list[float]]]:
    """As `profile_keys`, but each key's figure per round: the median over its calls (in that
    round's profiling, each call's median over the runs)."""
    return [{k: [statistics.median(r[i] for i in idx) for r in runs] for k, idx in _calls(exe).items()}
            for exe, runs in zip((b[0] for b in builds), _profiles(builds, rounds))]


def _profiles(builds: Sequence[Build], rounds: int) -> list[list[list[float]]]:
    """Per build, per round (round-robin over the builds), each kernel step's seconds."""
    samples: list[list[list[float]]] = [[] for _ in builds]
    for _ in range(max(1, rounds)):
        for (exe, args, repeat), runs in zip(builds, samples):
            runs.append([row.seconds for row in exe.profile(*args, repeat=repeat).rows])
    return samples


def _calls(exe: Any) -> dict[str, list[int]]:
    """The executable's kernel steps by workload key."""
    calls: dict[str, list[int]] = {}
    for i, row in enumerate(exe.report.rows):
        calls.setdefault(row.workload_key, []).append(i)
    return calls


PROFILE_SECONDS = 0.5  # about how long one profiling of a candidate build should take
MIN_PROFILE_RUNS = 3


def profile_runs(exe: Any, args: list[np.ndarray], most: int) -> int:
    """Runs per profiling of a build: `most`, fewer for a model whose call outlasts
    `PROFILE_SECONDS / most`. A VGG-16 build runs 0.1-0.3 s a call (2-core Zen 3), and ten runs
    in each of five rounds took a quarter of its layout search; each of its kernels runs for
    milliseconds, so a few runs a round time it as steadily as ResNet-18's (15-40 ms a call: ten)."""
    t0 = time.perf_counter()
    exe(*args)  # a first call, paying for page faults on fresh buffers: errs towards fewer runs
    once = time.perf_counter() - t0
    return min(most, max(MIN_PROFILE_RUNS, int(PROFILE_SECONDS / max(once, 1e-9))))


__all__ = ["MIN_PROFILE_RUNS", "PROFILE_SECONDS", "Build", "profile_key_rounds", "profile_keys",
           "profile_runs"]
