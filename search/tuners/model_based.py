"""Model-based tuning (AutoTVM's design): an XGBoost ranking model learns from every measured
batch; simulated annealing over the model proposes the next batch; the batch is picked for both
predicted speed and diversity, with a few random points (epsilon-greedy) so a wrong model cannot
trap the search.

Two models, because the informative features are expensive. The loop-IR features (`Featurizer`)
need each candidate lowered (~10 ms), too slow for annealing to visit thousands of points of a
10^4-10^5 space per batch. So a second ranking model over the knob values alone (microseconds per
point) drives the annealing: many chains walk the whole space, and only the best `explore` points
they found are lowered and ranked by the loop-IR model, which picks the batch. Lowering runs in
the builder's worker processes when attached; every lowered, unmeasured config stays a candidate
for later batches.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from autorelay.codegen.nvptx.ptx import PTXError
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule.apply import apply
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from search import space_ops
from search.cost_model import XGBoostCostModel
from search.features import LENGTH, code_features, extract, knob_features
from search.measure.result import MeasureResult
from search.measure.workers import WorkerPool
from search.task import Task
from search.tuners.base import Tuner
from tuning_db import config_key

log = logging.getLogger(__name__)


def lower_features(task: Task, config: Config) -> tuple[float, ...] | None:
    """Features of one config of `task`, or None when its schedule is illegal. A task that is not a
    loop-IR kernel (the accelerator's, `search.vta_tuning`) describes its configs itself.

    A cuda config is compiled to PTX here, not only lowered, so that its features carry the
    registers ptxas reports, as those of the measured configs (from the builder) do: a model that
    learnt from known registers must rank candidates whose registers are known too. Where the PTX
    cannot be made, the lowered loop IR is described with the registers unknown."""
    own = getattr(task, "features_of", None)
    if own is not None:
        return own(config)
    tmpl = template_for(task.cdef, task.template)
    try:
        steps = tmpl.steps(task.cdef, config, task.target)
        if task.target.kind == "cuda":
            try:
                return code_features(emit_kernel(task.cdef, steps, task.target), config)
            except PTXError:
                pass
        func, _ = apply(task.cdef, steps)
    except (ScheduleError, KeyError, ValueError, TypeError):
        return None
    return extract(func, config, task.target)


class Featurizer:
    """Loop-IR features per config index (None for an illegal schedule), cached. Lowering costs
    tens of milliseconds per config, so batches go to a worker pool when one is attached.

    Vectors the tuning log holds for the task (`logged`, by `tuning_db.config_key`; see
    `search.feature_log`) are read instead of lowered. Vectors of measured and transferred configs
    the log lacks collect in `unlogged` until `take_unlogged` hands them over to be logged."""

    def __init__(self, task: Task, pool: WorkerPool | None = None) -> None:
        self.task = task
        self.pool = pool
        self.cache: dict[int, tuple[float, ...] | None] = {}
        self.logged: dict[str, tuple[float, ...] | None] = {}
        self.unlogged: dict[str, tuple[float, ...] | None] = {}
        self.read_log = False  # whether `logged` holds what the log had

    def of_config(self, config: Config, keep: bool = False) -> tuple[float, ...] | None:
        """The vector of any config of the task's template (`keep`: log it when lowered here)."""
        key = config_key(config.to_json())
        for known in (self.logged, self.unlogged):
            if key in known:
                return known[key]
        vector = lower_features(self.task, config)
        if keep:
            self.unlogged[key] = vector
        return vector

    def __call__(self, index: int) -> tuple[float, ...] | None:
        if index not in self.cache:
            self.many([index])
        return self.cache[index]

    def many(self, indices: Sequence[int]) -> None:
        """Fill the cache for `indices`: from the log where it has them, the rest lowered (in
        parallel on the pool's workers when attached)."""
        todo = []
        for i in dict.fromkeys(indices):
            if i in self.cache:
                continue
            key = config_key(self.task.config(i).to_json()) if self.logged else ""
            if key in self.logged:
                self.cache[i] = self.logged[key]
            else:
                todo.append(i)
        if not todo:
            return
        if self.pool is None or len(todo) < 4:
            for i in todo:
                self.cache[i] = lower_features(self.task, self.task.config(i))
            return
        from search.measure.jobs import features_job

        n = len(self.pool.workers)
        chunks = [todo[k::n] for k in range(n)]
        jobs = [(self.task, [self.task.config(i) for i in c]) for c in chunks]
        outs = self.pool.map(features_job, jobs, 120.0)
        for c, o in zip(chunks, outs):
            vals = o.value if o.status == "ok" else [lower_features(self.task, self.task.config(i))
                                                     for i in c]
            self.cache.update(zip(c, vals))

    def keep(self, indices: Sequence[int]) -> None:
        """Mark the cached vectors of (measured) configs for the log, where it lacks them."""
        for i in indices:
            if i >= 0 and i in self.cache:
                key = config_key(self.task.config(i).to_json())
                if key not in self.logged:
                    self.unlogged[key] = self.cache[i]

    def take_unlogged(self) -> dict[str, tuple[float, ...] | None]:
        """The vectors to log (then counted as logged)."""
        out, self.unlogged = self.unlogged, {}
        self.logged.update(out)
        return out


class ModelBasedTuner(Tuner):
    name = "xgb"

    def __init__(self, task: Task, seed: int = 0, *, epsilon: float = 0.05, diversity: float = 0.25,
                 chains: int = 64, sa_iters: int = 40, explore: int = 32,
                 start_from_default: bool = True) -> None:
        """`start_from_default`: measure the template's heuristic default in the first batch (it
        is usually good, so a model trained on it starts well); experiments that compare search
        strategies from scratch turn it off so the curve measures the search, not the heuristic."""
        super().__init__(task, seed)
        self.start_from_default = start_from_default
        self.model = XGBoostCostModel(seed=seed)
        self.knob_model = XGBoostCostModel(seed=seed)
        self.features = Featurizer(task)
        self._knob_cache: dict[int, tuple[float, ...]] = {}
        self.epsilon, self.diversity = epsilon, diversity
        self.chains, self.sa_iters, self.explore = chains, sa_iters, explore
        self.transferred = 0

    def attach(self, pool: WorkerPool | None) -> None:
        """Lower candidates for features on `pool`'s workers (the builder's, between builds)."""
        self.features.pool = pool

    # ---- learning ------------------------------------------------------------------------------

    def update(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        super().update(indices, results)
        for i, r in zip(indices, results):
            f = r.extra.get("features") if r.extra else None
            if i >= 0 and f and len(f) == LENGTH:
                self.features.cache[i] = tuple(f)
        self._refit()
        self.features.keep(indices)

    def _refit(self) -> None:
        self.features.many(list(self.costs))  # one parallel batch for configs resumed from the log
        xs, ys = [], []
        for i, c in self.costs.items():
            f = self.features(i)
            if f is not None:
                xs.append(f)
                ys.append(c)
        self.model.fit(xs, ys)
        measured = list(self.costs)
        self.knob_model.fit(self._knob_rows(measured, keep=True), [self.costs[i] for i in measured])

    def _knob_rows(self, indices: Sequence[int], keep: bool = False) -> list[tuple[float, ...]]:
        """Knob features of configs; `keep` caches them (measured configs, refit every batch) —
        annealing visits thousands of points per batch, so those are recomputed, not kept."""
        rows = []
        for i in indices:
            row = self._knob_cache.get(i)
            if row is None:
                row = tuple(knob_features(self.space.get(i)))
                if keep:
                    self._knob_cache[i] = row
            rows.append(row)
        return rows

    def transfer(self, donors: Sequence[Sequence[tuple[dict[str, Any], float]]]) -> int:
        """Learn from donor workloads, each a list of (config JSON, cost) pairs (one ranking group
        per donor; the models are refit once); returns how many configs were usable."""
        used = 0
        for records in donors:
            xs, ys, ks, kys = [], [], [], []
            for cfg_json, cost in records:
                try:
                    cfg = self.task.config_from_json(cfg_json)
                except (KeyError, TypeError, AttributeError):
                    continue
                if cfg.template != self.task.template:
                    continue
                ks.append(tuple(knob_features(cfg)))
                kys.append(cost)
                f = self.features.of_config(cfg, keep=True)
                if f is not None:
                    xs.append(f)
                    ys.append(cost)
            self.model.add_transfer(xs, ys)
            self.knob_model.add_transfer(ks, kys)
            used += len(xs)
        self.transferred += used
        if used:
            self._refit()
        return used

    # ---- proposing -----------------------------------------------------------------------------

    def _score(self, idx: Sequence[int]) -> np.ndarray:
        """Predicted scores of already-featurized configs (-inf for illegal ones)."""
        feats = [self.features.cache.get(i) for i in idx]
        ok = [k for k, f in enumerate(feats) if f is not None]
        out = np.full(len(idx), -np.inf)
        if ok:
            out[ok] = self.model.predict([feats[k] for k in ok])
        return out

    def _anneal(self) -> dict[int, float]:
        """Parallel simulated annealing on the knob model: `chains` walkers (half from the best
        measured configs, half random) take `sa_iters` random moves each, accepting worse points
        with a probability that cools; returns every point visited with its knob-model score."""
        measured = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        points = [i for _, i in measured[: self.chains // 2]]
        points += [self.rng.randrange(len(self.space)) for _ in range(self.chains - len(points))]
        scores = self.knob_model.predict(self._knob_rows(points))
        seen = dict(zip(points, scores.tolist()))
        spread = max(float(np.std(scores)), 1e-9)
        for it in range(self.sa_iters):
            temp = 1.0 - it / self.sa_iters
            new = [space_ops.random_move(self.space, p, self.rng) for p in points]
            ns = self.knob_model.predict(self._knob_rows(new))
            seen.update(zip(new, ns.tolist()))
            spread = max(float(np.std(ns)), 1e-9)
            for k, sc in enumerate(ns):
                delta = (sc - scores[k]) / spread
                if delta >= 0 or self.rng.random() < math.exp(delta / max(temp, 1e-3)):
                    points[k], scores[k] = new[k], sc
        return seen

    def _candidates(self, want: int) -> list[tuple[float, int]]:
        """(score, index) of the best unvisited configs by the loop-IR model, best first: the
        knob model's `explore` best unvisited points from annealing are lowered and join the
        configs lowered for earlier batches."""
        seen = self._anneal()
        fresh = sorted(((sc, i) for i, sc in seen.items()
                        if i not in self.visited and i not in self.features.cache), reverse=True)
        self.features.many([i for _, i in fresh[: self.explore]])
        pool = [i for i, f in self.features.cache.items() if f is not None and i not in self.visited]
        scores = self._score(pool)
        return sorted(((float(s), i) for s, i in zip(scores, pool) if math.isfinite(s)), reverse=True)[:want]

    def _diverse(self, cands: list[tuple[float, int]], n: int) -> list[int]:
        """Greedy pick: normalised score minus `diversity` x the highest knob overlap with a pick."""
        if not cands:
            return []
        scores = np.array([s for s, _ in cands])
        lo, hi = scores.min(), scores.max()
        norm = (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
        digits = [space_ops.knob_indices(self.space, i) for _, i in cands]
        chosen: list[int] = []
        overlap = np.zeros(len(cands))
        free = set(range(len(cands)))
        while free and len(chosen) < n:
            k = max(free, key=lambda j: norm[j] - self.diversity * overlap[j])
            chosen.append(k)
            free.discard(k)
            for j in free:
                same = sum(a == b for a, b in zip(digits[j], digits[k])) / max(len(digits[k]), 1)
                overlap[j] = max(overlap[j], same)
        return [cands[k][1] for k in chosen]

    def next_batch(self, n: int) -> list[int]:
        if not self.model.ready:
            first: list[int] = []
            d = self.task.index(self.task.default) if self.start_from_default else -1
            if d >= 0 and d not in self.visited:
                first.append(d)
            return first + self._random_unvisited(n - len(first), exclude=set(first))
        n_random = sum(1 for _ in range(n) if self.rng.random() < self.epsilon)
        picks = self._diverse(self._candidates(3 * n), n - n_random)
        return picks + self._random_unvisited(n - len(picks), exclude=set(picks))
