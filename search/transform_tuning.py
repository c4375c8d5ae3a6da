"""The re-layouts a layout plan may need, as tuned kernels of the tuning log.

On every edge of a model's layout graph the layout program (`search.layout_dp`) weighs what
reading the value in another layout costs: one `layout_transform` kernel (NCHW <-> NCHW{b}c, or
between two blocks). Those kernels are tasks like any other, under the `injective` template
(vector width, unroll, parallel loop, one flat loop), which a model's own tune leaves at their
defaults (`search.extract.UNTUNED_TEMPLATES`: a copy streams memory, and its trials rarely buy
anything end to end).

A plan tune weighs them all before any build is profiled (`tune_transforms`): each re-layout a
layout graph of the model may put on an edge (`layout_costs.relayouts`) is tuned with a small share
of the model's trial budget (`TRANSFORM_SHARE`, at most `MAX_TRANSFORM_TRIALS` each, none below
`MIN_TRANSFORM_TRIALS`), every
measurement logged under the kernel's workload key, and the layout program is given the pick's
re-measured time: the best config against the default, timed interleaved (`tune.tune_task`'s
final pick; with no trial to spare, the default alone). The screening and the layout search both
read those times (`Model.transforms`). A re-layout the chosen plan runs is the same workload, so
its build looks the pick up in the log like any tuned kernel's. A rerun reads the logged picks and
times nothing.

Why tune them at all: an exhaustive tuning of ten of MobileNet-v2's re-layouts (Zen 3, 2 threads,
24 configs each) kept nine within 0-13% of their defaults, but moved a block-of-8 -> NCHW
re-layout of 384x14x14 from 65 to 46 us: the default vectorizes the 14-wide rows in eights (one
vector and a 6-wide tail), and the plain loop is faster there.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from autorelay.target import Target
from search.extract import ModelTask
from search.layout_costs import candidate_blocks, relayouts
from search.measure.local import Measurer
from search.models import Model
from search.relayout_kernels import Relayout, transform_key, transform_task
from search.tune import logged_trials, tune_task
from search.tuners.base import RandomTuner

TRANSFORM_SHARE = 0.05  # of a plan tune's trial budget, for the re-layouts its layout program weighs
MAX_TRANSFORM_TRIALS = 8  # per re-layout: a third of the injective space
# Fewer trials than this each and the share goes to the kernels instead, each re-layout's default
# timed once. One random trial each is a lottery ticket: in 800-trial ResNet-18 plan tunes (2-core
# Zen 5) all 32 re-layouts kept their defaults, and the stage took 16 s where timing the defaults
# takes about 4; in a 1000-trial one of the zoo's Inception, 6 of 42 picks beat their defaults by
# 0.5-2.7 us (blocks 8 <-> 16 re-layouts, 5-13 us each).
MIN_TRANSFORM_TRIALS = 2


def transform_tasks(model: Model, target: Target) -> dict[Relayout, ModelTask]:
    """The task of every re-layout a layout graph of `model` may put on an edge (`relayouts`)."""
    tasks = {edge: transform_task(edge, target) for edge in relayouts(model, candidate_blocks(target))}
    return {edge: t for edge, t in tasks.items() if t is not None}


def trials_per_transform(trials: int, transforms: int) -> int:
    """Each re-layout's share of a plan tune's `trials`: `TRANSFORM_SHARE` of them spread evenly, at
    most `MAX_TRANSFORM_TRIALS`; 0 (the default measured alone) when the share is below
    `MIN_TRANSFORM_TRIALS` each."""
    each = min(MAX_TRANSFORM_TRIALS, int(trials * TRANSFORM_SHARE) // max(1, transforms))
    return each if each >= MIN_TRANSFORM_TRIALS else 0


@dataclass
class TransformTuning:
    """What `tune_transforms` did: per re-layout its re-measured seconds, and the search trials the
    log holds over them (`trials`, this run's `new` ones included)."""

    seconds: dict[Relayout, float] = field(default_factory=dict)
    trials: int = 0
    new: int = 0
    elapsed: float = 0.0


def tune_transforms(model: Model, tasks: dict[Relayout, ModelTask], db: Any, measurer: Measurer,
                    trials: int, *, run: int | None = None, seed: int = 0) -> TransformTuning:
    """Tune the re-layout `tasks` of `model` (`transform_tasks`: see the module docstring) into
    `db`, with `trials_per_transform(trials, n)` trials each, and file each one's re-measured
    seconds in `model.transforms`, where the layout program reads them. A re-layout whose
    candidates all failed keeps no figure: the layout program times its default then."""
    t0 = time.perf_counter()
    each = trials_per_transform(trials, len(tasks))
    out = TransformTuning()
    for edge, task in tasks.items():
        got = tune_task(task, RandomTuner(task, seed), each, db, measurer, run=run, transfer=False)
        out.trials += got.resumed + got.trials
        out.new += got.trials
        if math.isfinite(got.best_cost):
            out.seconds[edge] = got.best_cost
            model.transforms[transform_key(*edge, task.target)] = got.best_cost
    out.elapsed = time.perf_counter() - t0
    return out


def logged_transform_trials(tasks: dict[Relayout, ModelTask], db: Any) -> int:
    """The search trials the log holds over the re-layout `tasks`: their part of a plan tune's budget."""
    return sum(logged_trials(db, t) for t in tasks.values())


__all__ = ["MAX_TRANSFORM_TRIALS", "MIN_TRANSFORM_TRIALS", "TRANSFORM_SHARE", "TransformTuning",
           "logged_transform_trials", "transform_tasks", "trials_per_transform", "tune_transforms"]
