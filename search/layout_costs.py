"""Measured inputs of the layout program (`search.layout_dp`): per conv layer the kernel time in each
candidate layout, per edge the time of the re-layout it would need.

Kernel times come from whole-model builds, one per candidate layout with every convertible conv in
it, each built twice (plain NCHW: with F(2x2) Winograd where `default` applies it, and with F(4x4)
Winograd wherever the op computes it; a channel block: direct, and with F(4x4) wherever the op
computes it), so that a layer's cost in a layout is its fastest form there, built with the
tuning log's schedules: a kernel the log has tuned runs its best measured config, any other its
default one. The builds are profiled kernel by kernel on the model's sample inputs, round-robin
(`kernel_costs`). Profiling in place times the kernel as the model runs it — fused epilogue, cache
state, threads — and times tuned and untuned kernels alike, rather than mixing the tuner's worker
figures with fresh ones.

Transform times are kernel times of the `layout_transform` of the edge's shape for each pair of
layouts (NCHW, NCHW{b}c with b shrunk to a divisor of the channels as `ConvertLayout` does): a
plan tune tunes those kernels into the log first and gives their re-measured picks
(`search.transform_tuning`); a search without a log times the default kernels
(`search.relayout_kernels`). The model keeps them per (shape, from, to, target) for its later
searches (`Model.transforms`: the screening and the layout search read the same edges).

The graph itself is read off the model after the graph optimisations (before any layout choice):
layout-agnostic ops (elementwise, bias_add, pooling, binary ops with a constant) carry their input's
layout and vanish into the edge; convs, joins of two values, channel concatenations and every other
op become nodes, with the kinds and rules `search.layout_dp` states.

A grouped or dilated conv has no NCHW form of its own: a plan leaves none in NCHW, but runs it
packed in blocks of 8, as `default` runs it (`layout_plan.plan_passes`). So a conv node of that kind
offers only blocks; NCHW would be the same kernel with re-layouts around it. One approximation
remains: a grouped conv the program cannot model in blocks (`_convertible`) is an opaque node, read
and written in NCHW, though it runs packed, and the program does not charge that packing's
re-layouts where they do not replace one it charges (an NCHW neighbour's): its NCHW neighbours look
up to a re-layout each cheaper than they are. The end-to-end timing of the plan against the
per-model pipelines decides.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, Var
from autorelay.ir.visitor import children, post_order
from autorelay.lower import workload_key
from autorelay.op import registry
from autorelay.op.conv import block_channels, is_depthwise, packed_group_block
from autorelay.op.registry import OpPattern
from autorelay.op.winograd import CONV as WINOGRAD_CONV
from autorelay.primitive import KernelMemo
from autorelay.target import Target
from autorelay.te.winograd import transforms_for_positions
from autorelay.transform.convert_layout import POOLS, channel_block
from autorelay.transform.grouped_blocks import needs_blocks
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers, plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes
from autorelay.transform.quantize.layers import layer_calls
from autorelay.transform.util import op_name, static_shape, tensor_type
from search.kernel_prefetch import prefetch_kernels
from search.kernel_profiles import profile_keys, profile_runs
from search.layout_dp import CONCAT, CONV, INPUT, JOIN, OPAQUE, LayoutGraph, Node, Solution, solve
from search.models import Model, PreparedModel, build_model, run_inputs, schedule_source
from search.relayout_kernels import Relayout, transform_seconds


def candidate_blocks(target: Target) -> tuple[int, ...]:
    """The channel blocks worth trying: 8 (one AVX2 float vector) and one full vector of the target
    when that is wider — the same set `--pipeline auto` measures per model."""
    lanes = target.vector_lanes()
    return tuple(sorted({min(8, lanes), lanes}))


Form = tuple[int, int]  # (channel block, 0 for NCHW; Winograd output tile, 0 for direct)


@dataclass
class LayerCost:
    """One conv layer's measured kernel seconds per form (`forms`: (block, Winograd tile) ->
    seconds) and, per candidate layout, its fastest form's seconds (`kernel`, what the layout
    program sees) and where that form's config came from (`source`)."""

    kernel: dict[int, float] = field(default_factory=dict)
    source: dict[int, str] = field(default_factory=dict)
    forms: dict[Form, float] = field(default_factory=dict)
    # every form a candidate build gave it, measured or not: (block, Winograd tile) -> workload key
    keys: dict[Form, str] = field(default_factory=dict)

    def tile(self, block: int) -> int:
        """The Winograd tile of its fastest form in `block` (0: direct, or none measured)."""
        mine = {t: s for (b, t), s in self.forms.items() if b == block}
        return min(mine, key=mine.__getitem__) if mine else 0

    def add(self, form: Form, seconds: float, source: str) -> None:
        """Record a measured form (the same form in two builds keeps the faster timing); the
        form's layout then costs its fastest form."""
        if seconds >= self.forms.get(form, float("inf")):
            return
        self.forms[form] = seconds
        block = form[0]
        if seconds <= self.kernel.get(block, float("inf")):
            self.kernel[block] = seconds
            self.source[block] = source


