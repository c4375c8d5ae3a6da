"""The graph-level layout search (`autorelay tune --pipeline plan`): a channel block and a form (direct
or Winograd) per conv layer.

1. `plan_tasks`: the kernels to tune are those of every form a layer may take — the per-model
   pipelines' and the uniform plans' (each conv in NCHW or packed in each candidate block, direct
   or as Winograd).
2. After tuning, `search_layout` measures the costs (`search.layout_costs`: per layer its kernel
   time in each layout with the log's schedules, per edge its re-layout time), solves the layout
   program (`search.layout_dp`), builds the resulting plan and the per-model pipelines end to end
   with the log's schedules, times them interleaved and keeps the fastest. The modelled cost only
   ranks layouts; the end-to-end timing decides, so a plan that the model overrates (a transform
   that fusion hides, a pool that is slower packed) cannot make the model slower than the
   per-model pick. A channel block whose every conv kernel a plan tune left untuned, judged behind
   by its screening, is left out of both (`plan_screen.untuned_blocks`).
   The plan's fusion is chosen in the same timing: its prologue edges (injective producers, such as
   the layout transforms its blocks imply, that `FusionPlan.prologues` fuses into the kernel they
   feed) give fusion variants of the plan (`search.fusion_choice`), timed with it; the fastest
   variant is the plan. Being the fastest of several, its figure is flattered by the timing's
   noise, so it and the fastest per-model pipeline are timed again on their own to decide, with
   a third build: the best variant storing every value plainly (`FusionPlan.halos` off), for
   zero-bordered values (a convolution's padding folded into its producer) are not faster
   everywhere; and, where the best variant fuses depthwise bands, a fourth: it with the expansions
   whose expanded kernels ran faster than their pairs (`search.expansion_choice`). The fastest of
   them is the plan.
3. The plan is stored in the log (`tuning_db.layout_plans`) with its latency, the per-model
   latencies and the per-layer costs; `autorelay compile`/`run` on the log rebuild it exactly (see
   `search.pipeline_choice.stored_plan`), and `autorelay db plan --model M` prints it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import autorelay
from autorelay.codegen import resolve_target
from autorelay.ir.module import IRModule
from autorelay.primitive import KernelMemo
from autorelay.target import Target
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.grouped_blocks import BlockGroupedConvs
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes, pipeline_layout
from search.expansion_choice import Expansion, faster_expansions
from search.extract import BoundSource, Extraction, ModelTask
from search.fusion_choice import fused_tasks, fusion_candidates, without_halos
from search.kernel_prefetch import prefetch_kernels
from search.kernel_profiles import profile_keys
from search.layout_costs import (
    Form,
    LayerCost,
    candidate_blocks,
    candidate_plans,
    kernel_costs,
    layout_graph,
    solved_plan,
    winograd_tile,
)
from search.layout_dp import CONV, LayoutGraph, Solution, assign, breakdown, plan_cost
from search.models import (
    Model,
    PreparedModel,
    build_model,
    disagreement,
    max_difference,
    output_scale,
    prepare_model,
    run_inputs,
    schedule_source,
    time_interleaved,
)
from search.pipeline_choice import PLAN, candidates, prepare_plan


def plan_tasks(model: Model, target: str, threads: int | None
               ) -> tuple[PreparedModel, Extraction, dict[str, frozenset[str]]]:
    """The default pipeline's prepared model; the union (by workload key and template) of the
    tasks of every per-model pipeline, every uniform plan and the uniform plans' prologue-fused
    kernels (`search.fusion_choice`): what a layer may run as under any plan; and the conv layers
    each prologue-fused task implements (its scheduler group)."""
    tgt = resolve_target(target, threads)
    layers = conv_layers(model.mod)
    base = prepare_model(model, target, threads=threads, pipeline="default")
    others = [prepare_model(model, target, threads=threads, pipeline=p)
              for p in candidates(target, threads) if p != "default"]
    others += [prepare_plan(model, target, threads, plan)
               for plan in candidate_plans(layers, candidate_blocks(tgt))]
    tasks, skipped = list(base.extraction.tasks), list(base.extraction.skipped)
    seen = {(t.key, t.template) for t in tasks} | {(s.key, None) for s in skipped}  # alternatives kept
    for p in others:
        for t in p.extraction.tasks:
            if (t.key, t.template) not in seen and (t.key, None) not in seen:
                seen.add((t.key, t.template))
                tasks.append(t)
    fused, groups = fused_tasks(model, target, threads, candidate_blocks(tgt), {key for key, _ in seen})
    return base, Extraction([*tasks, *fused], skipped, base.extraction.total_flops), groups


@dataclass
class LayerRow:
    layer: str
    block: int
    tile: int  # its Winograd tile (0: direct)
    kernel_s: dict[int, float]  # per candidate layout
    transform_s: float  # re-layouts paid on its input under the plan
    source: str  # where the chosen kernel's schedule came from (tuned / transferred / default)
    per_model_block: int  # its layout under the fastest per-model pipeline
    per_model_tile: int  # its Winograd tile there (0: direct)
    per_model_s: float  # its kernel time there


@dataclass
class LayoutSearchResult:
    plan: LayoutPlan
    solution: Solution
    graph: LayoutGraph
    latencies: dict[str, float]  # seconds per call: "plan" and each per-model pipeline (interleaved)
    modeled: dict[str, float]  # the program's cost (s) of the plan and of each per-model pipeline
    winner: str
    prepared: PreparedModel  # the winner's
    rows: list[LayerRow]
    max_abs_diff: float  # plan build vs default build, same inputs
    output_scale: float  # the default build's largest output magnitude (`models.output_scale`)
    record_id: int | None = None
    source: BoundSource | None = None  # the log as the winner's build read it (None: no log)
    fusion: str = PLAN  # the plan's fusion variant that `plan` is (a key of `latencies`)
    prologue_edges: dict[tuple[int, int], str] = field(default_factory=dict)  # its candidates
    shared_producers: bool = False  # whether a producer several of them read was a copy candidate
    pool_edges: dict[tuple[int, int], str] = field(default_factory=dict)  # pooling-epilogue candidates
    band_edges: dict[tuple[int, int], int] = field(default_factory=dict)  # depthwise bands: map rows
    expansion_edges: dict[tuple[int, int], Expansion] = field(default_factory=dict)  # the bands' expansions
    # the expansions whose kernels beat their pairs: (the expanded kernel's seconds, the pair's)
    expansion_kernels: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    # the plan's fastest fusion variant, the same without zero-bordered values (`without_halos`)
    # and the fastest per-model pipeline timed again on their own (seconds per call); that timing
    # decides between them
    confirmed: dict[str, float] = field(default_factory=dict)
    left_out: tuple[int, ...] = ()  # channel blocks not searched: the run tuned none of their conv kernels

    @property
    def plan_latency(self) -> float:
        """Seconds per call of `plan` (its best fusion variant), as the deciding timing measured it."""
        return self.confirmed.get(self.fusion, self.latencies.get(self.fusion, math.nan))

    def describe(self) -> str:
        times = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.latencies.items())
        again = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.confirmed.items())
        again = f"; the finalists again: {again}" if again else ""
        return f"pipeline {self.winner} (layout search: {times}{again})"

    def table(self) -> str:
        blocks = sorted({b for r in self.rows for b in r.kernel_s})
        head = f"{'layer':<10} {'layout':>7} " + " ".join(f"{f'k@{b} us':>9}" for b in blocks) + \
            f" {'xform us':>9} {'per-model':>9} {'source':<11}"
        lines = [head, "-" * len(head),
                 "(k@b: the fastest form in layout b; 0/F2, 16/F4: as Winograd in that layout)"]
        for r in self.rows:
            ks = " ".join(f"{r.kernel_s[b] * 1e6:9.1f}" if b in r.kernel_s else f"{'-':>9}" for b in blocks)
            lay, ref = layout_label(r.block, r.tile), layout_label(r.per_model_block, r.per_model_tile)
            lines.append(f"{r.layer:<10} {lay:>7} {ks} {r.transform_s * 1e6:9.1f} {ref:>9} "
                         f"{r.source:<11}")
        lines.append("modelled (kernels + transforms): " + ", ".join(
            f"{k} {v * 1e3:.3f} ms" for k, v in self.modeled.items() if math.isfinite(v))
            + ("" if self.solution.exact else " (beam: approximate)"))
        measured = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.latencies.items())
        if self.prologue_edges:
            edges = ", ".join(f"{a}->{c} ({name})" for (a, c), name in self.prologue_edges.items())
            lines.append(f"prologue edges (fusion candidates): {edges}")
        if self.pool_edges:
            pools = ", ".join(f"{a}->{c} ({name})" for (a, c), name in self.pool_edges.items())
            lines.append(f"pooling epilogues (fusion candidates): {pools}")
        if self.band_edges:
            bands = ", ".join(f"{a}->{c} ({rows} rows)" for (a, c), rows in self.band_edges.items())
            lines.append(f"depthwise bands (fusion candidates): {bands}")
        if self.expansion_edges:
            grown = ", ".join(f"{a}->{c} ({e.rows} rows, band {e.band[0]}->{e.band[1]})"
                              for (a, c), e in self.expansion_edges.items())
            lines.append(f"expansions of the bands (fusion candidates): {grown}")
            won = ", ".join(f"{a}->{c} {t * 1e6:.0f} us against {pair * 1e6:.0f}"
                            for (a, c), (t, pair) in self.expansion_kernels.items())
            lines.append(f"expanded kernels faster than their pairs: {won or 'none'}")
        if self.left_out:
            lines.append(f"left out: blocks of {', '.join(map(str, self.left_out))} (the run tuned none of "
                         "their conv kernels: each was pruned by the screening, or deferred and never drawn)")
        lines.append(f"the plan's best fusion: {self.fusion}")
        again = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in self.confirmed.items())
        again = f"the finalists again: {again}; " if again else ""
        lines.append(f"measured end to end: {measured}; {again}kept {self.winner}; "
                     f"max |plan - default| = {self.max_abs_diff:.2g}")
        warning = disagreement("the plan's and the default build's outputs", self.max_abs_diff,
                               self.output_scale)
        return "\n".join([*lines, *filter(None, [warning])])


def layout_label(block: int, tile: int) -> str:
    """A layer's form for reports: its block, then `/F4` when it runs as Winograd F(4x4)."""
    return f"{block}/F{tile}" if tile else str(block)


