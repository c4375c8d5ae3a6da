"""Genetic search: the next batch breeds (crossover + mutation) from the fittest measured configs."""

from __future__ import annotations

import math

from search import space_ops
from search.task import Task
from search.tuners.base import Tuner


class GeneticTuner(Tuner):
    name = "genetic"

    def __init__(self, task: Task, seed: int = 0, population: int = 16, elite: int = 4,
                 mutation: float = 0.3) -> None:
        super().__init__(task, seed)
        self.population, self.elite, self.mutation = population, elite, mutation

    def next_batch(self, n: int) -> list[int]:
        ok = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        if len(ok) < 2:
            return self._random_unvisited(n)
        parents = [i for _, i in ok[: self.population]]
        fitness = [1.0 / c for c, _ in ok[: self.population]]
        out: set[int] = set()
        tries = 0
        while len(out) < n and tries < 50 * n:
            tries += 1
            a, b = self.rng.choices(parents, weights=fitness, k=2)
            child = space_ops.crossover(self.space, a, b, self.rng)
            if self.rng.random() < self.mutation or child in self.visited:
                child = space_ops.mutate(self.space, child, self.rng)
            if child not in self.visited:
                out.add(child)
        batch = list(out)
        return batch + self._random_unvisited(n - len(batch), exclude=out)
