"""The progress display of `autorelay tune`: one self-rewriting status line on a terminal, plain
lines (one per measured batch) when the output is a file or a pipe, so logs stay readable.

Shown: tasks started / all, trials spent / budget, the current task's best GFLOP/s, elapsed time
and an ETA from the trial rate so far.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from search.durations import clock
from search.extract import ModelTask, Skipped, workload_share
from search.model_tuning import Progress
from search.tune import TuneResult


def gflops(task: ModelTask, seconds: float) -> float:
    return task.flops / seconds / 1e9 if seconds > 0 and math.isfinite(seconds) else math.nan


class ConsoleProgress(Progress):
    def __init__(self, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.out = stream or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self.tasks_: list[ModelTask] = []
        self.budget = 0
        self.logged = 0
        self.started: set[int] = set()
        self.best: dict[int, float] = {}
        self.spent = 0
        self.settled = 0
        self._width = 0

    def _emit(self, line: str, final: bool = False) -> None:
        if self.tty:
            pad = max(0, self._width - len(line))
            self.out.write("\r" + line + " " * pad + ("\n" if final else ""))
            self._width = 0 if final else len(line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def tasks(self, tasks: list[ModelTask], skipped: list[Skipped], budget: int, logged: list[int]) -> None:
        self.tasks_, self.budget, self.logged = tasks, budget, sum(logged)
        self.t0 = time.perf_counter()
        flops = workload_share(tasks) * 100  # alternatives of a workload share its FLOPs
        workloads = len({t.key for t in tasks})
        alts = f" for {workloads} kernels" if workloads != len(tasks) else ""
        self._emit(f"{len(tasks)} tasks{alts} ({flops:.1f}% of the model's FLOPs), {len(skipped)} kernels "
                   f"not tuned; budget {budget} trials, {self.logged} already in the log", final=True)
        self.started |= {i for i, n in enumerate(logged) if n}

    def trials(self, task: int, trials: int, best_s: float, spent: int) -> None:
        self.started.add(task)
        self.spent = spent
        self.best[task] = best_s
        elapsed = time.perf_counter() - self.t0
        left = max(0, self.budget - self.logged - spent)
        eta = elapsed / spent * left if spent else math.inf
        t = self.tasks_[task]
        g = gflops(t, best_s)
        best = f"{g:.2f} GFLOP/s" if math.isfinite(g) else "no valid config yet"
        self._emit(f"[tasks {len(self.started)}/{len(self.tasks_)}] trials {self.logged + spent}/"
                   f"{self.budget} | {t.name}: {trials} trials, best {best} | {clock(elapsed)} elapsed, "
                   f"ETA {clock(eta)}")

    def stage(self, text: str) -> None:
        if self.tty and self._width:
            self.out.write("\n")
            self._width = 0
        self._emit(f"{text} ({clock(time.perf_counter() - self.t0)} elapsed)", final=True)

    def final(self, task: int, result: TuneResult) -> None:
        self.settled += 1
        t = self.tasks_[task]
        line = (f"[{self.settled}/{len(self.tasks_)}] {t.name}: default "
                f"{gflops(t, result.default_cost):.2f} -> best {gflops(t, result.best_cost):.2f} GFLOP/s "
                f"({result.speedup:.2f}x)")
        self._emit(line, final=not self.tty or self.settled == len(self.tasks_))


__all__ = ["ConsoleProgress"]
