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

Depthwise bands (`FusionPlan.depthwise_bands`) follow them too. A 1x1 convolution reading a
depthwise one (MobileNet's separable pairs) may compute, per unit of its output rows, those rows of
the depthwise output into a cached band (the `conv2d_nchwc_dwpw` template) instead of the depthwise
kernel writing its map for the 1x1 to read back. `fused_tasks` tunes the band kernels, each a form
of its two layers. A unit holds every channel of its rows, so on a small map few units are left
to share between the threads: with default schedules on MobileNet-v2 (Zen 3, 2 threads) the band
kernels ran 1.12-1.35x faster than their pairs on 112- to 14-pixel maps and 0.63-0.67x on 7-pixel
ones. So `fusion_variants` times every band fused, and, from `depthwise_band_edges`' map sizes,
the bands on maps of at least r rows only, for the smallest few sizes r above the smallest.

Expansions (`FusionPlan.expansions`) extend a band: the convolution producing the depthwise input
(MobileNet-v2's 1x1 expansion, the widest map of its block) runs in the band's kernel too, each
unit computing the expanded rows its band reads, halo rows included, so that map is never stored;
two neighbouring units both compute the halo rows, which is what may make it lose. `fused_tasks`
tunes those kernels (each a form of its three layers); which bands of the best variant take their
expansion is decided per block from kernel times (`search.expansion_choice`).

Padding folded into the producer (`FusionPlan.halos`, on by default) is the last choice: the
layout search builds its best variant once more with every value stored plainly (`without_halos`)
and times the two against each other. It needs no kernel of its own to tune: a convolution
reading a bordered input runs its tuned config with the padding stage dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autorelay.ir.expr import Expr, Function
from autorelay.ir.visitor import post_order
from autorelay.lower import workload_key
from autorelay.op.conv import is_depthwise
from autorelay.op.winograd import TILE_SIZES
from autorelay.transform.fuse_ops import copy_shared_producers, edge_name, fused_edge_calls
from autorelay.transform.fusion_pairs import pools_an_activation
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers, plan_passes
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes
from autorelay.transform.util import op_name, tensor_type
from search.expansion_choice import Expansion, conv_signature
from search.extract import ModelTask
from search.models import Model
from search.pipeline_choice import PLAN, prepare_plan

SINGLE_EDGE_LIMIT = 4  # with more prologue edges than this, no edge is timed alone
COPIES = replace(FusionPlan.prologues(), copy_shared=True)  # every prologue, shared producers copied
POOLS = replace(FusionPlan.default(), pool_epilogues=True)  # Relay's rules and every pooling epilogue
BANDS = replace(FusionPlan.default(), depthwise_bands=True)  # Relay's rules and every depthwise band
EXPANSIONS = replace(BANDS, expansions=True)  # ... and the expansion producing each band's input
BAND_THRESHOLDS = 3  # at most this many "bands on maps of at least r rows" variants besides all bands

Edge = tuple[int, int]


def without_halos(variant: str) -> str:
    """The report name of fusion variant `variant` with `FusionPlan.halos` off: every value stored
    plainly, each convolution padding its own input (the layout search times it against the
    best variant)."""
    return f"{variant} (no halos)"


def _unfused(model: Model, plan: LayoutPlan) -> Function:
    """`plan`'s graph just before fusion."""
    return model.optimized(Pipeline(plan_passes(replace(plan, fusion=None))[:-1]))["main"]


def _beyond_relay(fn: Function, fusion: FusionPlan) -> dict[Edge, tuple[Expr, Expr]]:
    """The edges `fusion` fuses in `fn` and Relay's rules do not, with their (producer, consumer)."""
    relay = fused_edge_calls(fn, FusionPlan.default())
    return {e: pair for e, pair in fused_edge_calls(fn, fusion).items() if e not in relay}


def _named(edges: dict[Edge, tuple[Expr, Expr]]) -> dict[Edge, str]:
    return {e: edge_name(a, c) for e, (a, c) in edges.items()}


def _prologues(fn: Function) -> tuple[dict[Edge, str], bool]:
    shared = copy_shared_producers(fn.body, COPIES) is not fn.body
    return _named(_beyond_relay(fn, FusionPlan.prologues())), shared


def _band_rows(bands: dict[Edge, tuple[Expr, Expr]]) -> dict[Edge, int]:
    """Each band edge (`_beyond_relay(fn, BANDS)`) with the rows of its 1x1's output map."""
    return {e: int(tensor_type(c).shape[2]) for e, (_, c) in bands.items()}  # type: ignore[union-attr]


def _expansions(fn: Function, bands: dict[Edge, tuple[Expr, Expr]]) -> dict[Edge, Expansion]:
    """The edges `FusionPlan.expansions` adds to `bands` (`_beyond_relay(fn, BANDS)`: an expansion
    into its depthwise convolution), each with the rows of the expanded map, the band edge it joins
    (the depthwise convolution's tail into the 1x1 convolution) and the shapes of the three
    convolutions."""
    band_of = {id(_conv_behind(tail)): (e, pw) for e, (tail, pw) in bands.items()}
    out = {}
    for e, (a, dw) in _beyond_relay(fn, EXPANSIONS).items():
        if e not in bands:
            band, pw = band_of[id(dw)]
            out[e] = Expansion(int(tensor_type(a).shape[2]), band, conv_signature([_conv_behind(a), dw, pw]))  # type: ignore[union-attr]
    return out


def _conv_behind(e: Expr) -> Expr:
    """The convolution whose elementwise tail ends in `e` (or `e` itself)."""
    while op_name(e) != "nn.conv2d":
        e = e.args[0]  # type: ignore[attr-defined]
    return e


def prologue_edges(model: Model, plan: LayoutPlan) -> tuple[dict[Edge, str], bool]:
    """The edges of `plan`'s graph (before fusion) that `FusionPlan.prologues` fuses and Relay's
    rules do not, each named "producer -> consumer"; and whether the graph has a producer that
    several such readers share (which `FusionPlan.copy_shared` copies into each)."""
    return _prologues(_unfused(model, plan))


def pool_epilogue_edges(model: Model, plan: LayoutPlan) -> dict[Edge, str]:
    """The edges of `plan`'s graph (before fusion) that `FusionPlan.pool_epilogues` fuses: an
    activation into the max pooling that reads it (`fusion_pairs.pool_epilogue_fits`)."""
    return _named(_beyond_relay(_unfused(model, plan), POOLS))


def depthwise_band_edges(model: Model, plan: LayoutPlan) -> dict[Edge, int]:
    """The edges of `plan`'s graph (before fusion) that `FusionPlan.depthwise_bands` fuses: a
    depthwise convolution's tail into the 1x1 convolution that reads it
    (`fusion_pairs.depthwise_band_fits`), each with the rows of the 1x1's output map."""
    return _band_rows(_beyond_relay(_unfused(model, plan), BANDS))


@dataclass(frozen=True)
class FusionCandidates:
    """All of a plan's fusion candidates (the three functions above), from one optimisation of its
    graph: the layout search and the screening need every kind."""

    prologues: dict[Edge, str]
    shared: bool
    pools: dict[Edge, str]
    bands: dict[Edge, int]
    expansions: dict[Edge, Expansion]

    def variants(self) -> dict[str, FusionPlan]:
        """`fusion_variants` of these candidates."""
        return fusion_variants(self.prologues, self.shared, bool(self.pools), self.bands)


def fusion_candidates(model: Model, plan: LayoutPlan) -> FusionCandidates:
    fn = _unfused(model, plan)
    bands = _beyond_relay(fn, BANDS)
    return FusionCandidates(*_prologues(fn), _named(_beyond_relay(fn, POOLS)), _band_rows(bands),
                            _expansions(fn, bands))


def band_variants(bands: dict[Edge, int]) -> dict[str, FusionPlan]:
    """`plan+depthwise bands` (every band edge) and, for the smallest `BAND_THRESHOLDS` map sizes r
    above the smallest, `plan+depthwise bands on >= r rows` (the edges on smaller maps off)."""
    if not bands:
        return {}
    out = {f"{PLAN}+depthwise bands": BANDS}
    for rows in sorted(set(bands.values()))[1:1 + BAND_THRESHOLDS]:
        small = [e for e, r in bands.items() if r < rows]
        out[f"{PLAN}+depthwise bands on >= {rows} rows"] = BANDS.without_edges(small)
    return out


def fusion_variants(edges: dict[Edge, str], shared: bool = False, pools: bool = False,
                    bands: dict[Edge, int] | None = None) -> dict[str, FusionPlan]:
    """The fusion plans worth timing on a plan with these prologue edges (and, with `shared`, a
    producer several of them read; with `pools`, pooling epilogues; with `bands`, depthwise band
    edges and their maps' rows), by report name
    (`plan+prologues`, `plan+prologue a->c`, `plan+prologues+copies`, `plan+pool epilogues`,
    `plan+prologues+pool epilogues`, and `band_variants`'); Relay's rules, the plan itself, are not
    among them."""
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
    return out | band_variants(bands or {})


def fused_tasks(model: Model, target: str, threads: int | None, blocks: tuple[int, ...],
                known: set[str]) -> tuple[list[ModelTask], dict[str, frozenset[str]]]:
    """The tasks of the prologue-fused kernels of the direct uniform plans (NCHW and each of
    `blocks`), of the pooling-epilogue kernels of the blocked ones (direct and each Winograd
    tile) and of the depthwise-band kernels of the blocked direct ones (with and without their
    expansions), whose workload keys are not in `known`, and for each of those that implements conv
    layers, the set of layers (its scheduler group: one more form of them; a band kernel is a form
    of its two layers, or its three with an expansion)."""
    layers = conv_layers(model.mod)
    graph = model.optimized(Pipeline(graph_passes()))
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
    if any(_depthwise(n) for n in post_order(graph["main"])):  # blocked, direct
        plans += [replace(LayoutPlan.uniform(layers, block, winograd=0), fusion=fusion)
                  for block in blocks for fusion in (BANDS, EXPANSIONS)]
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


def _depthwise(e: Expr) -> bool:
    """Whether `e` is a depthwise convolution (a cheap test before preparing band plans)."""
    if op_name(e) != "nn.conv2d":
        return False
    data, out = tensor_type(e.args[0]), tensor_type(e)  # type: ignore[attr-defined]
    return data is not None and out is not None and len(data.shape) == 4 \
        and is_depthwise(e.attrs["groups"], data.shape[1], out.shape[1])  # type: ignore[attr-defined]


__all__ = ["BANDS", "BAND_THRESHOLDS", "COPIES", "EXPANSIONS", "POOLS", "SINGLE_EDGE_LIMIT",
           "FusionCandidates", "band_variants", "depthwise_band_edges", "fused_tasks", "fusion_candidates",
           "fusion_variants", "pool_epilogue_edges", "prologue_edges", "without_halos"]