def per_model_forms(graph: IRModule, prepared: PreparedModel) -> dict[str, Form]:
    """Each conv layer of `graph` (the model after the graph optimisations, where layers are
    named) -> its form, (block, Winograd tile), in a per-model pipeline's build; its block as the
    pipeline asks for it, as the layer costs name it (a conv with fewer channels is built in a
    divisor of it)."""
    asked, _ = pipeline_layout(prepared.pipeline)
    built = built_layers(graph, prepared.module)
    # `default` (asking NCHW) packs its grouped and dilated convs, in blocks of `BlockGroupedConvs.block`
    return {name: ((asked or BlockGroupedConvs.block) if block else 0, winograd_tile(fn))
            for name, (block, fn) in built.items()}


def modeled_cost(graph: LayoutGraph, costs: dict[str, LayerCost], forms: dict[str, Form]) -> float:
    """The layout program's cost of a build whose layers take `forms`: the cost of their layouts,
    each conv node's kernel then moved from its layout's fastest form to the form it takes; NaN
    when the build takes a layout the program does not offer (a block left out of the search)."""
    try:
        layouts = assign(graph, {name: block for name, (block, _) in forms.items()})
    except ValueError:
        return math.nan
    total = plan_cost(graph, layouts)
    for node in graph.nodes:
        cost, form = costs.get(node.name), forms.get(node.name)
        if node.kind == CONV and cost is not None and form in cost.forms and form[0] in cost.kernel:
            total += cost.forms[form] - cost.kernel[form[0]]
    return total


