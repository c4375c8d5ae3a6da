"""LayoutPlan: JSON round trip, the per-layer blocks it asks for appear in the built graph, and a
model built from a random plan computes what the reference interpreter and the default build do."""

from __future__ import annotations

import random

import numpy as np
import pytest

import autorelay
from autorelay.build_module import build_prepared
from autorelay.codegen import resolve_target
from autorelay.frontend import zoo
from autorelay.transform.convert_layout import channel_block
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers, plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes
from autorelay.transform.prepare import prepare
from autorelay.transform.quantize.layers import layer_calls
from autorelay.transform.util import tensor_type


def test_json_round_trip_and_validation():
    plan = LayoutPlan({"conv2d_10": 16, "conv2d_2": 8, "conv2d_0": 0})
    assert list(plan.blocks) == ["conv2d_0", "conv2d_2", "conv2d_10"]  # numeric order, not text order
    assert LayoutPlan.from_json(plan.to_json()) == plan
    blocks = plan.conv_blocks()
    assert blocks[2] == (8, 8) and blocks[1] == (0, 0) and len(blocks) == 11
    assert plan.unknown_layers(["conv2d_0", "conv2d_2"]) == ["conv2d_10"]
    with pytest.raises(ValueError, match="conv layer name"):
        LayoutPlan({"dense_0": 8})
    with pytest.raises(ValueError, match=">= 0"):
        LayoutPlan({"conv2d_0": -8})
    with pytest.raises(ValueError, match="unknown key"):
        LayoutPlan.from_json('{"blocks": {}, "extra": 1}')


MODELS = [("resnet-18", {"image_size": 32}), ("inception", {"image_size": 16}),
          ("mobilenet-v2", {"image_size": 32})]


@pytest.mark.cpu
@pytest.mark.parametrize(("name", "options"), MODELS, ids=[m[0] for m in MODELS])
def test_plan_blocks_reach_the_built_graph_and_outputs_match(name: str, options: dict):
    mod, params = zoo.get(name, **options)
    inputs = zoo.random_inputs(mod, params, seed=5)
    layers = conv_layers(mod)
    rng = random.Random(len(layers))
    plan = LayoutPlan({layer: rng.choice([0, 8, 16]) for layer in layers})
    fused = prepare(mod, params, plan_pipeline(plan))
    graph = prepare(mod, params, Pipeline(graph_passes()))
    built = built_layers(graph, fused)
    calls = layer_calls(graph)
    for layer in layers:
        in_c = tensor_type(calls[layer].args[0]).shape[1]
        want = channel_block(in_c, plan.block(layer))
        assert built[layer][0] == want, layer
    exe = build_prepared(fused, resolve_target("llvm"), None)
    got = np.asarray(exe.run(**inputs))
    default = np.asarray(autorelay.build(mod, params=params).run(**inputs))
    args = [inputs[p.name_hint] if p.name_hint in inputs else params[p.name_hint] for p in mod["main"].params]
    want = np.asarray(autorelay.evaluate(mod, *args))
    scale = max(float(np.abs(want).max()), 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(got, default, rtol=1e-4, atol=1e-4 * scale)


def test_all_zero_plan_is_the_default_layout():
    mod, params = zoo.get("resnet-18", image_size=32)
    fused = prepare(mod, params, plan_pipeline(LayoutPlan.uniform(conv_layers(mod), 0)))
    graph = prepare(mod, params, Pipeline(graph_passes()))
    assert {b for b, _ in built_layers(graph, fused).values()} == {0}
    assert len(built_layers(graph, fused)) == len(conv_layers(mod)) == 20
