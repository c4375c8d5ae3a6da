"""Fusion as a searched choice of the layout plan: which injective producers run inside the kernel
they feed (`FusionPlan.prologues`), and which max poolings run inside the convolution they pool
(`FusionPlan.pool_epilogues`).

Relay's rules fuse a convolution or a dense layer with what follows it (bias, activation, a
residual add), never with what precedes it. A layout plan puts layout transforms in front of
convolutions (the model's NCHW input before a blocked stem, a re-layout between layers the plan
puts in different blocks) and flattens in front of the classifier; each runs as its own kernel,
writing a tensor the next kernel reads back. Fused as a prologue, the transform is inlined into
the anchor's input (its padding stage, when the schedule pads at root), which saves that round
trip but may read the input with a worse access pattern. Neither side wins by rule, so:

1. `fused_tasks`: the tuner tunes the fused kernels too. The uniform plans in each block (and
   NCHW) are prepared with every prologue fused; their fused kernels are the tasks no other form
   has (the stem reading the model's NCHW input into a block; a classifier reading a block through
   its flatten), each grouped with the conv layer it implements, so the task scheduler treats it
   as one more form of that layer. A fused re-layout between two blocked layers keeps the ranks of
   the plain conv's tensors, so it takes a tuned conv's config by transfer.
2. `fusion_variants`: after the layout program has chosen the plan, its prologue edges (those
   `FusionPlan.prologues` fuses and Relay's rules do not) give the candidates: the plan with Relay's
   rules, with every prologue fused, for a few edges each edge alone, and, where several kernels
   read one producer (a re-layout that a residual block's convolution and its shortcut share),
   every prologue fused with such producers copied into each reader. The layout search
   builds and times them end to end, interleaved with the per-model pipelines, and stores the
   winner's fusion plan with its layouts (`LayoutPlan.fusion`).

Pooling epilogues follow the same two steps. A convolution whose pooling reads its activation
(VGG's block ends) may compute, per parallel unit, only the band of rows a tile of pooled rows
needs and pool it from the cache (the `conv2d_nchwc_pool` template), instead of writing its
whole map for a pooling kernel to read back; but the band's unit is a different loop nest from
the tuned convolution's, so which is faster is measured too. `fused_tasks` tunes those kernels
(each a form of its conv layer), `pool_epilogue_edges` finds the plan's candidates and
`fusion_variants` adds the plan with them fused (and with every prologue as well).

Padding folded into the producer (`FusionPlan.halos`, on by default) is the last choice: the
layout search builds its best variant once more with every value stored plainly (`without_halos`)
and times the two against each other. It needs no kernel of its own to tune: a convolution
reading a bordered input runs its tuned config with the padding stage dropped.
"""

from __future__ import annotations

from dataclasses import replace

from autorelay.ir.expr import Function
from autorelay.ir.visitor import post_order
from autorelay.lower import workload_key
from autorelay.op.winograd import TILE_SIZES
from autorelay.transform.fuse_ops import copy_shared_producers, fused_edges, pools_an_activation
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers, plan_passes
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes
from search.extract import ModelTask, optimize
from search.models import Model
from search.pipeline_choice import PLAN, prepare_plan

SINGLE_EDGE_LIMIT = 4  # with more prologue edges than this, no edge is timed alone
COPIES = replace(FusionPlan.prologues(), copy_shared=True)  # every prologue, shared producers copied
POOLS = replace(FusionPlan.default(), pool_epilogues=True)  # Relay's rules and every pooling epilogue

Edge = tuple[int, int]


def without_halos(variant: str) -> str:
    """The report name of fusion variant `variant` with `FusionPlan.halos` off: every value stored
    plainly, each convolution padding its own input (the layout search times it against the
    best variant)."""
    return f"{variant} (no halos)"


def _unfused(model: Model, plan: LayoutPlan) -> Function:
    """`plan`'s graph just before fusion."""
    return optimize(model.mod, model.params, Pipeline(plan_passes(replace(plan, fusion=None))[:-1]))["main"]


def _beyond_relay(fn: Function, fusion: FusionPlan) -> dict[Edge, str]:
    relay = fused_edges(fn, FusionPlan.default())
    return {e: name for e, name in fused_edges(fn, fusion).items() if e not in relay}