@dataclass
class _Builds:
    """The search's builds, by name: each one's prepared model, schedule source and executable.
    They share one kernel memo (and, given the tasks of every form, one schedule source), and
    each batch's kernels are compiled ahead on `workers` processes."""

    model: Model
    db: Any
    target: Target
    workers: int
    memo: KernelMemo
    shared: BoundSource | None
    prepared: dict[str, PreparedModel] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)
    exes: dict[str, Any] = field(default_factory=dict)

    def add(self, batch: dict[str, PreparedModel], source: Any = None) -> None:
        """Build `batch`, reading schedules from `source`, else the shared source, else the log
        bound to each build's own extraction."""
        for name, prep in batch.items():
            self.prepared[name] = prep
            self.sources[name] = source or self.shared or (
                schedule_source(self.db, self.model, prepared=prep) if self.db is not None else None)
        prefetch_kernels(self.memo, [(prep.module, self.sources[n]) for n, prep in batch.items()],
                         self.target, self.workers)
        for name, prep in batch.items():
            self.exes[name] = build_model(self.model, self.sources[name], prepared=prep, memo=self.memo)


def search_layout(model: Model, db: Any, target: str, threads: int | None, *, repeat: int = 10,
                  rounds: int = 9, store: bool = True, memo: KernelMemo | None = None,
                  tasks: list[ModelTask] | None = None, workers: int = 1,
                  leave_out: frozenset[int] = frozenset()) -> LayoutSearchResult:
    """Choose, build, time and (with `store`) log the per-layer layout plan of `model`; see the
    module docstring. `db` None: default schedules, nothing stored.

    Its builds share `memo` (a fresh one when None), and, given `tasks` (those of every form
    a layer may take: `plan_tasks`' extraction, before any screening), one schedule source bound
    to them; without, each build binds the log to its own extraction (about 6 s on ResNet-18).
    `workers` > 1: the builds' kernels are compiled ahead on that many processes. `leave_out`:
    channel blocks neither the layout program nor the per-model pipelines take (a plan tune's
    blocks with no tuned conv kernel: `plan_screen.untuned_blocks`)."""
    if 0 in leave_out:
        raise ValueError("search_layout: NCHW (block 0) cannot be left out: it is the model's own layout, "
                         "and the `default` build is the search's reference")
    tgt = resolve_target(target, threads)
    blocks = tuple(b for b in candidate_blocks(tgt) if b not in leave_out)
    shared = BoundSource(db, tgt, tasks) if db is not None and tasks is not None else None
    builds = _Builds(model, db, tgt, workers, memo if memo is not None else KernelMemo(), shared)
    # 1. the layout program over the measured layer and re-layout costs
    costs = kernel_costs(model, db, tgt, blocks, repeat=repeat, memo=builds.memo, source=shared,
                         workers=workers)
    graph = layout_graph(model, costs, blocks, tgt)
    sol, plan = solved_plan(graph, costs)
    # 2. its fusion variants and the per-model pipelines, built and timed together
    found = fusion_candidates(model, plan)
    variants = {PLAN: plan, **{name: replace(plan, fusion=f) for name, f in found.variants().items()}}
    per_model = {p: prepare_model(model, target, threads=threads, pipeline=p)
                 for p in candidates(target, threads) if pipeline_layout(p)[0] not in leave_out}
    builds.add({name: prepare_plan(model, target, threads, p) for name, p in variants.items()} | per_model)
    args = run_inputs(builds.exes[PLAN], model)
    reference = builds.exes["default"](*args)
    times = dict(zip(builds.exes, time_interleaved(list(builds.exes.values()), args, rounds=rounds)))
    fusion = min(variants, key=times.__getitem__)  # the plan's best fusion
    best_model = min((p for p in times if p not in variants), key=times.__getitem__)
    # 3. the finalists timed again on their own (the fastest of several variants is flattered by its
    # timing's noise), with the best fusion storing every value plainly, and with the expansions of
    # its bands whose kernels beat their pairs
    plain = without_halos(fusion)
    variants[plain] = replace(variants[fusion], fusion=replace(
        variants[fusion].fusion or FusionPlan.default(), halos=False))
    builds.add({plain: prepare_plan(model, target, threads, variants[plain])}, builds.sources[fusion])
    grown, expansion_kernels = _expansion_finalist(builds, variants, fusion, found.expansions, args,
                                                   partial(prepare_plan, model, target, threads))
    diff = max(max_difference(builds.exes[name](*args), reference) for name in variants)
    finalists = (fusion, plain, *grown, best_model)
    confirmed = dict(zip(finalists, time_interleaved([builds.exes[n] for n in finalists], args,
                                                     rounds=rounds)))
    fusion = min((fusion, plain, *grown), key=confirmed.__getitem__)
    plan = variants[fusion]
    winner = PLAN if confirmed[fusion] <= confirmed[best_model] else best_model
    prepared = builds.prepared[fusion] if winner == PLAN else builds.prepared[winner]
    # 4. the report: modelled costs and, per layer, its choice against the per-model pick's
    named = model.optimized(Pipeline(graph_passes()))
    forms = {p: per_model_forms(named, builds.prepared[p]) for p in per_model}
    modeled = {PLAN: sol.cost, **{p: modeled_cost(graph, costs, f) for p, f in forms.items()}}
    result = LayoutSearchResult(plan, sol, graph, times, modeled, winner, prepared,
                                _layer_rows(graph, sol, costs, plan, forms[best_model]), diff,
                                output_scale(reference),
                                source=builds.sources[fusion if winner == PLAN else winner], fusion=fusion,
                                prologue_edges=found.prologues, shared_producers=found.shared,
                                pool_edges=found.pools, band_edges=found.bands,
                                expansion_edges=found.expansions, expansion_kernels=expansion_kernels,
                                confirmed=confirmed, left_out=tuple(sorted(leave_out)))
    if store and db is not None:
        result.record_id = _store(db, model, str(tgt), result, builds.prepared[fusion].key)
    return result


