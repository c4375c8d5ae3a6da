"""`autorelay reproduce NAME [--quick] [--db URL] [--out DIR] [--replot]` and `--list`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from search.durations import clock
from tuning_db.cli_args import nonneg_int, positive_int

from .registry import experiments, get
from .runner import ReproduceError, run_experiment


def add_reproduce_command(sub: Any, db_help: str) -> None:
    p = sub.add_parser("reproduce", help="rerun a published experiment (Relay, AutoTVM): CSV, table, figure",
                       description="Measure a published experiment into the tuning log and write "
                                   "NAME.csv, NAME.md and PNG figures. Units already in the log are not "
                                   "measured again.")
    p.add_argument("name", nargs="?", help="the experiment (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments with their references and times")
    p.add_argument("--quick", action="store_true",
                   help="the reduced version: small trial budgets, fewer models (minutes)")
    p.add_argument("--db", metavar="URL", default=None, help=db_help)
    p.add_argument("--out", metavar="DIR", default="autorelay-results",
                   help="where NAME.csv / NAME.md / *.png go (default: ./autorelay-results/NAME)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="T",
                   help="kernel threads (default: every core); results are stored per thread count")
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--replot", action="store_true", help="redraw from the log; measure nothing")
    p.add_argument("--remeasure", action="store_true", help="measure every unit again (new rows)")
    p.add_argument("--units", metavar="PATTERN", action="append", default=[],
                   help="measure only the units whose key matches this shell pattern (repeatable; "
                        "e.g. 'C3/*'); the report still draws every stored unit")
    p.add_argument("--all-machines", action="store_true",
                   help="report every machine's rows in the log side by side (after a db merge)")
    p.set_defaults(func=cmd_reproduce)


def _list() -> int:
    print(f"{'name':<16}{'quick':>8}{'full':>9}  reference")
    for e in experiments():
        why = e.available()
        print(f"{e.name:<16}{clock(e.quick_minutes * 60):>8}{clock(e.full_minutes * 60):>9}  {e.title}: "
              f"{e.reference}" + (f"  [cannot run here: {why}]" if why else ""))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    if not args.name:
        print("autorelay reproduce: name an experiment, or --list", file=sys.stderr)
        return 2
    try:
        exp = get(args.name)
    except KeyError as e:
        print(f"autorelay reproduce: {e.args[0]}", file=sys.stderr)
        return 2
    import tuning_db
    from autorelay.codegen import host_threads

    from .experiment import Context

    db = tuning_db.open(args.db)
    ctx = Context(quick=args.quick, threads=args.threads or host_threads(), db_url=db.url, db=db,
                  out_dir=Path(args.out) / exp.name, seed=args.seed)
    if not args.replot:
        extent = (f"the units matching {', '.join(args.units)} of a" if args.units else "expected about "
                  f"{clock(exp.expected_minutes(args.quick) * 60)} on a 2-core machine for the whole")
        print(f"{exp.name}: {exp.title} ({exp.reference}); {extent} {'quick' if args.quick else 'full'} run",
              file=sys.stderr)
    try:
        summary = run_experiment(exp, ctx, replot=args.replot, remeasure=args.remeasure,
                                 all_machines=args.all_machines, only=args.units)
    except ReproduceError as e:
        print(f"autorelay reproduce: {e}", file=sys.stderr)
        return 1
    finally:
        db.close()
    print(f"{exp.name}: {len(summary.measured)} units measured, {len(summary.reused)} read from the log, "
          f"{len(summary.failed)} failed; report in {ctx.out_dir}")
    return 1 if summary.failed else 0


__all__ = ["add_reproduce_command", "cmd_reproduce"]
