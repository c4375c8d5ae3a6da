"""The layout graph read off real models (its nodes are the convs, joins and concatenations the
model has, wired as the model wires them) and the measured costs it carries."""

from __future__ import annotations

import math

import pytest

from autorelay.codegen import resolve_target
from autorelay.ir.expr import Call, Function
from autorelay.ir.visitor import post_order
from autorelay.transform.layout_plan import LayoutPlan, conv_layers, plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes
from autorelay.transform.prepare import prepare
from autorelay.transform.util import op_name, tensor_type
from search.layout_costs import LayerCost, candidate_blocks, kernel_costs, layout_graph
from search.layout_dp import CONCAT, CONV, INPUT, JOIN, OPAQUE, assign
from search.models import load_model
from search.relayout_kernels import transform_seconds

pytestmark = pytest.mark.cpu


def _fake_costs(model, blocks):
    """Kernel costs without builds: the graph's shape does not depend on them."""
    return {name: LayerCost({0: 1.0, **{b: 1.0 for b in blocks}}) for name in conv_layers(model.mod)}


def test_candidate_blocks_follow_the_vector_width():
    tgt = resolve_target("llvm", 1)
    lanes = tgt.vector_lanes()
    blocks = candidate_blocks(tgt)
    assert max(blocks) == lanes and min(blocks) == min(8, lanes)


def test_resnet_graph_has_a_join_per_residual_block():
    model = load_model("resnet-18", image_size=32)
    tgt = resolve_target("llvm", 1)
    blocks = candidate_blocks(tgt)
    g = layout_graph(model, _fake_costs(model, blocks), blocks, tgt)
    kinds = [n.kind for n in g.nodes]
    assert kinds.count(CONV) == 20 and kinds.count(JOIN) == 8 and kinds[0] == INPUT and kinds[-1] == OPAQUE
    for n in g.nodes:
        if n.kind == JOIN:  # a residual add joins its branch's last conv with the block's input value
            branch, shortcut = (g.nodes[u] for u in n.inputs)
            assert branch.kind == CONV and shortcut.kind in (CONV, JOIN)
        if n.kind == CONV:
            assert len(n.transform) == 1 and set(n.kernel) == {0, *blocks}
    # an edge's transform costs are measured for its shape: every pair of distinct layouts is there
    stem = g.nodes[1]
    assert stem.name == "conv2d_0" and all(v >= 0 for v in stem.transform[0].values())
    assert len(stem.transform[0]) == (len(blocks) + 1) * len(blocks)


def test_inception_concatenation_collects_four_branches():
    model = load_model("inception", image_size=16)
    tgt = resolve_target("llvm", 1)
    blocks = candidate_blocks(tgt)
    g = layout_graph(model, _fake_costs(model, blocks), blocks, tgt)
    concats = [n for n in g.nodes if n.kind == CONCAT]
    assert len(concats) == 2 and all(len(n.inputs) == 4 for n in concats)
    assert all(g.nodes[u].kind == CONV for u in concats[0].inputs)
    assert [n.channels for n in concats] == [(16, 32, 8, 8), (32, 48, 16, 16)]


CONCAT_BLOCKS = (8, 16)


