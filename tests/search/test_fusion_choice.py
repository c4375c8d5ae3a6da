"""Fusion as a choice of the layout plan: prologue-fused builds of the zoo's CNNs for AVX2 and AVX-512
targets (both compiled on every host; each run where this host has its CPU's features, and skipped,
naming the ones it lacks, elsewhere) equal the reference interpreter; the plan carries its fusion
through JSON; the tuner's prologue tasks are grouped with the layer they implement; the variants the
search times."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from host_widths import run_here_or_skip

import autorelay
from autorelay.codegen import resolve_target
from autorelay.ir.expr import Call, Function
from autorelay.ir.visitor import post_order
from autorelay.lower import workload_key
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from search.fusion_choice import (
    BAND_THRESHOLDS,
    BANDS,
    COPIES,
    EXPANSIONS,
    POOLS,
    SINGLE_EDGE_LIMIT,
    band_variants,
    depthwise_band_edges,
    fused_tasks,
    fusion_candidates,
    fusion_variants,
    pool_epilogue_edges,
    prologue_edges,
)
from search.models import build_model, load_model, run_inputs
from search.pipeline_choice import PLAN, prepare_plan

pytestmark = pytest.mark.cpu

CPUS = {"avx2": "llvm -mcpu=znver3", "avx512": "llvm -mcpu=skylake-avx512"}


def _reference(model) -> np.ndarray:
    mod = model.mod
    args = [model.inputs[p.name_hint] if p.name_hint in model.inputs else model.params[p.name_hint]
            for p in mod["main"].params]
    return np.asarray(autorelay.evaluate(mod, *args))


def _kernel_ops(module) -> list[list[str]]:
    """The op names of each primitive function `@main` calls."""
    out = []
    for n in post_order(module["main"].body):
        if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive:
            body = post_order(n.op.body)
            out.append([m.op.name for m in body if isinstance(m, Call) and hasattr(m.op, "name")])
    return out


@pytest.mark.parametrize("cpu", sorted(CPUS))
@pytest.mark.parametrize("name", ["resnet-18", "mobilenet-v2", "inception"])
def test_prologue_fused_builds_equal_the_interpreter(name, cpu):
    """Each model and width builds one plan: blocks of one vector, direct (AVX-512), or blocks of 8
    with Winograd F(4x4) layers (AVX2), so the direct and the Winograd prologue kernels are both
    built for each model; each build runs against the interpreter where this host has its features."""
    model = load_model(name, image_size=32)
    target = CPUS[cpu]
    lanes = resolve_target(target, 1).vector_lanes()
    layers = conv_layers(model.mod)
    plan = LayoutPlan.uniform(layers, lanes) if lanes > 8 else LayoutPlan.uniform(layers, 8, winograd=4)
    edges, _ = prologue_edges(model, plan)
    # the model's NCHW input is re-laid out for the blocked stem: that transform is a candidate
    assert any(v == "layout_transform -> nn.conv2d" for v in edges.values()), edges
    fused = replace(plan, fusion=FusionPlan.prologues())
    prepared = prepare_plan(model, target, 1, fused)
    kernels = _kernel_ops(prepared.module)
    stem = next(k for k in kernels if "nn.conv2d" in k)
    assert "layout_transform" in stem  # the stem reads the NCHW input itself
    exe = build_model(model, None, prepared=prepared)
    assert not exe.report.fallbacks
    run_here_or_skip(target)
    ref = _reference(model)
    out = np.asarray(exe(*run_inputs(exe, model)))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(float(np.abs(ref).max()), 1e-3))


def test_plan_json_carries_its_fusion_and_quantizing_drops_it():
    fusion = FusionPlan.prologues().without_edges([(69, 70)])
    plan = LayoutPlan({"conv2d_0": 16, "conv2d_1": 8}, {"conv2d_1": 4}, fusion=fusion)
    back = LayoutPlan.from_json(plan.to_json())
    assert back == plan and back.fusion == fusion
    assert "fusion" not in LayoutPlan({"conv2d_0": 16}).to_dict()  # older plans read back the same
    assert LayoutPlan.from_json({"blocks": {"conv2d_0": 16}}).fusion is None
    assert "relay+prologues" in plan.describe()
    assert plan.on_quantized(["conv2d_1"], 16).fusion is None  # its edges number the float graph
    with pytest.raises(ValueError, match="fusion must be a FusionPlan"):
        LayoutPlan({"conv2d_0": 16}, fusion={"rules": []})


def test_fused_tasks_are_new_kernels_grouped_with_their_layer():
    model = load_model("resnet-18", image_size=32)
    target = "llvm -mcpu=skylake-avx512"
    layers = conv_layers(model.mod)
    known = {t.key for block in (0, 8, 16)
             for t in prepare_plan(model, target, 1, LayoutPlan.uniform(layers, block)).extraction.tasks}
    tasks, groups = fused_tasks(model, target, 1, (8, 16), known)
    assert tasks and not {t.key for t in tasks} & known
    assert len({t.key for t in tasks}) == len(tasks)
    names = {t.key: t.name for t in tasks}
    stems = [k for k, layer_set in groups.items() if layer_set == frozenset({"conv2d_0"})]
    assert stems and all("layout_transform" in names[k] for k in stems)
    assert any("dense" in t.name and "batch_flatten" in t.name for t in tasks)  # the classifier's
    assert set(groups) <= set(names)  # only conv kernels have a layer group
    # the stem of the block-16 plan with prologues is one of them
    fused = prepare_plan(model, target, 1, replace(LayoutPlan.uniform(layers, 16, winograd=0),
                                                   fusion=FusionPlan.prologues()))
    stem = next(n.op for n in post_order(fused.module["main"].body)
                if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive
                and "conv2d" in str([m.op for m in post_order(n.op.body) if isinstance(m, Call)]))
    assert workload_key(stem) in stems


def test_fusion_variants():
    assert fusion_variants({}) == {}
    one = fusion_variants({(0, 1): "layout_transform -> nn.conv2d"})
    assert one == {f"{PLAN}+prologues": FusionPlan.prologues()}
    edges = {(0, 1): "a", (5, 6): "b", (9, 10): "c"}
    got = fusion_variants(edges)
    assert got[f"{PLAN}+prologues"] == FusionPlan.prologues()
    assert got[f"{PLAN}+prologue 5->6"].disabled_edges == {(0, 1), (9, 10)}
    assert len(got) == 1 + len(edges)
    many = {(i, i + 1): "x" for i in range(0, 2 * (SINGLE_EDGE_LIMIT + 1), 2)}
    assert list(fusion_variants(many)) == [f"{PLAN}+prologues"]
    copies = fusion_variants(many, shared=True)[f"{PLAN}+prologues+copies"]
    assert copies.copy_shared and copies.rules == FusionPlan.prologues().rules
    assert fusion_variants({}, pools=True) == {f"{PLAN}+pool epilogues": POOLS}
    both = fusion_variants(edges, pools=True)[f"{PLAN}+prologues+pool epilogues"]
    assert both.pool_epilogues and both.rules == FusionPlan.prologues().rules


def test_band_variants_drop_the_smallest_maps_first():
    assert band_variants({}) == {} and fusion_variants({}, bands={}) == {}
    bands = {(1, 2): 112, (5, 6): 56, (9, 10): 56, (13, 14): 28, (17, 18): 14, (21, 22): 7}
    got = fusion_variants({}, bands=bands)
    assert got[f"{PLAN}+depthwise bands"] == BANDS
    thresholds = [14, 28, 56][:BAND_THRESHOLDS]
    named = [f"{PLAN}+depthwise bands on >= {r} rows" for r in thresholds]
    assert list(got) == [f"{PLAN}+depthwise bands", *named]
    for r in thresholds:
        plan = got[f"{PLAN}+depthwise bands on >= {r} rows"]
        assert plan.depthwise_bands and plan.disabled_edges == {e for e, rows in bands.items() if rows < r}
    assert list(band_variants({(1, 2): 7, (3, 4): 7})) == [f"{PLAN}+depthwise bands"]  # one size: all or none


def test_depthwise_bands_of_mobilenet_are_candidates_and_tasks():
    """MobileNet-v2's 17 depthwise-separable pairs (depthwise 3x3, ReLU6, 1x1 projection): each is a
    band edge of a blocked plan, with its map's rows, and each band kernel a task grouped with its
    two layers; the convolution before each depthwise one (16 expansions and the stem) is an
    expansion edge of its band, and each expanded band kernel a task grouped with its three layers;
    the banded and expanded plans' builds agree with the reference interpreter."""
    model = load_model("mobilenet-v2", image_size=64)
    target = "llvm -mcpu=znver3"
    layers = conv_layers(model.mod)
    assert depthwise_band_edges(model, LayoutPlan.uniform(layers, 0)) == {}  # NCHW convs stay apart
    plan = LayoutPlan.uniform(layers, 8, winograd=0)
    bands = depthwise_band_edges(model, plan)
    assert len(bands) == 17 and sorted(set(bands.values())) == [2, 4, 8, 16, 32]
    expansions = fusion_candidates(model, plan).expansions
    assert len(expansions) == 17 and {e.band for e in expansions.values()} == set(bands)
    assert sorted({e.rows for e in expansions.values()}) == [2, 4, 8, 16, 32]  # the expanded maps
    known = {t.key for block in (0, 8)
             for t in prepare_plan(model, target, 1, LayoutPlan.uniform(layers, block)).extraction.tasks}
    tasks, groups = fused_tasks(model, target, 1, (8,), known)
    by_convs: dict[int, set[str]] = {2: set(), 3: set()}
    for t in tasks:
        if t.template == "conv2d_nchwc_dwpw":
            by_convs[t.name.count("conv2d")].add(t.key)
    # a kernel is a form of its pair's two layers or its triple's three (of every such pair or triple,
    # where repeated blocks share it)
    for convs, keys in by_convs.items():
        assert keys and all(len(groups[k]) % convs == 0 for k in keys)
        assert len(set().union(*(groups[k] for k in keys))) == convs * 17
    reference = _reference(model)
    for fusion in (BANDS, EXPANSIONS):
        exe = build_model(model, None, prepared=prepare_plan(model, target, 1, replace(plan, fusion=fusion)))
        run_here_or_skip(target)
        np.testing.assert_allclose(exe(*run_inputs(exe, model)), reference, rtol=1e-4, atol=1e-4)


