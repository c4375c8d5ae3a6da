"""`autorelay db ...`: inspect and maintain the tuning log from the shell.

`search/cli.py` calls `add_db_commands(subparsers)`. Every failure prints one line to stderr and
exits non-zero (1: a TuningDBError, 2: bad usage from argparse); tables are plain aligned text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

from .cli_args import positive_int
from .cli_plans import list_plans, show_layout_plan
from .cli_tables import fmt_seconds, table, when
from .db import TuningDB, open_db
from .errors import JSONLImportError, TuningDBError
from .queries import IN_PLACE, RETIMED
from .results_jsonl import export_results, import_results


def add_db_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `db` command group on an argparse subparsers object."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="tuning log: file path, sqlite:///PATH or postgresql://... "
        "(default: $AUTORELAY_DB, else the user's data directory)",
    )
    db = subparsers.add_parser("db", help="inspect and maintain the tuning log", parents=[common])
    sub = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")

    def add(
        name: str, help: str, func: Callable[[TuningDB, argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, parents=[common])
        p.set_defaults(func=_runner(func))
        return p

    add("stats", "counts per target", _stats)
    best = add("best", "the fastest configs of a workload on a target", _best)
    best.add_argument("--workload", required=True, metavar="KEY", help="workload key")
    best.add_argument("--target", required=True, help="target string, e.g. 'llvm -mcpu=skylake'")
    best.add_argument("-k", type=positive_int, default=5, help="how many configs (default 5)")
    best.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    plans = add("plans", "stored quantization plans (fastest first; * = a search's pick)", list_plans)
    plans.add_argument("--model-key", metavar="KEY", help="only this model (autorelay.lower.model_key)")
    plans.add_argument("--target", help="only this target")
    lay = add("plan", "a model's stored layout plan: per conv layer its block, kernel and transform times",
              show_layout_plan)
    lay.add_argument("--model", required=True, metavar="M", help="the model's name as tuned (or its key)")
    lay.add_argument("--target", help="only this target (default: the latest plan of every target)")
    exp = add("export", "write every measurement (or experiment result) as JSON lines", _export)
    exp.add_argument("file", help="output .jsonl file")
    exp.add_argument("--results", action="store_true",
                     help="write the `autorelay reproduce` results instead of the measurements")
    exp.add_argument("--experiment", metavar="NAME", help="with --results: only this experiment's")
    imp = add("import", "read measurements (or experiment results) from JSON lines", _import)
    imp.add_argument("file", help="input .jsonl file")
    imp.add_argument("--strict", action="store_true", help="import nothing if any line is bad")
    imp.add_argument("--results", action="store_true", help="the file holds experiment results")
    mer = add("merge", "copy in every measurement and experiment result of another log that this one lacks",
              _merge)
    mer.add_argument("other", metavar="OTHER_URL", help="the other log (path or URL)")
    pr = add("prune", "keep only the K fastest configs per workload and target", _prune)
    pr.add_argument("--keep-best", type=int, required=True, metavar="K")
    pr.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    pr.add_argument("--drop-errors", action="store_true",
                    help="delete failed measurements too (by default they stay, so a resumed tuner "
                    "does not retry a crashing config)")
    return db


def _runner(func: Callable[[TuningDB, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            with open_db(getattr(args, "db", None)) as db:
                return func(db, args)
        except TuningDBError as e:
            print(f"autorelay db {args.db_command}: {e}", file=sys.stderr)
            return 1

    return run


def _stats(db: TuningDB, args: argparse.Namespace) -> int:
    s = db.stats()
    print(f"tuning log {db.url}")
    print(
        table(
            ["measurements", "workloads", "targets", "configs", "runs", "errors"],
            [[s["measurements"], s["workloads"], s["targets"], s["configs"], s["runs"], s["errors"]]],
        )
    )
    if s["per_target"]:
        print()
        print(
            table(
                ["target", "measurements", "workloads", "errors", "first", "last"],
                [
                    [
                        t["target"],
                        t["measurements"],
                        t["workloads"],
                        t["errors"],
                        when(t["first"]),
                        when(t["last"]),
                    ]
                    for t in s["per_target"]
                ],
            )
        )
    return 0


def _best(db: TuningDB, args: argparse.Namespace) -> int:
    recs = db.best(args.workload, args.target, k=args.k)
    if args.json:
        for r in recs:
            print(
                json.dumps(
                    {"config": r.config, "mean_cost": r.mean_cost, "std_cost": r.std_cost, "costs": r.costs}
                )
            )
        return 0
    if not recs:
        print(
            f"no successful measurement of workload {args.workload!r} on target {args.target!r}",
            file=sys.stderr,
        )
        return 1
    print(
        table(
            ["rank", "mean", "std", "repeats", "measured", "config"],
            [
                [
                    i,
                    fmt_seconds(r.mean_cost),
                    fmt_seconds(r.std_cost),
                    len(r.costs),
                    when(r.recorded_at),
                    json.dumps(r.config, sort_keys=True),
                ]
                for i, r in enumerate(recs, start=1)
            ],
        )
    )
    chosen = db.pick(args.workload, args.target)
    if chosen is not None and chosen.runner_version in RETIMED:
        in_place = chosen.runner_version == IN_PLACE
        how = "in place, against its default and runner-ups" if in_place else "interleaved"
        print(f"build uses (won the {how} re-measurement, median "
              f"{fmt_seconds(statistics.median(chosen.costs))}): {json.dumps(chosen.config, sort_keys=True)}")
    return 0


def _export(db: TuningDB, args: argparse.Namespace) -> int:
    if args.results:
        n = export_results(db.engine, args.file, args.experiment)
        print(f"exported {n} experiment results to {args.file}")
        return 0
    if args.experiment:
        raise TuningDBError("--experiment applies to --results only")
    n = db.export_jsonl(args.file)
    print(f"exported {n} measurements to {args.file}")
    return 0


def _import(db: TuningDB, args: argparse.Namespace) -> int:
    if args.results:
        added, present, errors = import_results(db.engine, args.file)
        _print_bad_lines(args.file, errors)
        print(f"imported {added} experiment results from {args.file} ({present} already present, "
              f"{len(errors)} bad lines)")
        return 1 if errors else 0
    try:
        report = db.import_jsonl(args.file, strict=args.strict)
    except JSONLImportError as e:
        _print_bad_lines(args.file, e.report.errors)  # type: ignore[attr-defined]
        raise
    _print_bad_lines(args.file, report.errors)
    print(report.summary())
    return 1 if report.errors else 0


def _print_bad_lines(path: str, errors: list[tuple[int, str]], limit: int = 20) -> None:
    for lineno, msg in errors[:limit]:
        print(f"{path}:{lineno}: {msg}", file=sys.stderr)
    if len(errors) > limit:
        print(f"... and {len(errors) - limit} more bad lines", file=sys.stderr)


def _merge(db: TuningDB, args: argparse.Namespace) -> int:
    report = db.merge_from(args.other)
    print(
        f"merged {report.imported} new measurements from {report.source} "
        f"({report.duplicates} already present) and {report.experiment_results} experiment results"
    )
    return 0


def _prune(db: TuningDB, args: argparse.Namespace) -> int:
    done = db.prune(args.keep_best, dry_run=args.dry_run, keep_errors=not args.drop_errors)
    verb = "would delete" if args.dry_run else "deleted"
    print(table(["", "measurements", "configs"], [[verb, done["measurements"], done["configs"]]]))
    return 0
