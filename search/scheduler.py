"""Dividing one trial budget across a model's tasks (Ansor's gradient-based task scheduler).

The model's latency is f = sum_i w_i * g_i, where g_i is task i's best latency so far and w_i its
occurrence count. Each round of trials goes to the task whose latency is expected to fall fastest
per trial, estimated from its recent progress (backward difference) and an optimistic forward
guess (g_i / t_i: another t_i trials could shave off as much again); both are scaled by w_i, so a
kernel that runs 12 times per inference or that is slow counts for more. Every task gets one round
first (warm-up), and with probability `epsilon` a random task is chosen, so no task starves.

Alternatives: tasks given the same `group` (one workload under several schedule templates) are one
term of f, weighted once: w * min_j g_j, since the build runs whichever alternative is fastest. The
group's current best alternative gets the gradient above; any other gets only the part of its
expected improvement over the next round that would take it below the group's best (its own
gradient projected over `round_trials`, clipped at the best). So a trailing alternative is tuned
while it looks able to overtake and then left to the epsilon picks, the workload's weight is never
counted twice, and whichever alternative leads (the default template's included) is never starved
by a sibling. A group of one is exactly the task of old.

Deferred tasks (`deferred`: task indices) skip the warm-up: a form whose default schedule
already ran well behind its group's fastest (`search.plan_screen`) starts only when the epsilon
pick draws it, or when its group has no other live member; a deferred task alone in its group (a
kernel the plan is unlikely to run) likewise waits until no undeferred task is live. Once it has a
figure, the rules above apply to it (see `search.plan_screen` for why and where the line is drawn).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Hashable, Sequence
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
                 backward_window: int = 2, epsilon: float = 0.05, seed: int = 0,
                 groups: Sequence[Hashable] | None = None, deferred: Collection[int] = ()) -> None:
        if budget < 0 or round_trials < 1:
            raise ValueError(f"task scheduler: budget ({budget}) must be >= 0 and round_trials "
                             f"({round_trials}) >= 1")
        if any(w <= 0 for w in weights):
            raise ValueError(f"task scheduler: task weights must be positive, got {list(weights)}")
        if groups is not None and len(groups) != len(weights):
            raise ValueError(f"task scheduler: {len(groups)} groups for {len(weights)} tasks")
        self.tasks = [TaskProgress(float(w)) for w in weights]
        # task index -> the indices of its group (itself alone when ungrouped)
        members: dict[Hashable, list[int]] = {}
        for i, g in enumerate(groups if groups is not None else range(len(weights))):
            members.setdefault(g, []).append(i)
        self.groups = [members[g] for g in (groups if groups is not None else range(len(weights)))]
        if any(len({self.tasks[j].weight for j in m}) > 1 for m in members.values()):
            raise ValueError("task scheduler: alternatives of one group must have the same weight")
        self.budget, self.round_trials = budget, round_trials
        self.alpha, self.window, self.epsilon = alpha, backward_window, epsilon
        self.rng = random.Random(seed)
        self.finished: set[int] = set()
        self.order: list[int] = []  # which task got each round
        if any(not 0 <= i < len(weights) for i in deferred):
            raise ValueError(f"task scheduler: deferred tasks {sorted(deferred)} are not all among the "
                             f"{len(weights)} tasks")
        self.deferred = set(deferred)

    def group_latency(self, i: int) -> float:
        """The best latency among task i's group (its alternatives): what the build would run."""
        return min(self.tasks[j].latency for j in self.groups[i])

    def objective(self) -> float:
        """Weighted end-to-end latency estimate: sum over groups of w * (the group's best g)
        (inf until every group has a figure)."""
        firsts = {m[0]: i for i, m in enumerate(self.groups)}
        return sum(self.tasks[i].weight * self.group_latency(i) for i in firsts.values())

    def gradient(self, i: int) -> float:
        """Expected change of the objective per extra trial on task i (negative = improvement)."""
        t = self.tasks[i]
        g = t.latency
        lead = self.group_latency(i)
        if not math.isfinite(g):
            # no valid config yet: urgent, unless a sibling already runs the workload
            return -math.inf if not math.isfinite(lead) else 0.0
        backward = 0.0
        if len(t.best) > self.window:
            dt = t.trials[-1] - t.trials[-1 - self.window]
            backward = (t.best[-1] - t.best[-1 - self.window]) / max(dt, 1)
        forward = -g / max(t.spent, 1)
        slope = self.alpha * backward + (1 - self.alpha) * forward
        if g <= lead:  # the group's best (or a task alone): the whole slope counts
            return t.weight * slope
        n = self.round_trials  # a trailing alternative helps only by what it may gain below the lead
        return t.weight * min(0.0, g + slope * n - lead) / n

    def pick(self) -> int | None:
        live = [i for i in range(len(self.tasks)) if i not in self.finished]
        if not live:
            return None
        for i in live:  # warm-up: every task once, a deferred one only once its group has no other
            if not self.tasks[i].trials and not self._waits(i):
                return i
        if self.rng.random() < self.epsilon:
            return self.rng.choice(live)
        ready = [i for i in live if not self._waits(i)]
        return min(ready, key=self.gradient)

    def _waits(self, i: int) -> bool:
        """Whether task i is a deferred task not yet started while another member of its group is live
        and not deferred; a task alone in its group waits for every undeferred task."""
        if i not in self.deferred or self.tasks[i].trials:
            return False
        others = [j for j in self.groups[i] if j != i] or range(len(self.tasks))
        return any(j != i and j not in self.finished and j not in self.deferred for j in others)

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