PROBE_RUNS = 5  # runs per profiling of the expansion probe and the variant it grows from


def _expansion_finalist(builds: _Builds, variants: dict[str, LayoutPlan], fusion: str,
                        expansions: dict[tuple[int, int], Expansion], args: list,
                        prepare: Callable[[LayoutPlan], PreparedModel]
                        ) -> tuple[list[str], dict[tuple[int, int], tuple[float, float]]]:
    """When variant `fusion` fuses depthwise bands and the graph has expansion edges: builds it
    with every expansion of its bands (a probe, no candidate itself), profiles both, and where an
    expanded kernel ran faster than the pair it replaces (`expansion_choice.faster_expansions`),
    adds the variant with those expansions (`<fusion>+expansions`) to `variants` and builds it.
    Returns its name (a list: none or one) and the winning edges with (the expanded kernel's
    seconds, the pair's)."""
    base = variants[fusion].fusion
    if not expansions or base is None or not base.depthwise_bands:
        return [], {}
    every = replace(base, expansions=True)
    probe = _Builds(builds.model, builds.db, builds.target, builds.workers, builds.memo, builds.shared)
    probe.add({"probe": prepare(replace(variants[fusion], fusion=every))}, builds.sources[fusion])
    times = profile_keys([(builds.exes[fusion], args, PROBE_RUNS), (probe.exes["probe"], args, PROBE_RUNS)])
    won = faster_expansions(expansions, (builds.prepared[fusion].module, times[0]),
                            (probe.prepared["probe"].module, times[1]))
    if not won:
        return [], {}
    name = f"{fusion}+expansions"
    variants[name] = replace(variants[fusion], fusion=every.without_edges(set(expansions) - set(won)))
    builds.add({name: prepare(variants[name])}, builds.sources[fusion])
    return [name], won


