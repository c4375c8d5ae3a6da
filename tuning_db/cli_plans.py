"""`autorelay db plans` and `autorelay db plan`: the stored quantization plans, and a model's stored
layout plan layer by layer (its blocks, kernel and transform times, fusion, and the precision plan
measured on it)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from .cli_tables import table, when
from .db import TuningDB
from .layout_plans import LayoutPlanRecord
from .plans import PlanRecord


def list_plans(db: TuningDB, args: argparse.Namespace) -> int:
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
                     when(r.recorded_at)])
    print(table(["", "id", "model", "target", "latency", "fp32", "metric", "drop", "int8 layers", "stored"],
                rows))
    return 0


def show_layout_plan(db: TuningDB, args: argparse.Namespace) -> int:
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
        print(f"layout plan #{r.id} of {r.model or r.model_key} on {r.target} ({when(r.recorded_at)}): "
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
                  f"({when(precision.recorded_at)}): {precision.latency_ms:.4g} ms against fp32 "
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


__all__ = ["ANCHOR_PATTERN", "list_plans", "show_layout_plan"]
