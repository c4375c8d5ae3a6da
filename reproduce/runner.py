"""Running an experiment: measure the units the log lacks, store each as it lands, then write the
report (CSV, Markdown, PNG) from the log's rows.

Reuse is by (experiment, mode, machine fingerprint, unit key): a rerun on the same kind of machine
measures nothing it already has, and `replot` measures nothing at all (it names the units still
missing instead). A unit whose measurement raises is reported and left unstored, so the next run
retries it; the others are kept.
"""

from __future__ import annotations

import fnmatch
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from search.durations import clock

from .experiment import Context, Experiment, Report, Row, Unit
from .machine import code_version, fingerprint, label, machine_info
from .output import write_report


class ReproduceError(Exception):
    """An experiment cannot run or report as asked (unavailable here, nothing stored for --replot)."""


@dataclass
class RunSummary:
    measured: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


def bar(done: int, total: int, width: int = 20) -> str:
    """`[#########...........]`: how much of the run is done."""
    filled = round(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class _Eta:
    """Remaining time: the units' expected seconds, scaled by how the finished ones compared."""

    def __init__(self, units: Sequence[Unit]) -> None:
        self.left = sum(u.expected_s for u in units)
        self.expected_done = 0.0
        self.actual_done = 0.0

    def done(self, unit: Unit, seconds: float) -> float:
        self.left -= unit.expected_s
        self.expected_done += unit.expected_s
        self.actual_done += seconds
        scale = self.actual_done / self.expected_done if self.expected_done > 0 else 1.0
        return max(0.0, self.left) * scale


def _rows(ctx: Context, exp: Experiment, machine: str | None, fresh: set[str]) -> list[Row]:
    stored = ctx.db.experiment_results(exp.name, ctx.mode, machine)
    return [Row(unit=r.unit, result=r.result, machine=r.machine, machine_label=label(r.machine_info),
                code_version=r.code_version, reused=r.unit not in fresh) for r in stored]


def select_units(units: Sequence[Unit], patterns: Sequence[str]) -> list[Unit]:
    """The units whose key matches one of the shell-style `patterns` (all of them when there are
    none): a long experiment measured in slices, one workload at a time, say."""
    if not patterns:
        return list(units)
    chosen = [u for u in units if any(fnmatch.fnmatchcase(u.key, p) for p in patterns)]
    if not chosen:
        raise ReproduceError(f"no unit matches {', '.join(patterns)}; the units are "
                             f"{', '.join(u.key for u in units[:8])}{' ...' if len(units) > 8 else ''}")
    return chosen


def run_experiment(exp: Experiment, ctx: Context, *, replot: bool = False, remeasure: bool = False,
                   all_machines: bool = False, only: Sequence[str] = ()) -> RunSummary:
    """Measure what `exp` lacks in the log (nothing with `replot`; everything with `remeasure`;
    with `only`, just the units matching those patterns), then write its report from every stored
    unit into `ctx.out_dir`; progress goes to `ctx.log`."""
    out = ctx.log
    info = machine_info()
    machine = fingerprint(info)
    summary = RunSummary()
    if not replot:
        why = exp.available()
        if why:
            raise ReproduceError(f"{exp.name} cannot run here: {why}")
        units = select_units(exp.units(ctx), only)
        stored = [] if remeasure else ctx.db.experiment_results(exp.name, ctx.mode, machine)
        have = {r.unit for r in stored}
        todo = [u for u in units if u.key not in have]
        summary.reused = [u.key for u in units if u.key in have]
        expected = sum(u.expected_s for u in todo)
        print(f"{exp.name} ({ctx.mode}) on {label(info)}: {len(units)} units, {len(summary.reused)} already "
              f"in the log; expected about {clock(expected)} for the rest", file=out, flush=True)
        eta, t_start = _Eta(todo), time.perf_counter()
        for i, unit in enumerate(todo, start=1):
            t0 = time.perf_counter()
            try:
                result = dict(exp.measure(ctx, unit))
            except KeyboardInterrupt:
                raise
            except Exception as e:  # one unit's failure is reported, not the end of the experiment
                summary.failed[unit.key] = f"{type(e).__name__}: {e}"
                print(f"{bar(i, len(todo))} {i}/{len(todo)} {unit.key}: FAILED ({type(e).__name__}: {e})",
                      file=out, flush=True)
                traceback.print_exc(limit=3, file=out)
                continue
            ctx.db.store_experiment_result(exp.name, ctx.mode, unit.key, machine, result,
                                           machine_info=info, code_version=code_version())
            summary.measured.append(unit.key)
            took = time.perf_counter() - t0
            left = eta.done(unit, took)
            print(f"{bar(i, len(todo))} {i}/{len(todo)} {unit.key}: {took:.1f} s | "
                  f"{clock(time.perf_counter() - t_start)} elapsed, ETA {clock(left)}", file=out, flush=True)
    rows = _rows(ctx, exp, None if all_machines else machine, set(summary.measured))
    if not rows:
        raise ReproduceError(f"no stored results of {exp.name} ({ctx.mode}) on this machine in "
                             f"{ctx.db_url}; run it without --replot first")
    if replot:
        wanted = {u.key for u in exp.units(ctx)} if exp.available() is None else set()
        missing = sorted(wanted - {r.unit for r in rows})
        if missing:
            print(f"  ({len(missing)} units not in the log yet: {', '.join(missing[:6])}"
                  f"{' ...' if len(missing) > 6 else ''})", file=out)
    summary.files = write_report(exp, ctx, _report(exp, ctx, rows), rows, out)
    return summary


def _report(exp: Experiment, ctx: Context, rows: list[Row]) -> Report:
    """The experiment's report; with rows of several machines (a merged log, `--all-machines`), one
    section per machine, side by side in one file, each CSV row naming its machine."""
    by_machine: dict[str, list[Row]] = {}
    for r in rows:
        by_machine.setdefault(r.machine, []).append(r)
    if len(by_machine) == 1:
        return exp.report(ctx, rows)
    merged = Report([], "")
    for k, (machine, mine) in enumerate(sorted(by_machine.items())):
        part = exp.report(ctx, mine)
        merged.csv_rows += [{"machine": machine, **row} for row in part.csv_rows]
        merged.markdown += f"## On {mine[0].machine_label} (`{machine}`)\n\n{part.markdown.rstrip()}\n\n"
        merged.figures.update({f"{stem}-m{k + 1}": draw for stem, draw in part.figures.items()})
    return merged


__all__ = ["ReproduceError", "RunSummary", "run_experiment", "select_units"]