def winograd_tile(fn: Function) -> int:
    """The output tile of the Winograd conv in a primitive function (0: none)."""
    for n in post_order(fn.body):
        if op_name(n) == WINOGRAD_CONV:
            return transforms_for_positions(tensor_type(n.args[1]).shape[0]).m
    return 0


def kernel_costs(model: Model, db: Any, target: Target, blocks: tuple[int, ...], *,
                 repeat: int = 10, rounds: int = 5, memo: KernelMemo | None = None,
                 source: Any = None, workers: int = 1) -> dict[str, LayerCost]:
    """Per conv layer, its kernel seconds in NCHW and in each of `blocks` (see the module docstring);
    `db` None: default schedules only. `memo`: kernels shared with the search's other builds;
    `source`: one schedule source for every build (a `BoundSource` over the tasks of every form),
    else each build binds the log to its own tasks; `workers` > 1: the builds' kernels are
    compiled ahead on that many processes (`search.kernel_prefetch`).

    The candidate builds are profiled in turn, `rounds` times round-robin, each time over `repeat`
    runs (fewer for a slow model: `profile_runs`), and each kernel's time is its median over the
    rounds: the machine's speed drifts over the minutes a search takes, and builds profiled one
    after the other would compare a layout measured in a fast minute with one measured in a slow
    one."""
    layers = conv_layers(model.mod)
    graph = model.optimized(Pipeline(graph_passes()))
    memo = memo if memo is not None else KernelMemo()
    todo = []
    for plan in candidate_plans(layers, blocks):
        fused = model.optimized(plan_pipeline(plan))
        prepared = PreparedModel(model, target, "plan", fused)
        bound = source or (schedule_source(db, model, prepared=prepared) if db is not None else None)
        todo.append((plan, prepared, bound))
    prefetch_kernels(memo, [(p.module, bound) for _, p, bound in todo], target, workers)
    exes = [build_model(model, bound, prepared=prepared, memo=memo) for _, prepared, bound in todo]
    runs = []
    for exe in exes:
        args = run_inputs(exe, model)
        runs.append((exe, args, profile_runs(exe, args, repeat)))
    times = profile_keys(runs, rounds)
    out = {name: LayerCost() for name in layers}
    for (plan, prepared, _), exe, by_key in zip(todo, exes, times):
        block = next(iter(plan.blocks.values()), 0)
        sources: dict[str, str] = {}
        for row in exe.report.rows:
            sources.setdefault(row.workload_key, row.source)
        for name, (got, fn) in built_layers(graph, prepared.module).items():
            key, tile, cost = workload_key(fn), winograd_tile(fn), out[name]
            # by the block asked for (built shrunk to a divisor); in the NCHW plan a grouped or dilated
            # conv is built packed, as `default` builds it (`plan_passes`): that is its NCHW form
            form = (block if got else 0, tile)
            cost.keys[form] = key
            if (block > 0 and not got) or key not in by_key:
                continue  # a conv ConvertLayout leaves alone: no candidate
            cost.add(form, by_key[key], sources[key])
    return out


def candidate_plans(layers: list[str], blocks: tuple[int, ...]) -> list[LayoutPlan]:
    """The uniform plans whose builds hold every form a layer may take: NCHW with `default`'s F(2x2)
    rule, NCHW with F(4x4) wherever it applies, and each channel block direct, with F(2x2) and with
    F(4x4) wherever they apply. Blocked F(2x2) joined once its stages ran fused: with default
    schedules (blocks of 16, weights evicted) it ran ResNet-18's 14-pixel layer in 544 us against
    689 for F(4x4) and 877 direct, though 1.3x slower than F(4x4) on the 56- and 28-pixel layers
    (`benchmarks/winograd_blocked.py --units`)."""
    return [LayoutPlan.uniform(layers, 0), LayoutPlan.uniform(layers, 0, winograd=4),
            *(LayoutPlan.uniform(layers, b) for b in blocks),
            *(LayoutPlan.uniform(layers, b, winograd=t) for t in (2, 4) for b in blocks)]


