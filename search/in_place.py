"""Confirming the log's picks where the model runs them.

The tuner times a kernel alone: its weights evicted before each call, its input and output the
same warm buffers call after call. In a model the input comes from the kernel before it and the
output goes to a buffer that kernel did not touch, and a config that won alone can lose there. In
MobileNet-v2's plan build (2-core Zen 3; each kernel profiled in the tuned build and in the
default-schedule build, alternately, 12 rounds) the stem's tuned config ran 1.24x slower than its
default (per-round ratios 1.08-1.38), having beaten it alone 267 against 326 us.

`confirm_in_place` profiles the tuned build and the default build of the model kernel by kernel,
round-robin (`kernel_profiles.profile_key_rounds`), and logs, per workload the log tuned, its
tuned config's figures and its default's as one interleaved re-measurement batch
(`tune.record_remeasurement`, tagged `tuning_db.IN_PLACE`). The log's pick is the faster of its
latest batch (`tuning_db.latest_batch`), so `compile` and `run` then build whichever ran faster in
place. A rerun of the tune with nothing new to measure reuses its alone re-measurement as before
(in-place rows are neither trials nor its contenders' rivals) and leaves the in-place verdict
standing; one that tunes the workload further re-measures it alone, which outdates the verdict
until its own end confirms in place again.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import tuning_db
from search.extract import ModelTask
from search.kernel_profiles import profile_key_rounds, profile_runs
from search.measure.result import MeasureInput, MeasureResult
from search.tune import record_remeasurement

ROUNDS = 7  # profilings of each build, alternating
RUNS = 5  # model runs per profiling at most (fewer for a slow model: `profile_runs`)


@dataclass(frozen=True)
class InPlaceCheck:
    """One tuned workload timed in place: its kernel's name, and its tuned config's and its
    default's seconds per call (medians over the rounds)."""

    kernel: str
    key: str
    tuned_s: float
    default_s: float

    @property
    def kept(self) -> bool:
        """Whether the tuned config stays the log's pick (it ran no slower in place)."""
        return self.tuned_s <= self.default_s


def confirm_in_place(db: Any, tasks: Sequence[ModelTask], tuned: Any, default: Any, args: list[np.ndarray],
                     *, run: int | None = None, rounds: int = ROUNDS) -> list[InPlaceCheck]:
    """Profile `tuned` (the model built with the log's schedules) and `default` (the same model
    with default schedules), and log each workload's in-place batch (see the module docstring).
    `tasks`: the build's tasks (each workload's templates, the first being the one a default
    build compiles). Only kernels whose config came from this workload's own tuning on this
    target are checked; returns one check per such workload, in build order."""
    by_key: dict[str, list[ModelTask]] = {}
    for t in tasks:
        by_key.setdefault(t.key, []).append(t)
    contests: dict[str, tuple[str, ModelTask, Any, ModelTask]] = {}
    for row in tuned.report.rows:
        if row.source != "tuned" or row.workload_key in contests or row.workload_key not in by_key:
            continue
        first = by_key[row.workload_key][0]
        picked = db.pick(row.workload_key, str(first.target))
        template = picked.config.get("template") if picked is not None else None
        own = next((t for t in by_key[row.workload_key] if t.template == template), None)
        if own is None:  # picked under another thread count, or a template this build lacks
            continue
        config = own.config_from_json(picked.config)
        if own is not first or config != first.default:
            contests[row.workload_key] = (row.name, own, config, first)
    if not contests:
        return []
    runs = profile_runs(tuned, args, RUNS)
    times = profile_key_rounds([(tuned, args, runs), (default, args, runs)], rounds)
    checks = []
    for key, (name, own, config, first) in contests.items():
        if key not in times[0] or key not in times[1]:
            continue  # the default build fused it otherwise: no kernel to compare with
        mine, theirs = times[0][key], times[1][key]
        default_index = first.index(first.default) if first is own else -1  # an index of own's space
        inputs = [MeasureInput(config, own.index(config)), MeasureInput(first.default, default_index)]
        results = [MeasureResult(tuple(mine)), MeasureResult(tuple(theirs))]
        record_remeasurement(db, own, inputs, results, run, tuning_db.IN_PLACE)
        checks.append(InPlaceCheck(name, key, statistics.median(mine), statistics.median(theirs)))
    return checks


def describe_checks(checks: Sequence[InPlaceCheck]) -> str:
    """One line for a tune's report: how many tuned kernels held in place, and those that did not."""
    lost = [c for c in checks if not c.kept]
    text = (f"in place: {len(checks) - len(lost)} of {len(checks)} tuned kernels ran no slower than "
            "their defaults")
    if lost:
        text += "; the default replaces " + ", ".join(
            f"{c.kernel} ({c.tuned_s * 1e6:.0f} us against {c.default_s * 1e6:.0f})" for c in lost)
    return text


__all__ = ["InPlaceCheck", "confirm_in_place", "describe_checks"]