@pytest.mark.parametrize("block", CONCAT_BLOCKS)
def test_the_program_and_convert_layout_agree_on_concatenations(block: int):
    """The layout program's rule for a concatenation is what `ConvertLayout` builds. Every layer in
    blocks of 16: the first Inception block's branches end in 16 and in 8 channels (NCHW16c and
    NCHW8c), so they concatenate in NCHW; the second's all in NCHW16c. In blocks of 8, both stay
    blocked.

    The graph's candidate blocks are both blocks compared, on every host: a plan may block by 16
    on an AVX2 host too (`ConvertLayout` builds it), but the program only models a concatenation in
    a block that is one of its graph's candidates (else it takes NCHW), and `candidate_blocks` of an
    AVX2 host is (8,) alone."""
    model = load_model("inception", image_size=16)
    tgt = resolve_target("llvm", 1)
    g = layout_graph(model, _fake_costs(model, CONCAT_BLOCKS), CONCAT_BLOCKS, tgt)
    layers = conv_layers(model.mod)
    layouts = assign(g, dict.fromkeys(layers, block))
    modelled = [layouts[k] for k, n in enumerate(g.nodes) if n.kind == CONCAT]
    fused = prepare(model.mod, model.params, plan_pipeline(LayoutPlan.uniform(layers, block)))
    built = [tensor_type(m).shape[-1] if tensor_type(m).ndim == 5 else 0
             for n in post_order(fused["main"].body) if isinstance(n, Call) and isinstance(n.op, Function)
             for m in post_order(n.op.body) if op_name(m) == "concatenate"]
    assert modelled == built == ([0, 16] if block == 16 else [8, 8])


def test_transform_time_is_measured_and_kept_in_the_memo_given():
    tgt = resolve_target("llvm", 1)
    memo: dict[tuple, float] = {}
    t = transform_seconds((1, 16, 8, 8), 0, 8, tgt, memo=memo)
    assert t > 0 and memo == {((1, 16, 8, 8), 0, 8, str(tgt)): t}
    assert transform_seconds((1, 16, 8, 8), 0, 8, tgt, memo=memo) == t
    assert transform_seconds((1, 16, 8, 8), 8, 8, tgt, memo=memo) == 0.0 and len(memo) == 1


def test_kernel_costs_cover_every_layer_in_every_layout():
    model = load_model("nature-dqn")
    tgt = resolve_target("llvm", 1)
    blocks = candidate_blocks(tgt)
    costs = kernel_costs(model, None, tgt, blocks, repeat=2)
    assert set(costs) == set(conv_layers(model.mod))
    for c in costs.values():
        assert set(c.kernel) == {0, *blocks} and all(s > 0 for s in c.kernel.values())
        assert set(c.source.values()) == {"default"}
        for block in c.kernel:  # a layout costs its fastest form there
            assert c.kernel[block] == min(s for (b, _), s in c.forms.items() if b == block)
    # its one 3x3 stride-1 conv (64 channels, 7x7) was measured direct or F(2x2) and as F(4x4) in
    # NCHW, and direct, as F(2x2) and as F(4x4) in each block
    nchw = sorted(tuple(sorted(t for b, t in c.forms if b == 0)) for c in costs.values())
    assert nchw == [(0,), (0,), (0, 4)] or nchw == [(0,), (0,), (2, 4)], nchw
    for block in blocks:
        tiles = sorted(tuple(sorted(t for b, t in c.forms if b == block)) for c in costs.values())
        assert tiles == [(0,), (0,), (0, 2, 4)], (block, tiles)


def test_a_layout_costs_its_fastest_form_and_names_its_tile():
    cost = LayerCost()
    cost.add((16, 0), 2.0, "tuned")
    cost.add((16, 4), 1.5, "default")
    cost.add((16, 4), 1.8, "tuned")  # the same form measured again, slower: the faster timing stays
    cost.add((0, 2), 3.0, "tuned")
    assert cost.kernel == {16: 1.5, 0: 3.0} and cost.source == {16: "default", 0: "tuned"}
    assert cost.tile(16) == 4 and cost.tile(0) == 2 and cost.tile(8) == 0