# ---- the graph ------------------------------------------------------------------------------------


def _convertible(c: Call, blocks: tuple[int, ...]) -> bool:
    """Whether `ConvertLayout` packs this conv (NCHW/OIHW, static channels) in each of `blocks` as
    the program models it: groups 1, depthwise, groups whose channels each block divides, or
    groups each block packs whole (it packs other groups in a divisor of their channels, which
    the program's edges do not model)."""
    a = c.attrs
    if a["data_layout"] != "NCHW" or a["kernel_layout"] != "OIHW" or a["out_layout"] not in ("", "NCHW"):
        return False
    xt, wt = tensor_type(c.args[0]), static_shape(c.args[1])
    if xt is None or wt is None or not isinstance(xt.shape[1], int):
        return False
    g, in_c, out_c = a["groups"], xt.shape[1], wt[0]
    if g == 1 or is_depthwise(g, in_c, out_c):
        return True  # ConvertLayout packs these in `channel_block(c, b)`, which the edges model
    per_in, per_out = block_channels(g, in_c, out_c)
    return all((per_in % b == 0 and per_out % b == 0) or packed_group_block(g, in_c, out_c, b) == b
               for b in blocks)


def _agnostic(c: Call) -> bool:
    """Ops that compute in whatever layout their (one) value input has."""
    name = op_name(c) or ""
    if name in ("nn.bias_add", *POOLS):
        return True
    if not registry.exists(name):
        return False
    opdef = registry.get(name)
    if "axis" in opdef.attrs or "axes" in opdef.attrs:
        return False
    if opdef.pattern == OpPattern.ELEMWISE and len(c.args) == 1:
        return static_shape(c) == static_shape(c.args[0])
    return False


class _GraphReader:
    def __init__(self, layers: dict[int, str], costs: dict[str, LayerCost], blocks: tuple[int, ...],
                 seconds: Callable[[tuple[int, ...], int, int], float]) -> None:
        self.layers, self.costs, self.blocks, self.seconds = layers, costs, blocks, seconds
        self.nodes: list[Node] = []
        self.value: dict[int, int | None] = {}

    def _transforms(self, shape: tuple[int, ...] | None) -> dict[tuple[int, int], float]:
        """(from, to) -> seconds for a value of `shape` (NCHW) read in another layout."""
        layouts = (0, *self.blocks)
        if shape is None or len(shape) != 4:
            return {(a, b): 0.0 for a in layouts for b in layouts}
        actual = {b: channel_block(shape[1], b) for b in layouts}
        return {(a, b): self.seconds(shape, actual[a], actual[b]) for a in layouts for b in layouts if a != b}

    def node(self, name: str, kind: str, args: list[Expr], kernel: dict[int, float] | None = None) -> int:
        ins = [(self.value[id(a)], a) for a in args if self.value.get(id(a)) is not None]
        shapes = [static_shape(a) for _, a in ins]
        channels = tuple(s[1] for s in shapes if s is not None and len(s) == 4)
        self.nodes.append(Node(name, kind, tuple(i for i, _ in ins), kernel or {},
                               tuple(self._transforms(s) for s in shapes),
                               tuple(id(a) for _, a in ins),  # one expression: one transform
                               channels if kind == CONCAT and len(channels) == len(ins) else ()))
        return len(self.nodes) - 1

    def visit(self, e: Expr) -> None:
        if isinstance(e, Var):
            self.value[id(e)] = self.node(e.name_hint, INPUT, [])
        elif isinstance(e, Constant | Tuple | Op | GlobalVar):
            self.value[id(e)] = None  # consumers of a tuple read its fields
        elif isinstance(e, Call):
            self.value[id(e)] = self._call(e)
        else:  # tuple projections, lets, branches: NCHW consumers and producers
            self.value[id(e)] = self.node(type(e).__name__, OPAQUE, self._flat(children(e)))

    def _flat(self, args: Any) -> list[Expr]:
        out: list[Expr] = []
        for a in args:
            out.extend(self._flat(a.fields) if isinstance(a, Tuple) else [a])
        return out

    def _call(self, c: Call) -> int | None:
        name = op_name(c) or "call"
        values = [a for a in c.args if self.value.get(id(a)) is not None]
        if name == "nn.conv2d" and id(c) in self.layers and _convertible(c, self.blocks):
            layer = self.layers[id(c)]
            kernel = dict(self.costs[layer].kernel)
            if needs_blocks(c):  # its NCHW is `default`'s packing: block 8 with re-layouts around it
                kernel.pop(0, None)
                offered = bool(kernel)
            else:  # a choice between NCHW and at least one block
                offered = 0 in kernel and len(kernel) > 1
            if offered:
                return self.node(layer, CONV, [c.args[0]], kernel)
        if _agnostic(c) and values and values[0] is c.args[0]:
            return self.value[id(c.args[0])]
        pattern = registry.get(name).pattern if registry.exists(name) else None
        if pattern is not None and pattern <= OpPattern.BROADCAST and len(c.args) == 2:
            shapes = [static_shape(a) for a in c.args]
            if len(values) == 2 and shapes[0] == shapes[1] == static_shape(c):
                return self.node(name, JOIN, list(c.args))
            if len(values) == 1 and isinstance(c.args[1 - c.args.index(values[0])], Constant):
                return self.value[id(values[0])]
        if name == "concatenate" and isinstance(c.args[0], Tuple) and int(c.attrs["axis"]) % 4 == 1:
            fields = list(c.args[0].fields)
            if all(self.value.get(id(f)) is not None for f in fields):
                return self.node(name, CONCAT, fields)
        return self.node(name, OPAQUE, self._flat(c.args))


