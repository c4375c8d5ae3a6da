"""Screening `--pipeline plan`'s layout alternatives (`search.plan_screen`): a form far behind the
layer's fastest is not tuned, forms of the same layers are one scheduler group, and the pruned
tasks are reported as skipped, with the reason."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import autorelay
import search.layout_costs as layout_costs
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from search.extract import Extraction, ModelTask, Skipped
from search.fusion_choice import POOLS
from search.layout_costs import LayerCost
from search.models import Model, load_model
from search.pipeline_choice import prepare_plan
from search.plan_screen import (
    DEFER_RATIO,
    PRUNE_RATIO,
    TRAILING_RATIO,
    PlanScreen,
    decide,
    default_plan_forms,
    layer_forms,
    plan_kernels,
    trailing_forms,
    untuned_blocks,
)


def _costs() -> dict[str, LayerCost]:
    """Two layers: on `a` block 16 leads (NCHW direct 3x, block 8 1.2x behind); on `b` F(2x2) leads."""
    return {
        "a": LayerCost(kernel={0: 3.0, 8: 1.2, 16: 1.0}, forms={(0, 0): 3.0, (8, 0): 1.2, (16, 0): 1.0}),
        "b": LayerCost(kernel={0: 1.0, 8: 2.0, 16: 1.6},
                       forms={(0, 0): 4.0, (0, 2): 1.0, (8, 0): 2.0, (16, 0): 1.6}),
    }


def test_a_form_far_behind_on_every_layer_is_pruned():
    forms = {
        "direct_a": {"a": (0, 0)},  # 3x behind
        "c8_a": {"a": (8, 0)},  # 1.2x: kept
        "c16_both": {"a": (16, 0), "b": (16, 0)},  # leads on a: kept
        "c8_b": {"b": (8, 0)},  # 2x behind
        "f2_b": {"b": (0, 2)},
        "direct_b": {"b": (0, 0)},  # 4x behind
        "f4_b": {"b": (0, 4)},  # never measured (the op refused it): kept, it cannot be judged
    }
    screen = decide(_costs(), forms)
    assert set(screen.pruned) == {"direct_a", "c8_b", "direct_b"}
    assert "3.00x" in screen.pruned["direct_a"] and f"{PRUNE_RATIO:g}x" in screen.pruned["direct_a"]
    assert screen.groups["c8_a"] == screen.groups["direct_a"] == frozenset({"a"})
    assert screen.groups["c16_both"] == frozenset({"a", "b"})
    looser = decide(_costs(), forms, ratio=5.0)
    assert not looser.pruned


def test_a_form_between_the_defer_and_prune_ratios_is_deferred():
    """On layer `a` block 8 runs 1.2x the leader's time: kept and deferred at the default ratio,
    plainly kept above it; a form behind on one layer but leading on another is not deferred."""
    forms = {"c8_a": {"a": (8, 0)}, "c16_both": {"a": (16, 0), "b": (16, 0)}, "f2_b": {"b": (0, 2)},
             "direct_a": {"a": (0, 0)}}
    screen = decide(_costs(), forms, defer=1.1)
    assert screen.deferred == {"c8_a": pytest.approx(1.2)}  # c16_both is 1.6x behind on b, leads on a
    assert set(screen.pruned) == {"direct_a"}
    assert not decide(_costs(), forms, defer=1.25).deferred
    assert DEFER_RATIO < PRUNE_RATIO


def test_a_form_the_default_plan_picks_is_neither_pruned_nor_deferred():
    """Block 8 trails on both layers alone (1.2x on `a`, 2x on `b`), but the default-cost plan,
    sparing the re-layouts, runs both in it: both stay, undeferred; NCHW direct on `a` is still
    pruned."""
    forms = {"c8_a": {"a": (8, 0)}, "c8_b": {"b": (8, 0)}, "direct_a": {"a": (0, 0)},
             "c16_both": {"a": (16, 0), "b": (16, 0)}}
    chosen = {"a": (8, 0), "b": (8, 0)}
    alone = decide(_costs(), forms, defer=1.1)
    assert "c8_b" in alone.pruned and "c8_a" in alone.deferred
    screen = decide(_costs(), forms, defer=1.1, chosen=chosen)
    assert set(screen.pruned) == {"direct_a"} and not screen.deferred
    assert screen.chosen == chosen
    # a chosen form on one layer keeps a task serving several layers
    shared = decide(_costs(), {"c8_both": {"a": (8, 0), "b": (8, 0)}}, defer=1.1, chosen={"a": (8, 0)})
    assert not shared.pruned and not shared.deferred


@pytest.mark.parametrize("relayout_s", [0.0, 0.5])
def test_default_plan_forms_weigh_a_layers_time_against_the_relayouts_it_needs(monkeypatch, relayout_s):
    """Every layer runs fastest in blocks of 8, as F(4x4) where it has one, but for one middle
    layer whose NCHW form is 1.3x faster alone: with free re-layouts the plan runs that layer in
    NCHW; with re-layouts dearer than that gain, in its block like its neighbours (its fastest
    form there)."""
    monkeypatch.setattr(layout_costs, "transform_seconds", lambda *a, **k: relayout_s)
    model = load_model("resnet-18", image_size=32)
    layers = conv_layers(model.mod)
    odd = layers[len(layers) // 2]
    costs = {}
    for name in layers:
        nchw = 1.0 / 1.3 if name == odd else 2.0
        costs[name] = LayerCost()
        costs[name].add((0, 0), nchw, "default")
        costs[name].add((8, 0), 1.0, "default")
        if name == odd:
            costs[name].add((8, 4), 0.9, "default")
    got = default_plan_forms(model, costs, (8,), autorelay.codegen.resolve_target("llvm", 1))
    assert set(got) == set(layers)
    assert all(got[n] == (8, 0) for n in layers if n != odd)
    assert got[odd] == ((0, 0) if relayout_s == 0.0 else (8, 4))


def _task(key: str, count: int) -> ModelTask:
    return ModelTask(name=key, cdef=None, target=None, template="t", space=None, default=None, flops=1.0,
                     key=key, workload={}, count=count)


def test_apply_skips_pruned_tasks_with_their_reason_and_groups_the_rest():
    screen = PlanScreen(groups={"x8": frozenset({"a"}), "x16": frozenset({"a"}), "y": frozenset({"b"}),
                                "y2": frozenset({"b"})},
                        pruned={"x8": "its layout is slow"})
    ex = Extraction([_task("x8", 2), _task("x16", 2), _task("y", 1), _task("y2", 3), _task("pool", 1)],
                    [Skipped("copy", "k", 1, "injective")], 10.0)
    kept, groups = screen.apply(ex)
    assert [t.key for t in kept.tasks] == ["x16", "y", "y2", "pool"]
    assert [s.reason for s in kept.skipped] == ["injective", "its layout is slow"]
    # y and y2 claim the same layers with different weights: the scheduler would refuse the group,
    # so each keeps its own key; a task outside every group (a pool) keeps its key too
    assert groups == [frozenset({"a"}), "y", "y2", "pool"]


@pytest.mark.parametrize("ratio", [1.0, PRUNE_RATIO])
def test_a_leading_form_is_never_pruned(ratio):
    screen = decide(_costs(), {"c16_a": {"a": (16, 0)}, "f2_b": {"b": (0, 2)}}, ratio)
    assert not screen.pruned


def test_layer_forms_inverts_the_keys_the_cost_profile_recorded():
    """A kernel shared by two layers (same workload) is one task serving both, in its form on each."""
    costs = {"a": LayerCost(keys={(0, 0): "direct_a", (16, 0): "c16", (0, 4): "f4_a"}),
             "b": LayerCost(keys={(0, 2): "f2_b", (16, 0): "c16"})}
    assert layer_forms(costs) == {"direct_a": {"a": (0, 0)}, "c16": {"a": (16, 0), "b": (16, 0)},
                                  "f4_a": {"a": (0, 4)}, "f2_b": {"b": (0, 2)}}


def test_a_block_whose_kernels_were_all_behind_and_untuned_is_left_out_of_the_layout_search():
    """Blocks of 8 trail on both layers (1.2x deferred on `a`, 2x pruned on `b`); blocks of 16
    lead on `a`. A deferred form the run drew and tuned keeps its block; a leading form the budget
    never reached keeps its block; NCHW, the model's own layout, always stays."""
    costs = _costs()
    costs["a"].keys = {(0, 0): "direct_a", (8, 0): "c8_a", (16, 0): "c16_both"}
    costs["b"].keys = {(0, 0): "direct_b", (0, 2): "f2_b", (8, 0): "c8_b", (16, 0): "c16_both"}
    screen = decide(costs, layer_forms(costs), defer=1.1)
    assert screen.deferred == {"c8_a": pytest.approx(1.2)} and "c8_b" in screen.pruned
    assert untuned_blocks(screen, {"c16_both", "f2_b"}) == {8}
    assert untuned_blocks(screen, set()) == {8}  # 16's leader untuned for want of budget: kept
    assert untuned_blocks(screen, {"c16_both", "c8_a"}) == frozenset()  # drawn after all
    everything = replace(screen, pruned=dict.fromkeys(layer_forms(costs), "slow"), deferred={})
    assert untuned_blocks(everything, set()) == {8, 16}