def prologue_edges(model: Model, plan: LayoutPlan) -> tuple[dict[Edge, str], bool]:
    """The edges of `plan`'s graph (before fusion) that `FusionPlan.prologues` fuses and Relay's
    rules do not, each named "producer -> consumer"; and whether the graph has a producer that
    several such readers share (which `FusionPlan.copy_shared` copies into each)."""
    fn = _unfused(model, plan)
    return _beyond_relay(fn, FusionPlan.prologues()), copy_shared_producers(fn.body, COPIES) is not fn.body


def pool_epilogue_edges(model: Model, plan: LayoutPlan) -> dict[Edge, str]:
    """The edges of `plan`'s graph (before fusion) that `FusionPlan.pool_epilogues` fuses: an
    activation into the max pooling that reads it (`fuse_ops.pool_epilogue_fits`)."""
    return _beyond_relay(_unfused(model, plan), POOLS)


def fusion_variants(edges: dict[Edge, str], shared: bool = False,
                    pools: bool = False) -> dict[str, FusionPlan]:
    """The fusion plans worth timing on a plan with these prologue edges (and, with `shared`, a
    producer several of them read; with `pools`, pooling epilogues), by report name
    (`plan+prologues`, `plan+prologue a->c`, `plan+prologues+copies`, `plan+pool epilogues`,
    `plan+prologues+pool epilogues`); Relay's rules, the plan itself, are not among them."""
    out = {}
    if edges:
        every = FusionPlan.prologues()
        out[f"{PLAN}+prologues"] = every
        if 1 < len(edges) <= SINGLE_EDGE_LIMIT:
            for edge in edges:
                others = (e for e in edges if e != edge)
                out[f"{PLAN}+prologue {edge[0]}->{edge[1]}"] = every.without_edges(others)
    if shared:
        out[f"{PLAN}+prologues+copies"] = COPIES
    if pools:
        out[f"{PLAN}+pool epilogues"] = POOLS
        if edges:
            out[f"{PLAN}+prologues+pool epilogues"] = replace(FusionPlan.prologues(), pool_epilogues=True)
    return out


def fused_tasks(model: Model, target: str, threads: int | None, blocks: tuple[int, ...],
                known: set[str]) -> tuple[list[ModelTask], dict[str, frozenset[str]]]:
    """The tasks of the prologue-fused kernels of the direct uniform plans (NCHW and each of
    `blocks`) and of the pooling-epilogue kernels of the blocked ones (direct and each Winograd
    tile), whose workload keys are not in `known`, and for each of those that implements conv
    layers, the set of layers (its scheduler group: one more form of them)."""
    layers = conv_layers(model.mod)
    graph = optimize(model.mod, model.params, Pipeline(graph_passes()))
    tasks: list[ModelTask] = []
    groups: dict[str, frozenset[str]] = {}
    seen = set(known)
    # a cheap test on the graph before layouts: a model without such a pooling (ResNet's stem pool
    # is padded) prepares no pooled plans
    pools = any(pools_an_activation(n) for n in post_order(graph["main"]))
    plans = [replace(LayoutPlan.uniform(layers, block, winograd=0 if block else None),
                     fusion=FusionPlan.prologues()) for block in (0, *blocks)]
    if pools:  # blocked convolutions only, direct and as Winograd
        plans += [replace(LayoutPlan.uniform(layers, block, winograd=tile), fusion=POOLS)
                  for block in blocks for tile in (0, *TILE_SIZES)]
    for plan in plans:
        prepared = prepare_plan(model, target, threads, plan)
        served: dict[str, set[str]] = {}
        for name, (_, fn) in built_layers(graph, prepared.module).items():
            served.setdefault(workload_key(fn), set()).add(name)
        for t in prepared.extraction.tasks:
            if t.key in seen:
                continue
            seen.add(t.key)
            tasks.append(t)
            if t.key in served:
                groups[t.key] = frozenset(served[t.key])
    return tasks, groups


__all__ = ["COPIES", "POOLS", "SINGLE_EDGE_LIMIT", "fused_tasks", "fusion_variants", "pool_epilogue_edges",
           "prologue_edges", "without_halos"]