GROUPED_BLOCK = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 10, 10), float32], %w0: Tensor[(32, 16, 1, 1), float32],
          %w1: Tensor[(32, 16, 3, 3), float32], %w2: Tensor[(32, 4, 3, 3), float32],
          %w3: Tensor[(64, 4, 3, 3), float32], %w4: Tensor[(32, 64, 1, 1), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w0, channels=32, kernel_size=[1, 1]));
  %1 = nn.relu(nn.conv2d(%0, %w1, padding=[1, 1], groups=2, channels=32, kernel_size=[3, 3]));
  %2 = nn.relu(nn.conv2d(%1, %w2, padding=[1, 1], groups=8, channels=32, kernel_size=[3, 3]));
  %3 = nn.relu(nn.conv2d(%2, %w3, padding=[1, 1], groups=8, channels=64, kernel_size=[3, 3]));
  add(nn.conv2d(%3, %w4, channels=32, kernel_size=[1, 1]), %0)
}"""


def _unit_cost_graph(text: str, name: str, monkeypatch):
    """The model of `text` (random weights, input `x` of 1x16x10x10) and its layout graph over
    blocks of 8 and 16 with every kernel and every re-layout costing one second."""
    import numpy as np

    import autorelay
    import search.layout_costs as layout_costs
    from search.models import Model

    mod = autorelay.parse(text)
    rng = np.random.default_rng(0)
    params = {p.name_hint: rng.standard_normal(p.type_annotation.concrete_shape).astype("float32")
              for p in mod["main"].params[1:]}
    model = Model(name, mod, params, {"x": rng.standard_normal((1, 16, 10, 10)).astype("float32")})
    monkeypatch.setattr(layout_costs, "transform_seconds", lambda *a, **k: 1.0)
    layers = conv_layers(mod)
    costs = {n: LayerCost({0: 1.0, 8: 1.0, 16: 1.0}) for n in layers}
    return model, layers, layout_graph(model, costs, (8, 16), resolve_target("llvm", 1))


def test_grouped_layers_join_the_program_where_their_groups_hold_whole_blocks(monkeypatch):
    """A grouped conv whose groups' channels every candidate block divides, or whose groups every
    candidate block packs whole (4 channels in and out per group, in blocks of 8 or 16), is a conv
    node of the program (ConvertLayout packs it in the block asked for); one with 4 channels in and
    8 out per group (packed in blocks of 4, which the program's edges do not model) is opaque: a plan
    leaves it to `default`'s packing. With each transform costing one second, the program charges
    what the plan's build runs, but for that packing's re-layout back to NCHW when its consumer
    reads NCHW (`layout_costs`' one approximation)."""
    from test_layout_search import _layout_transforms

    from search.layout_dp import breakdown
    from search.pipeline_choice import prepare_plan

    model, _, g = _unit_cost_graph(GROUPED_BLOCK, "grouped", monkeypatch)
    assert [n.name for n in g.nodes if n.kind == CONV] == ["conv2d_0", "conv2d_1", "conv2d_2", "conv2d_4"]
    for blocks, uncharged in (({"conv2d_0": 16, "conv2d_1": 8, "conv2d_2": 16, "conv2d_4": 16}, 0),
                              ({"conv2d_0": 0, "conv2d_1": 16, "conv2d_2": 8, "conv2d_4": 0}, 1)):
        charged = sum(t for _, t in breakdown(g, assign(g, blocks)))
        built = prepare_plan(model, "llvm", 1, LayoutPlan(blocks)).module
        assert charged + uncharged == _layout_transforms(built)
        assert _grouped_layers_run_packed(built)


PACKED_CONVS = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 10, 10), float32], %wa: Tensor[(64, 16, 1, 1), float32],
          %wg: Tensor[(64, 4, 3, 3), float32], %wd: Tensor[(64, 64, 3, 3), float32],
          %wb: Tensor[(64, 16, 1, 1), float32], %wc: Tensor[(32, 64, 1, 1), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %wa, channels=64, kernel_size=[1, 1]));
  %1 = nn.relu(nn.conv2d(%0, %wg, padding=[1, 1], groups=16, channels=64, kernel_size=[3, 3]));
  %2 = nn.conv2d(%1, %wd, padding=[2, 2], dilation=[2, 2], channels=64, kernel_size=[3, 3]);
  nn.conv2d(add(%2, nn.conv2d(%x, %wb, channels=64, kernel_size=[1, 1])), %wc, channels=32,
            kernel_size=[1, 1])
}"""


def test_grouped_and_dilated_layers_offer_only_blocks_and_are_charged_exactly(monkeypatch):
    """A grouped or a dilated conv has no NCHW form of its own (a plan runs it packed, as `default`
    does), so its node offers only blocks; for every choice the program can make on a graph of
    both, a residual join and plain 1x1 layers, it charges exactly the re-layouts the plan's build
    runs (brute force, each re-layout costing one second)."""
    import itertools

    from test_layout_search import _layout_transforms

    from search.layout_dp import breakdown
    from search.pipeline_choice import prepare_plan

    model, layers, g = _unit_cost_graph(PACKED_CONVS, "packed", monkeypatch)
    convs = {n.name: sorted(n.kernel) for n in g.nodes if n.kind == CONV}
    assert convs == {"conv2d_0": [0, 8, 16], "conv2d_1": [8, 16], "conv2d_2": [8, 16],
                     "conv2d_3": [0, 8, 16], "conv2d_4": [0, 8, 16]}
    for choice in itertools.product(*convs.values()):
        blocks = dict(zip(convs, choice))
        charged = sum(t for _, t in breakdown(g, assign(g, blocks)))
        built = prepare_plan(model, "llvm", 1, LayoutPlan(blocks)).module
        assert charged == _layout_transforms(built), blocks
    # `default` packs both in blocks of 8; with that block left out of a search, the program has no
    # cost for its build (the report leaves it out) rather than a wrong one
    from search.layout_search import modeled_cost, per_model_forms
    from search.models import prepare_model

    graph = model.optimized(Pipeline(graph_passes()))
    default = prepare_model(model, "llvm", threads=1, pipeline="default")
    forms = per_model_forms(graph, default)
    assert {name: block for name, (block, _) in forms.items()} == {
        "conv2d_0": 0, "conv2d_1": 8, "conv2d_2": 8, "conv2d_3": 0, "conv2d_4": 0}
    costs = {n: LayerCost({0: 1.0, 8: 1.0, 16: 1.0}, forms={(b, 0): 1.0 for b in (0, 8, 16)}) for n in layers}
    assert modeled_cost(g, costs, forms) == len(layers) + _layout_transforms(default.module)
    costs16 = {n: LayerCost({0: 1.0, 16: 1.0}, forms={(b, 0): 1.0 for b in (0, 16)}) for n in layers}
    g16 = layout_graph(model, costs16, (16,), resolve_target("llvm", 1))
    assert math.isnan(modeled_cost(g16, costs16, forms))


def _grouped_layers_run_packed(mod) -> bool:
    """Whether every grouped conv of a prepared module (in @main or in a fused function) runs in
    channel blocks."""
    calls = [n for f in mod.functions.values() for n in post_order(f.body) if isinstance(n, Call)]
    calls += [n for c in calls if isinstance(c.op, Function) for n in post_order(c.op.body)
              if isinstance(n, Call)]
    grouped = [c for c in calls if op_name(c) == "nn.conv2d" and c.attrs["groups"] > 1]
    return bool(grouped) and all(c.attrs["data_layout"] != "NCHW" for c in grouped)


def test_a_slow_model_is_profiled_over_fewer_runs():
    """Each profiling of a candidate build lasts about `PROFILE_SECONDS`: a model whose call takes
    longer than that is run the fewest times, a fast one the most asked for, and never more."""
    import time

    from search.kernel_profiles import MIN_PROFILE_RUNS, PROFILE_SECONDS, profile_runs

    def slow(*args):
        time.sleep(PROFILE_SECONDS / 2)

    def fast(*args):
        return None

    assert profile_runs(slow, [], 10) == MIN_PROFILE_RUNS
    assert profile_runs(fast, [], 10) == 10
    assert profile_runs(fast, [], 2) == 2  # the most asked for bounds the floor too