def _layer_rows(graph: LayoutGraph, sol: Solution, costs: dict[str, LayerCost], plan: LayoutPlan,
                per_model: dict[str, Form]) -> list[LayerRow]:
    """Per conv layer: the plan's layout and tile, its kernel times, the re-layouts it pays, and
    its form under the fastest per-model pipeline."""
    parts = breakdown(graph, sol.layouts)
    rows = []
    for k in graph.convs():
        name, block = graph.nodes[k].name, sol.layouts[k]
        c, ref = costs[name], per_model.get(name, (0, 0))
        rows.append(LayerRow(name, block, plan.winograd.get(name, 0), dict(c.kernel), parts[k][1],
                             c.source.get(block, "-"), *ref, c.forms.get(ref, math.nan)))
    return rows


def _store(db: Any, model: Model, target: str, r: LayoutSearchResult, key: str) -> int:
    def ms(x: float) -> float | None:
        return x * 1e3 if math.isfinite(x) else None

    layers = [{"layer": row.layer, "block": row.block, "winograd_tile": row.tile,
               "transform_ms": ms(row.transform_s),
               "kernel_ms": {str(b): ms(s) for b, s in row.kernel_s.items()}, "source": row.source,
               "per_model_block": row.per_model_block, "per_model_winograd_tile": row.per_model_tile}
              for row in r.rows]
    info = {"winner": r.winner, "latencies_ms": {k: ms(v) for k, v in r.latencies.items()},
            "modeled_ms": ms(r.solution.cost), "exact": r.solution.exact,
            "per_model_modeled_ms": {k: ms(v) for k, v in r.modeled.items() if k != PLAN},
            "max_abs_diff": r.max_abs_diff if math.isfinite(r.max_abs_diff) else None, "layers": layers,
            "fusion": r.fusion, "left_out_blocks": list(r.left_out),
            "confirmed_ms": {k: ms(v) for k, v in r.confirmed.items()},
            "prologue_edges": {f"{a}->{c}": name for (a, c), name in r.prologue_edges.items()},
            "pool_edges": {f"{a}->{c}": name for (a, c), name in r.pool_edges.items()},
            "band_edges": {f"{a}->{c}": rows for (a, c), rows in r.band_edges.items()},
            "expansion_edges": {f"{a}->{c}": {"rows": e.rows, "band": f"{e.band[0]}->{e.band[1]}"}
                                for (a, c), e in r.expansion_edges.items()}}
    return db.store_layout_plan(key, target, r.plan.to_dict(), latency_ms=r.plan_latency * 1e3,
                                model=model.name, chosen=r.winner == PLAN,
                                compiler_version=autorelay.__version__, info=info)


__all__ = ["LayerRow", "LayoutSearchResult", "layout_label", "modeled_cost", "per_model_forms", "plan_tasks",
           "search_layout"]
