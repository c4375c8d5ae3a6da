"""The one interface every tuner implements.

A tuner proposes batches of *unmeasured* config indices (`next_batch`) and learns from results
(`update`). The tuning loop (`search.tune`) owns measurement, logging, budgets and early stopping,
so tuners stay small and interchangeable; resuming from the tuning log is just an `update` with
the logged results before the first proposal.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from search.measure.result import MeasureResult
from search.task import Task


class Tuner:
    name = "tuner"

    def __init__(self, task: Task, seed: int = 0) -> None:
        self.task = task
        self.space = task.space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.costs: dict[int, float] = {}  # index -> best mean cost seen (inf for failures)
        self.best_index = -1
        self.best_cost = math.inf

    def attach(self, pool: object) -> None:
        """Offered the builder's worker pool for side work (feature extraction); default: unused."""

    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    def next_batch(self, n: int) -> list[int]:
        """Up to `n` distinct unvisited indices (fewer only when the space runs out)."""
        raise NotImplementedError

    def update(self, indices: Sequence[int], results: Sequence[MeasureResult]) -> None:
        for i, r in zip(indices, results):
            if i < 0:
                continue
            self.visited.add(i)
            c = r.median  # robust to one noisy repeat
            self.costs[i] = min(self.costs.get(i, math.inf), c)
            if c < self.best_cost:
                self.best_cost, self.best_index = c, i

    def _random_unvisited(self, n: int, exclude: set[int] | None = None) -> list[int]:
        """Uniform unvisited indices; enumerates the rest when few remain so it always terminates."""
        taken = self.visited | (exclude or set())
        size = len(self.space)
        left = size - len(taken)
        n = min(n, left)
        if n <= 0:
            return []
        if left <= 4 * n or size <= 4096:
            rest = [i for i in range(size) if i not in taken]
            return self.rng.sample(rest, n)
        out: set[int] = set()
        while len(out) < n:
            i = self.rng.randrange(size)
            if i not in taken:
                out.add(i)
        return list(out)


class RandomTuner(Tuner):
    name = "random"

    def next_batch(self, n: int) -> list[int]:
        return self._random_unvisited(n)


class GridTuner(Tuner):
    """Index order: exhaustive search for small spaces, the baseline of baselines."""

    name = "grid"

    def __init__(self, task: Task, seed: int = 0) -> None:
        super().__init__(task, seed)
        self._next = 0

    def next_batch(self, n: int) -> list[int]:
        out = []
        while len(out) < n and self._next < len(self.space):
            if self._next not in self.visited:
                out.append(self._next)
            self._next += 1
        return out