def layout_graph(model: Model, costs: dict[str, LayerCost], blocks: tuple[int, ...],
                 target: Target) -> LayoutGraph:
    """The model's layout graph (see the module docstring) with `costs` on its conv nodes and
    measured transform times on its edges (timed once per model: `Model.transforms`)."""
    def seconds(shape: tuple[int, ...], src: int, dst: int) -> float:
        return transform_seconds(shape, src, dst, target, memo=model.transforms)

    return _read_graph(model, costs, blocks, seconds)


def relayouts(model: Model, blocks: tuple[int, ...]) -> list[Relayout]:
    """Every re-layout (src != dst) a layout graph of `model` may put on an edge, once each: the
    edges a layout search weighs. Read with every conv layer convertible to every block; a layer
    the measured costs leave unconvertible reads its input through the same edges."""
    everywhere: dict[str, LayerCost] = defaultdict(lambda: LayerCost(kernel=dict.fromkeys((0, *blocks), 0.0)))
    found: dict[Relayout, None] = {}

    def record(shape: tuple[int, ...], src: int, dst: int) -> float:
        if src != dst:
            found[(tuple(shape), src, dst)] = None
        return 0.0

    _read_graph(model, everywhere, blocks, record)
    return list(found)


def _read_graph(model: Model, costs: dict[str, LayerCost], blocks: tuple[int, ...],
                seconds: Callable[[tuple[int, ...], int, int], float]) -> LayoutGraph:
    graph = model.optimized(Pipeline(graph_passes()))
    fn = graph["main"]
    layers = {id(c): name for name, c in layer_calls(graph).items()}
    reader = _GraphReader(layers, costs, blocks, seconds)
    for p in fn.params:
        reader.visit(p)
    for e in post_order(fn.body):
        if id(e) not in reader.value:
            reader.visit(e)
    reader.node("output", OPAQUE, reader._flat([fn.body]))
    return LayoutGraph(tuple(reader.nodes))


def solved_plan(graph: LayoutGraph, costs: dict[str, LayerCost]) -> tuple[Solution, LayoutPlan]:
    """The layout program's solution over `graph` and the plan it makes: each conv layer's layout,
    and in it the layer's fastest measured form (its Winograd tile; none where no form was measured
    in that layout)."""
    sol = solve(graph)
    layouts = sol.conv_layouts(graph)
    return sol, LayoutPlan(layouts, {name: costs[name].tile(b) for name, b in layouts.items()
                                     if any(form[0] == b for form in costs[name].forms)})


__all__ = ["Form", "LayerCost", "candidate_blocks", "candidate_plans", "kernel_costs", "layout_graph",
           "relayouts", "solved_plan"]