def test_pool_epilogues_of_vgg_are_candidates_and_tasks():
    """VGG-16's five block ends (conv, ReLU, 2x2 max pool): each pooling is a candidate edge of a
    blocked plan, direct or Winograd, and each fused kernel a task grouped with the convolution it
    pools; the fused plans' builds agree with the reference interpreter."""
    model = load_model("vgg-16", image_size=32)
    target = "llvm -mcpu=znver3"
    layers = conv_layers(model.mod)
    ends = {layers[i] for i in (1, 3, 6, 9, 12)}  # the last conv of each block
    assert pool_epilogue_edges(model, LayoutPlan.uniform(layers, 0)) == {}  # NCHW convs stay apart
    known = {t.key for block in (0, 8, 16)
             for t in prepare_plan(model, target, 1, LayoutPlan.uniform(layers, block)).extraction.tasks}
    tasks, groups = fused_tasks(model, target, 1, (16,), known)
    pooled = {t.key: t for t in tasks if "max_pool2d" in t.name}
    assert {t.template for t in pooled.values()} == {"conv2d_nchwc_pool", "conv2d_winograd_nchwc_pool"}
    assert all(len(groups[k]) == 1 for k in pooled) and {next(iter(groups[k])) for k in pooled} == ends
    reference = _reference(model)
    for tile in (0, 2):  # (F(4x4)'s error through 13 random layers exceeds this bound pooled or not)
        plan = LayoutPlan.uniform(layers, 16, winograd=tile)
        pools = pool_epilogue_edges(model, plan)
        assert len(pools) == 5 and all(name.endswith("-> nn.max_pool2d") for name in pools.values())
        exe = build_model(model, None, prepared=prepare_plan(model, target, 1, replace(plan, fusion=POOLS)))
        np.testing.assert_allclose(exe(*run_inputs(exe, model)), reference, rtol=1e-4, atol=1e-4)
