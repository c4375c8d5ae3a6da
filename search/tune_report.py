"""What `tune_model` reports: progress callbacks while it works, and the final per-task table
(`ModelTuneResult.table`, which the CLI prints)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from search.extract import ModelTask, Skipped
from search.in_place import describe_checks
from search.models import disagreement
from search.plan_screen import DEFER_RATIO, TRAILING_RATIO
from search.tune import TuneResult


class Progress:
    """What `tune_model` reports while it works; the CLI prints it. Every method is optional."""

    def tasks(self, tasks: list[ModelTask], skipped: list[Skipped], budget: int, logged: list[int]) -> None:
        """Extraction done: the tasks, kernels left out, the trial budget and trials already logged."""

    def trials(self, task: int, trials: int, best_s: float, spent: int) -> None:
        """A batch of `task` finished: its total trials and best cost; `spent` new trials in all."""

    def stage(self, text: str) -> None:
        """A phase starts (final re-measurement, end-to-end timing)."""

    def final(self, task: int, result: TuneResult) -> None:
        """`task`'s pick is settled (re-measured interleaved with the default)."""


@dataclass
class TaskRow:
    """One line of the final table."""

    task: ModelTask
    trials: int  # distinct configs measured in all (logged before + new)
    new_trials: int
    default_s: float  # both re-measured in the same interleaved rounds
    best_s: float
    best_search_s: float  # the best figure seen during the search (optimistic under noise)
    config: Any = None
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.default_s / self.best_s if self.best_s > 0 and math.isfinite(self.best_s) else math.nan

    def gflops(self, seconds: float) -> float:
        return self.task.flops / seconds / 1e9 if seconds > 0 and math.isfinite(seconds) else math.nan


@dataclass
class ModelTuneResult:
    model: str
    target: str  # the tuning target the log files measurements under
    tuner: str
    budget: int
    rows: list[TaskRow]
    skipped: list[Skipped]
    run: int | None
    seconds: float
    interrupted: bool = False
    latency_before_s: float = math.nan
    latency_after_s: float = math.nan
    max_abs_diff: float = math.nan  # tuned vs default outputs, same inputs
    output_scale: float = math.nan  # the default build's largest output magnitude
    source_counts: dict[str, int] = field(default_factory=dict)
    report: Any = None  # the tuned executable's BuildReport
    pipeline: str = ""  # how the pass pipeline was chosen (`PipelineChoice.describe`)
    layout: Any = None  # pipeline "plan": the layout search's result (`LayoutSearchResult`)
    trailing: dict[str, float] = field(default_factory=dict)  # not re-measured: name -> times its leader
    # deferred tasks the budget never reached: name -> times its layers' best when screened (nan: a
    # kernel the default plan does not run)
    deferred: dict[str, float] = field(default_factory=dict)
    in_place: list[Any] = field(default_factory=list)  # the picks confirmed in place (`InPlaceCheck`)
    # a finished plan tune run again: its trials on forms the chosen build does not run (not in rows)
    other_forms: int = 0
    relayout_trials: int = 0  # a plan tune's trials on the re-layouts its layout program weighed

    @property
    def new_trials(self) -> int:
        return sum(r.new_trials for r in self.rows)

    @property
    def speedup(self) -> float:
        ok = self.latency_after_s > 0 and math.isfinite(self.latency_after_s)
        return self.latency_before_s / self.latency_after_s if ok else math.nan

    def table(self) -> str:
        """Per task: occurrences, FLOP share, trials, default vs best (ms, GFLOP/s), speedup."""
        w = max(30, min(48, max((len(r.task.name) for r in self.rows), default=0)))  # room for @template
        head = (f"{'task':<{w}} {'n':>2} {'flops%':>6} {'trials':>6} {'default ms':>10} {'GFLOP/s':>8} "
                f"{'best ms':>9} {'GFLOP/s':>8} {'speedup':>7}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            t = r.task
            lines.append(f"{t.name[:w]:<{w}} {t.count:>2} {t.flop_share * 100:>5.1f}% {r.trials:>6} "
                         f"{_ms(r.default_s):>10} {_num(r.gflops(r.default_s)):>8} {_ms(r.best_s):>9} "
                         f"{_num(r.gflops(r.best_s)):>8} {_num(r.speedup, 'x'):>7}")
        for s in self.skipped:
            lines.append(f"{s.name[:w]:<{w}} {s.count:>2}  not tuned: {s.reason}")
        lines.append("-" * len(head))
        other = f"; {self.other_forms} more on forms the build does not run" if self.other_forms else ""
        other += f"; {self.relayout_trials} on re-layouts" if self.relayout_trials else ""
        lines.append(f"trials: {self.new_trials} new, {sum(r.trials for r in self.rows)} logged in all "
                     f"(budget {self.budget}{other}); {self.seconds:.1f} s; tuner {self.tuner}")
        lines.append(f"target: {self.target}" + (f"; {self.pipeline}" if self.pipeline else ""))
        if self.trailing:
            lines.append(f"not re-measured (best config more than {TRAILING_RATIO:g}x the best form of its "
                         "layers; default/best columns are search figures): "
                         + ", ".join(f"{n} ({r:.2f}x)" for n, r in self.trailing.items()))
        if self.deferred:
            lines.append(f"deferred and never tuned (default schedule over {DEFER_RATIO:g}x the best form "
                         "of its layers when screened, or not run by the default plan): "
                         + ", ".join(f"{n} ({'not in the default plan' if math.isnan(r) else f'{r:.2f}x'})"
                                     for n, r in self.deferred.items()))
        if self.layout is not None:
            lines.append(self.layout.table())
        if self.in_place:
            lines.append(describe_checks(self.in_place))
        if math.isfinite(self.latency_before_s):
            lines.append(f"end to end: {self.latency_before_s * 1e3:.3f} ms default -> "
                         f"{self.latency_after_s * 1e3:.3f} ms tuned ({self.speedup:.2f}x); "
                         f"max |tuned - default| = {self.max_abs_diff:.2g}; kernels by source: "
                         + ", ".join(f"{k} {v}" for k, v in sorted(self.source_counts.items())))
            warning = disagreement("the tuned and the default build's outputs", self.max_abs_diff,
                                   self.output_scale)
            lines.extend(filter(None, [warning]))
        if self.interrupted:
            lines.append("interrupted: every finished measurement is in the log; rerun the same command "
                         "to resume")
        return "\n".join(lines)


def _ms(s: float) -> str:
    return f"{s * 1e3:.4f}" if math.isfinite(s) else "-"


def _num(x: float, suffix: str = "") -> str:
    return f"{x:.2f}{suffix}" if math.isfinite(x) else "-"


__all__ = ["ModelTuneResult", "Progress", "TaskRow"]
