"""Confirming the log's picks where the model runs them.

The tuner times a kernel alone: its weights evicted before each call, its input and output the
same warm buffers call after call. In a model the input comes from the kernel before it and the
output goes to a buffer that kernel did not touch, and a config that won alone can lose there. In
MobileNet-v2's plan build (2-core Zen 3; each kernel profiled in the tuned build and in the
default-schedule build, alternately, 12 rounds) the stem's tuned config ran 1.24x slower than its
default (per-round ratios 1.08-1.38), having beaten it alone 267 against 326 us.

`confirm_in_place` profiles the tuned build, the default build and up to `RUNNERS_UP` runner-up
builds of the model kernel by kernel, round-robin (`kernel_profiles.profile_key_rounds`). Runner-up
build k runs each tuned workload with the (k+1)-th fastest config of the workload's latest alone
re-measurement (`tune_task`'s final pick: the search's top configs and the default, timed
interleaved), where it has one; the alone ranking of configs within a few percent of each other is
the one most likely to turn over in place. Per workload the log tuned, every contender's figures
are logged as one interleaved re-measurement batch (`tune.record_remeasurement`, tagged
`tuning_db.IN_PLACE`). The log's pick is the fastest of its latest batch (`tuning_db.latest_batch`),
so `compile` and `run` then build whichever ran fastest in place; an alternative template's older
alone figures do not compete with it (`TuningDB.pick`). A rerun of the tune with nothing
new to measure reuses its alone re-measurement as before (in-place rows are neither trials nor its
contenders' rivals) and leaves the in-place verdict standing; one that tunes the workload further
re-measures it alone, which outdates the verdict until its own end confirms in place again.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import tuning_db
from autorelay.schedule.source import Lookup
from autorelay.schedule.space import Config
from search.extract import ModelTask
from search.kernel_profiles import profile_key_rounds, profile_runs
from search.measure.result import MeasureInput, MeasureResult
from search.tune import alone_batch, record_remeasurement, template_history

ROUNDS = 7  # profilings of each build, alternating
RUNS = 5  # model runs per profiling at most (fewer for a slow model: `profile_runs`)
RUNNERS_UP = 2  # runner-up builds at most: the alone re-measurement times the top 3 and the default

BuildPinned = Callable[[Mapping[str, Config]], Any]  # the tuned build with these workloads' configs pinned


class PinnedSource:
    """A schedule source that answers the `pins` workloads with their pinned configs and asks `base`
    about every other: a runner-up build differs from the tuned one in those kernels alone."""

    def __init__(self, base: Any, pins: Mapping[str, Config]) -> None:
        self.base, self.pins = base, dict(pins)

    def lookup(self, workload_key: str, target: str | None = None, *,
               workload: dict[str, Any] | None = None) -> Any:
        pinned = self.pins.get(workload_key)
        if pinned is None:
            return self.base.lookup(workload_key, target, workload=workload)
        return Lookup(pinned, "exact", "runner-up in place; ")


@dataclass(frozen=True)
class InPlaceCheck:
    """One tuned workload timed in place: its kernel's name, its tuned config's and its default's
    seconds per call (medians over the rounds), and the fastest runner-up's, if any ran."""

    kernel: str
    key: str
    tuned_s: float
    default_s: float
    runner_up_s: float = float("inf")
    chosen: Config | None = None  # the config the log picks now: the fastest in place

    @property
    def kept(self) -> bool:
        """Whether the tuned config stays the log's pick (nothing ran faster in place)."""
        return self.tuned_s <= min(self.default_s, self.runner_up_s)

    @property
    def winner(self) -> str:
        """Which contender the log picks now: "tuned", "default" or "runner-up"."""
        if self.kept:
            return "tuned"
        return "default" if self.default_s <= self.runner_up_s else "runner-up"


@dataclass
class _Contest:
    """One tuned workload's contenders: its task under the picked template, the pick, the runner-ups
    (fastest alone first) and the default's task."""

    name: str
    own: ModelTask
    first: ModelTask
    configs: list[Config]  # the pick, then the runner-ups


