"""`autorelay db ...`: inspect and maintain the tuning log from the shell.

`search/cli.py` calls `add_db_commands(subparsers)`. Every failure prints one line to stderr and
exits non-zero (1: a TuningDBError, 2: bad usage from argparse); tables are plain aligned text.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from .cli_args import positive_int
from .db import TuningDB, open_db
from .errors import JSONLImportError, TuningDBError
from .layout_plans import LayoutPlanRecord
from .plans import PlanRecord
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
    plans = add("plans", "stored quantization plans (fastest first; * = a search's pick)", _plans)
    plans.add_argument("--model-key", metavar="KEY", help="only this model (autorelay.lower.model_key)")
    plans.add_argument("--target", help="only this target")
    lay = add("plan", "a model's stored layout plan: per conv layer its block, kernel and transform times",
              _layout_plan)
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


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned text columns with a rule under the header; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(row[i], (int, float)) for row in rows) and rows != [] for i in range(len(headers))
    ]

    def fmt(values: Sequence[str]) -> str:
        parts = [v.rjust(wd) if num else v.ljust(wd) for v, wd, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    return "\n".join([fmt(headers), "  ".join("-" * wd for wd in widths)] + [fmt(r) for r in cells])


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def fmt_seconds(s: float | None) -> str:
    """1.5e-05 -> '15.00 us': costs are seconds, people read them in the right unit."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale * 0.9995:  # 0.9999999e-3 s is "1.000 ms", not "1000.000 us"
            return f"{s / scale:.3f} {unit}"
    return f"{s / 1e-9:.1f} ns"


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


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
                        _when(t["first"]),
                        _when(t["last"]),
                    ]
                    for t in s["per_target"]
                ],
            )
        )
    return 0


def _plans(db: TuningDB, args: argparse.Namespace) -> int:
    recs = db.plans(args.model_key, args.target)
    if not recs:
        print("no quantization plans stored", file=sys.stderr)
        return 1
    rows = []
    for r in recs:
        layers = r.plan.get("precisions")
        int8 = "?"  # the plan's JSON is the compiler's; only its "precisions" map is read here
        if isinstance(layers, dict):
            int8 = f"{sum(p == 'int8' for p in layers.values())}/{len(layers)}"
        rows.append(["*" if r.chosen else "", r.id, r.model or r.model_key[:12], r.target,
                     f"{r.latency_ms:.4g} ms", f"{r.fp32_latency_ms:.4g} ms" if r.fp32_latency_ms else "-",
                     r.metric, f"{r.accuracy_drop:.4g}", int8,
                     _when(r.recorded_at)])
    print(table(["", "id", "model", "target", "latency", "fp32", "metric", "drop", "int8 layers", "stored"],
                rows))
    return 0


def _layout_plan(db: TuningDB, args: argparse.Namespace) -> int:
    recs = db.layout_plans(args.model, args.target)
    if not recs:
        print(f"autorelay db plan: no layout plan stored for model {args.model!r}"
              f"{_stored_models(db, args.model, args.target)}", file=sys.stderr)
        return 1
    latest = {r.target: r for r in reversed(recs)}  # newest first in recs: the last write wins
    for r in latest.values():
        info = r.info
        times = ", ".join(f"{k} {v:.4g} ms" for k, v in info.get("latencies_ms", {}).items())
        again = ", ".join(f"{k} {v:.4g} ms" for k, v in (info.get("confirmed_ms") or {}).items())
        print(f"layout plan #{r.id} of {r.model or r.model_key} on {r.target} ({_when(r.recorded_at)}): "
              f"builds use {r.winner}; end to end: {times or f'plan {r.latency_ms:.4g} ms'}"
              + (f"; the finalists again (this timing decided): {again}" if again else ""))
        if "modeled_ms" in info:
            print(f"modeled cost {info['modeled_ms']:.4g} ms (kernels + transforms); "
                  f"{'exact' if info.get('exact', True) else 'beam (approximate)'} dynamic program")
        if info.get("left_out_blocks"):
            print(f"not searched: blocks of {', '.join(map(str, info['left_out_blocks']))} "
                  "(the tune tuned none of their conv kernels)")
        fusion = _fusion_line(r.plan, info)
        if fusion:
            print(fusion)
        precision = _precision_on_layout(db, r)
        if precision is not None:
            print(f"precision plan #{precision.id} measured on this layout plan "
                  f"({_when(precision.recorded_at)}): {precision.latency_ms:.4g} ms against fp32 "
                  f"{precision.fp32_latency_ms or float('nan'):.4g} ms, {precision.metric} drop "
                  f"{precision.accuracy_drop:.4g} (bound {precision.max_drop}); `--precision plan` builds it")
        layers = info.get("layers", [])
        blocks = sorted({int(b) for row in layers for b in row.get("kernel_ms", {})})
        rows = []
        for row in layers:  # the JSON is the compiler's; only these display fields are read
            kernel = row.get("kernel_ms", {})
            block, tile = row.get("block", "?"), row.get("winograd_tile", 0)
            rows.append([row.get("layer", "?"), f"{block} (F{tile} Winograd)" if tile else block]
                        + [_ms(kernel.get(str(b))) for b in blocks]
                        + [_ms(row.get("transform_ms")), row.get("source", "-")]
                        + ([_layer_precision(precision, row.get("layer", "?"))] if precision else []))
        print(table(["layer", "block", *[f"kernel@{b} ms" for b in blocks], "transform in ms", "source",
                     *(["precision"] if precision else [])], rows))
    return 0