def test_a_shared_relayout_is_copied_into_each_convolution_that_reads_it():
    """ResNet-18 with the stem's block differing from its first stage's: the re-layout after the
    pool feeds two convolutions only where a block has a 1x1 shortcut; with the input stage in
    another block than the stride-2 stage, that re-layout has two conv readers."""
    model = load_model("resnet-18", image_size=32)
    layers = conv_layers(model.mod)
    stage2 = [n for n in layers if int(n.split("_")[1]) >= 5]  # from the first strided block on
    plan = LayoutPlan({**{n: 8 for n in layers}, **{n: 16 for n in stage2}})
    edges, shared = prologue_edges(model, plan)
    assert shared and edges
    copied = replace(plan, fusion=COPIES)
    prepared = prepare_plan(model, "llvm", 1, copied)
    relayouts = [k for k in _kernel_ops(prepared.module) if k == ["layout_transform"]]
    plain = [k for k in _kernel_ops(prepare_plan(model, "llvm", 1, plan).module) if k == ["layout_transform"]]
    assert len(relayouts) < len(plain)  # a shared re-layout no longer runs as its own kernel
    exe = build_model(model, None, prepared=prepared)
    ref = _reference(model)
    np.testing.assert_allclose(np.asarray(exe(*run_inputs(exe, model))), ref, rtol=1e-4,
                               atol=1e-4 * max(float(np.abs(ref).max()), 1e-3))
