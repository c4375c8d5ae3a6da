"""What an experiment is: a list of units to measure, a measurement of one unit, and a report drawn
from the measured rows.

A *unit* is the smallest piece of an experiment worth storing on its own: one model timed against its
peers, one (workload, tuner, seed) tuning curve. The runner stores each unit's figures in the tuning
log as soon as it is measured, so an interrupted run loses only the unit in flight, a rerun measures
only what is missing, and `--replot` draws the report from the log alone. Measuring a unit may itself
write tuning trials to the log (the tuned builds); those resume like `autorelay tune`.

An experiment module defines one `Experiment` value; nothing heavy (PyTorch, ONNX Runtime, models) is
imported before `units` or `measure` is called, so `autorelay reproduce --list` stays instant.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True)
class Unit:
    """One stored measurement of an experiment: `key` names it in the log (unique within the
    experiment and mode), `params` say what to measure, `expected_s` feeds the ETA."""

    key: str
    params: Mapping[str, Any] = field(default_factory=dict)
    expected_s: float = 10.0


@dataclass(frozen=True)
class Row:
    """A measured unit as the report sees it: its figures and where they were measured."""

    unit: str
    result: Mapping[str, Any]
    machine: str
    machine_label: str
    code_version: str | None
    reused: bool = False  # read from the log rather than measured by this run


@dataclass
class Context:
    """What a measurement may use: the settings of this run, the log, and a place for notes."""

    quick: bool
    threads: int
    db_url: str
    db: Any  # tuning_db.TuningDB: tuned builds log their trials here and resume from it
    out_dir: Path
    seed: int = 0
    log: TextIO = sys.stderr

    @property
    def mode(self) -> str:
        """The mode a stored row belongs to: a quick row never stands in for a full one, nor a
        1-thread row for a 2-thread one."""
        return f"{'quick' if self.quick else 'full'}-t{self.threads}"

    def note(self, text: str) -> None:
        print(f"  {text}", file=self.log, flush=True)


@dataclass
class Report:
    """What an experiment writes: CSV rows (the raw numbers), a Markdown text (a table, with the
    paper's figure beside ours where it gives one) and the figures to draw (file stem -> a function
    drawing onto a matplotlib Figure)."""

    csv_rows: list[dict[str, Any]]
    markdown: str
    figures: dict[str, Callable[[Any], None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A published experiment, reproduced. `available` returns why it cannot run here (a missing
    GPU, say), or None."""

    name: str
    title: str
    reference: str  # paper, section / figure
    quick_minutes: float  # expected duration on a 2-core machine
    full_minutes: float
    units: Callable[[Context], Sequence[Unit]]
    measure: Callable[[Context, Unit], Mapping[str, Any]]
    report: Callable[[Context, Sequence[Row]], Report]
    available: Callable[[], str | None] = lambda: None

    def expected_minutes(self, quick: bool) -> float:
        return self.quick_minutes if quick else self.full_minutes


__all__ = ["Context", "Experiment", "Report", "Row", "Unit"]