def confirm_in_place(db: Any, tasks: Sequence[ModelTask], tuned: Any, default: Any, args: list[np.ndarray],
                     *, run: int | None = None, rounds: int = ROUNDS,
                     build_pinned: BuildPinned | None = None) -> list[InPlaceCheck]:
    """Profile `tuned` (the model built with the log's schedules), `default` (the same model with
    default schedules) and, given `build_pinned`, the runner-up builds it makes; log each tuned
    workload's in-place batch (see the module docstring). `tasks`: the build's tasks (each
    workload's templates, the first being the one a default build compiles). Only kernels whose
    config came from this workload's own tuning on this target are checked; returns one check per
    such workload, in build order."""
    contests = _contests(db, tasks, tuned, RUNNERS_UP if build_pinned is not None else 0)
    if not contests:
        return []
    builds = [tuned, default]
    for k in range(1, 1 + RUNNERS_UP):
        pins = {key: c.configs[k] for key, c in contests.items() if len(c.configs) > k}
        if not pins or build_pinned is None:
            break
        builds.append(build_pinned(pins))
    runs = profile_runs(tuned, args, RUNS)
    times = profile_key_rounds([(b, args, runs) for b in builds], rounds)
    compiled_as = [{row.workload_key: row.source for row in b.report.rows} for b in builds]
    checks = []
    for key, c in contests.items():
        if key not in times[0] or key not in times[1]:
            continue  # the default build fused it otherwise: no kernel to compare with
        default_index = c.first.index(c.first.default) if c.first is c.own else -1  # an index of own's space
        entries = [(MeasureInput(c.configs[0], c.own.index(c.configs[0])), times[0][key]),
                   (MeasureInput(c.first.default, default_index), times[1][key])]
        for k, cfg in enumerate(c.configs[1:], 2):  # build k ran the (k-1)-th runner-up, as tuned
            if compiled_as[k].get(key) == "tuned" and key in times[k]:
                entries.append((MeasureInput(cfg, c.own.index(cfg)), times[k][key]))
        results = [MeasureResult(tuple(t)) for _, t in entries]
        record_remeasurement(db, c.own, [inp for inp, _ in entries], results, run, tuning_db.IN_PLACE)
        tuned_s, default_s, *others = (r.median for r in results)
        fastest = min(range(len(results)), key=lambda i: results[i].median)
        checks.append(InPlaceCheck(c.name, key, tuned_s, default_s, min(others, default=float("inf")),
                                   entries[fastest][0].config))
    return checks


def _contests(db: Any, tasks: Sequence[ModelTask], tuned: Any, runners_up: int) -> dict[str, _Contest]:
    """The workloads whose kernels in `tuned` run a config of their own tuning other than the
    default, each with its pick and up to `runners_up` runner-ups."""
    by_key: dict[str, list[ModelTask]] = {}
    for t in tasks:
        by_key.setdefault(t.key, []).append(t)
    contests: dict[str, _Contest] = {}
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
        if own is first and config == first.default:
            continue
        contest = contests[row.workload_key] = _Contest(row.name, own, first, [config])
        if runners_up:
            contest.configs += _runners_up(db, own, config, first.default)[:runners_up]
    return contests


def _runners_up(db: Any, own: ModelTask, pick: Config, default: Config) -> list[Config]:
    """The configs of `own`'s latest alone re-measurement other than the pick and the default,
    fastest first (failures left out)."""
    batch = alone_batch(template_history(db, own))
    timed = sorted((rec for rec in batch if rec.error_kind is None and rec.costs),
                   key=lambda rec: statistics.median(rec.costs))
    configs = [own.config_from_json(rec.config) for rec in timed]
    return [cfg for cfg in configs if cfg not in (pick, default)]


def describe_checks(checks: Sequence[InPlaceCheck]) -> str:
    """One line for a tune's report: how many tuned kernels held in place, and which gave way to
    what."""
    lost = [c for c in checks if not c.kept]
    text = (f"in place: {len(checks) - len(lost)} of {len(checks)} tuned kernels ran fastest of their "
            "contenders")
    for winner in ("default", "runner-up"):
        those = [c for c in lost if c.winner == winner]
        if those:
            text += f"; the {winner} replaces " + ", ".join(
                f"{c.kernel} (tuned {c.tuned_s * 1e6:.0f} us, {winner} "
                f"{(c.default_s if winner == 'default' else c.runner_up_s) * 1e6:.0f} us)" for c in those)
    return text


__all__ = ["RUNNERS_UP", "BuildPinned", "InPlaceCheck", "PinnedSource", "confirm_in_place", "describe_checks"]
