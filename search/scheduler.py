"""Dividing one trial budget across a model's tasks (Ansor's gradient-based task scheduler).

The model's latency is f = sum_i w_i * g_i, where g_i is task i's best latency so far and w_i its
occurrence count. Each round of trials goes to the task whose latency is expected to fall fastest
per trial, estimated from its recent progress (backward difference) and an optimistic forward
guess (g_i / t_i: another t_i trials could shave off as much again); both are scaled by w_i, so a
kernel that runs 12 times per inference or that is slow counts for more. Every task gets one round
first (warm-up), and with probability `epsilon` a random task is chosen, so no task starves.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class TaskProgress:
    """Best latency (seconds) after each round given to one task."""

    weight: float
    trials: list[int] = field(default_factory=list)  # cumulative trials after each round
    best: list[float] = field(default_factory=list)  # best latency after each round

    @property
    def spent(self) -> int:
        return self.trials[-1] if self.trials else 0

    @property
    def latency(self) -> float:
        return self.best[-1] if self.best else math.inf


class TaskScheduler:
    """`run(tune_round)` spends `budget` trials in rounds of `round_trials`.

    `tune_round(task_index, trials)` tunes that task for up to `trials` more trials and returns
    (trials actually spent, best latency so far); a task that spends 0 is finished (space
    exhausted or early-stopped) and is not chosen again."""

    def __init__(self, weights: Sequence[float], budget: int, round_trials: int = 16, *, alpha: float = 0.2,
                 backward_window: int = 2, epsilon: float = 0.05, seed: int = 0) -> None:
        if budget < 0 or round_trials < 1:
            raise ValueError(f"task scheduler: budget ({budget}) must be >= 0 and round_trials "
                             f"({round_trials}) >= 1")
        if any(w <= 0 for w in weights):
            raise ValueError(f"task scheduler: task weights must be positive, got {list(weights)}")
        self.tasks = [TaskProgress(float(w)) for w in weights]
        self.budget, self.round_trials = budget, round_trials
        self.alpha, self.window, self.epsilon = alpha, backward_window, epsilon
        self.rng = random.Random(seed)
        self.finished: set[int] = set()
        self.order: list[int] = []  # which task got each round

    def objective(self) -> float:
        """Weighted end-to-end latency estimate sum_i w_i * g_i (inf until every task has a figure)."""
        return sum(t.weight * t.latency for t in self.tasks)

    def gradient(self, i: int) -> float:
        """Expected change of the objective per extra trial on task i (negative = improvement)."""
        t = self.tasks[i]
        g = t.latency
        if not math.isfinite(g):
            return -math.inf
        backward = 0.0
        if len(t.best) > self.window:
            dt = t.trials[-1] - t.trials[-1 - self.window]
            backward = (t.best[-1] - t.best[-1 - self.window]) / max(dt, 1)
        forward = -g / max(t.spent, 1)
        return t.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def pick(self) -> int | None:
        live = [i for i in range(len(self.tasks)) if i not in self.finished]
        if not live:
            return None
        for i in live:  # warm-up: every task once
            if not self.tasks[i].trials:
                return i
        if self.rng.random() < self.epsilon:
            return self.rng.choice(live)
        return min(live, key=self.gradient)

    def run(self, tune_round: Callable[[int, int], tuple[int, float]]) -> list[int]:
        """Spend the budget; returns the trials each task received."""
        spent = 0
        while spent < self.budget:
            i = self.pick()
            if i is None:
                break
            n = min(self.round_trials, self.budget - spent)
            used, best = tune_round(i, n)
            t = self.tasks[i]
            if used <= 0:
                self.finished.add(i)
                if not t.trials:
                    t.trials.append(0)
                    t.best.append(best)
                continue
            spent += used
            t.trials.append(t.spent + used)
            t.best.append(min(best, t.latency))
            self.order.append(i)
        return [t.spent for t in self.tasks]