def test_only_forms_far_behind_their_layers_best_skip_the_final_remeasurement():
    a, b = frozenset({"a"}), frozenset({"b"})
    groups = [a, a, a, "pool", b, b]
    best = [1.0, 0.99 * TRAILING_RATIO, 2.0 * TRAILING_RATIO, 50.0, float("inf"), 3.0]
    # a slow kernel with no alternative (the pool), and a form never measured (inf), are kept
    assert trailing_forms(groups, best) == {2: pytest.approx(2.0 * TRAILING_RATIO)}


POOLED_NET = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 16, 16), float32], %w0: Tensor[(16, 3, 3, 3), float32],
          %w1: Tensor[(16, 16, 3, 3), float32], %w2: Tensor[(10, 1024), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w0, padding=[1, 1], channels=16, kernel_size=[3, 3]));
  %1 = nn.max_pool2d(%0, pool_size=[2, 2], strides=[2, 2]);
  %2 = nn.relu(nn.conv2d(%1, %w1, padding=[1, 1], channels=16, kernel_size=[3, 3]));
  nn.dense(nn.batch_flatten(%2), %w2, units=10)
}"""


def _pooled_net() -> Model:
    rng = np.random.default_rng(0)
    mod = autorelay.parse(POOLED_NET)
    shapes = {"w0": (16, 3, 3, 3), "w1": (16, 16, 3, 3), "w2": (10, 1024)}
    params = {n: rng.standard_normal(s).astype("float32") for n, s in shapes.items()}
    return Model("pooled", mod, params, {"x": rng.standard_normal((1, 3, 16, 16)).astype("float32")})


def test_plan_kernels_are_the_plans_kernels_under_each_fusion_the_search_times():
    """The default plan's kernels: its own build's (Relay's rules: a standalone pooling), the
    pooling run as the first convolution's epilogue, the stem and the classifier with their
    re-layouts fused; no kernel of the NCHW build but those the layouts share."""
    model, target = _pooled_net(), autorelay.codegen.resolve_target("llvm -mcpu=haswell", 1)
    layers = conv_layers(model.mod)
    blocked = LayoutPlan.uniform(layers, 8, winograd=0)
    keys = plan_kernels(model, target, blocked)
    names = {t.key: t.name for p in (blocked, replace(blocked, fusion=POOLS),
                                     replace(blocked, fusion=FusionPlan.prologues()))
             for t in prepare_plan(model, target, None, p).extraction.tasks}
    assert set(names) <= keys
    assert any("max_pool2d" in n and "conv2d" in n for n in names.values())  # the pooled epilogue
    assert any(n.endswith(".max_pool2d") for n in names.values())  # Relay's rules: pooled alone
    assert any("layout_transform" in n and "dense" in n for n in names.values())
    nchw = {t.key for t in prepare_plan(model, target, None, LayoutPlan.uniform(layers, 0)).extraction.tasks}
    assert not {k for k in nchw - keys if "conv2d" in k} and nchw - keys


def test_kernels_the_default_plan_does_not_run_wait_with_the_deferred_forms():
    """`waiting`: the deferred conv forms with their ratio, and a kernel outside every layer group
    (a pooling in another layout) the default plan's builds do not run, as nan; a kernel they run,
    and a conv form kept warm, are not."""
    screen = PlanScreen(groups={"x8": frozenset({"a"}), "x16": frozenset({"a"})}, deferred={"x16": 1.3},
                        primary=frozenset({"x8", "pool8"}))
    ex = Extraction([_task(k, 1) for k in ("x8", "x16", "pool8", "pool0")], [], 4.0)
    got = screen.waiting(ex)
    assert set(got) == {"x16", "pool0"} and got["x16"] == 1.3 and math.isnan(got["pool0"])
    assert PlanScreen(deferred={"x16": 1.3}).waiting(ex) == {"x16": 1.3}  # no primary set: forms only