# `OpPattern.OUT_ELEMWISE_FUSABLE` as a stored FusionPlan's rules write it: a rule with this consumer
# fuses a producer into a convolution or dense layer, a prologue (Relay's own rules have none)
ANCHOR_PATTERN = 4


def _stored_models(db: TuningDB, asked: str, target: str | None) -> str:
    """What to ask for instead: the models with plans whose name differs from `asked` only by an
    image size or batch (`resnet-18@32`, `resnet-18:b8`, as `tune` names them), else every model with
    a plan."""
    def base(name: str) -> str:
        return re.split(r"[@:]", name)[0].lower().replace("_", "-")

    stored = sorted({r.model for r in db.layout_plans(None, target) if r.model})
    near = [m for m in stored if base(m) == base(asked)]
    if near:
        return f"; stored for {', '.join(near)} (give --model {near[0]})"
    return f"; plans are stored for {', '.join(stored[:10])}" if stored else ""


def _fusion_line(plan: dict[str, Any], info: dict[str, Any]) -> str:
    """The plan's fusion as its layout search chose it (`info["fusion"]`, the variant): which of
    the search's prologue candidates (`info["prologue_edges"]`) it fuses, whether a shared producer
    is copied into each reader, which pooling epilogues it fuses (`info["pool_edges"]`), which
    depthwise bands (`info["band_edges"]`) and which of their expansions (`info["expansion_edges"]`),
    and whether values are stored with zero borders; ""
    for a plan stored before fusion was a choice."""
    if "fusion" not in info and not info.get("prologue_edges"):
        return ""
    fusion = plan.get("fusion") if isinstance(plan.get("fusion"), dict) else {}
    parts = ["Relay's rules"]
    edges = info.get("prologue_edges") or {}
    if edges:
        off = {f"{a}->{c}" for a, c in fusion.get("disabled_edges", [])}
        prologues = any(consumer == ANCHOR_PATTERN for _, consumer in fusion.get("rules", []))
        fused = {k: v for k, v in edges.items() if k not in off} if prologues else {}
        rest = {k: v for k, v in edges.items() if k not in fused}
        parts.append(f"as prologues {_edges(fused) or 'none'}"
                     + (f" (not fused: {_edges(rest)})" if rest else ""))
    if fusion.get("copy_shared"):
        parts.append("a producer several of them read copied into each")
    pools = info.get("pool_edges") or {}
    if pools:
        parts.append(f"pooling epilogues {_edges(pools)}" if fusion.get("pool_epilogues")
                     else f"no pooling epilogue (candidates: {_edges(pools)})")
    bands = _program_order(info.get("band_edges") or {})
    if bands:
        off = {f"{a}->{c}" for a, c in fusion.get("disabled_edges", [])}
        fused = {k: f"{v} rows" for k, v in bands.items() if fusion.get("depthwise_bands") and k not in off}
        rest = {k: f"{v} rows" for k, v in bands.items() if k not in fused}
        parts.append(f"depthwise bands {_edges(fused) or 'none'}"
                     + (f" (not fused: {_edges(rest)})" if rest else ""))
        grown = _program_order(info.get("expansion_edges") or {})
        if grown:  # an expansion joins only a fused band: the one whose depthwise convolution it feeds
            named = {k: f"{v['rows']} rows, band {v['band']}" for k, v in grown.items()}
            on = {k: v for k, v in named.items()
                  if fusion.get("expansions") and k not in off and grown[k]["band"] in fused}
            rest = {k: v for k, v in named.items() if k not in on}
            parts.append(f"expansions {_edges(on) or 'none'}"
                         + (f" (not fused: {_edges(rest)})" if rest else ""))
    parts.append("padding folded into producers (zero-bordered values)" if fusion.get("halos", True)
                 else "no zero-bordered values (each convolution pads its input)")
    return f"fusion ({info.get('fusion', 'plan')}): " + "; ".join(parts)


def _program_order(edges: dict[str, Any]) -> dict[str, Any]:
    """Edges "a->c" in program order (the log stores their names sorted as text)."""
    return dict(sorted(edges.items(), key=lambda kv: tuple(int(i) for i in kv[0].split("->"))))


def _edges(edges: dict[str, Any]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in edges.items())


def _precision_on_layout(db: TuningDB, layout: LayoutPlanRecord) -> PlanRecord | None:
    """The quantization plan the latest `autorelay quantize` picked on this layout plan, if any."""
    picked = [p for p in db.plans(layout.model_key, layout.target)
              if p.chosen and (p.info or {}).get("layout_plan") == layout.plan]
    return max(picked, key=lambda p: (p.recorded_at, p.id), default=None)


def _layer_precision(rec: PlanRecord, layer: str) -> str:
    """A layer's precision in a stored quantization plan (its JSON is the compiler's: "precisions"
    per layer, else "default")."""
    precisions = rec.plan.get("precisions", {})
    return precisions.get(layer, rec.plan.get("default", "int8")) if isinstance(precisions, dict) else "?"


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.4f}"


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
                    _when(r.recorded_at),
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
