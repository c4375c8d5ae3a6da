"""LayoutPlan: JSON round trip, the per-layer blocks and Winograd tiles it asks for appear in the
built graph, and a model built from a random plan computes what the reference interpreter and the
default build do; on a model with layers in int8, the float layers keep their plan and the int8 ones
run blocked."""

from __future__ import annotations

import random

import numpy as np
import pytest

import autorelay
from autorelay.build_module import build_prepared
from autorelay.codegen import resolve_target
from autorelay.frontend import zoo
from autorelay.ir import post_order
from autorelay.ir.expr import Call, Function
from autorelay.transform.convert_layout import channel_block
from autorelay.transform.layout_plan import (
    LayoutPlan,
    built_layers,
    conv_layers,
    plan_pipeline,
)
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes
from autorelay.transform.prepare import prepare
from autorelay.transform.quantize import QuantizePlan, calibrate, float_layers, quantize_model
from autorelay.transform.quantize.layers import layer_calls
from autorelay.transform.util import op_name, tensor_type


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


def test_winograd_tiles_round_trip_and_reach_the_pass():
    plan = LayoutPlan({"conv2d_0": 0, "conv2d_1": 16, "conv2d_3": 0, "conv2d_4": 8},
                      {"conv2d_4": 2, "conv2d_3": 4, "conv2d_0": 0})
    assert list(plan.winograd) == ["conv2d_0", "conv2d_3", "conv2d_4"]
    assert LayoutPlan.from_json(plan.to_json()) == plan
    # a blocked layer the plan gives no tile is direct; an unnamed NCHW one is left to the rule
    assert plan.conv_tiles() == ((0, 0), (1, 0), (3, 4), (4, 2))
    assert plan.describe() == "conv2d_0:0/direct conv2d_1:16 conv2d_3:0/F4 conv2d_4:8/F2"
    old = LayoutPlan.from_json('{"blocks": {"conv2d_0": 8}}')  # stored before tiles were a choice
    assert old.winograd == {} and "winograd" not in old.to_dict()
    assert LayoutPlan({}, {"conv2d_7": 2}).unknown_layers(["conv2d_0"]) == ["conv2d_7"]
    with pytest.raises(ValueError, match=r"Winograd tile of conv2d_0 must be one of \(0, 2, 4\)"):
        LayoutPlan({}, {"conv2d_0": 3})


def test_on_quantized_renumbers_the_float_layers():
    """The quantized model's conv layers are the kept float ones in order: each keeps its block and
    tile, named explicitly (0 too), and the int8 convolutions take the given block."""
    plan = LayoutPlan({"conv2d_0": 16, "conv2d_2": 8, "conv2d_4": 16}, {"conv2d_2": 4, "conv2d_3": 2})
    got = plan.on_quantized(["conv2d_0", "conv2d_2", "conv2d_3"], 16)
    want = LayoutPlan({"conv2d_0": 16, "conv2d_1": 8, "conv2d_2": 0}, {"conv2d_1": 4, "conv2d_2": 2}, 16)
    assert got == want
    assert got.conv_blocks() == ((16, 16), (8, 8), (0, 0))
    assert LayoutPlan.from_json(got.to_json()) == got and got.to_dict()["int8_block"] == 16
    assert "int8_block" not in plan.to_dict() and got.describe().endswith(" int8:16")
    layers = [f"conv2d_{i}" for i in range(5)]
    assert plan.on_quantized(layers, 16) == LayoutPlan({**dict.fromkeys(layers, 0), **plan.blocks},
                                                       plan.winograd, 16)
    with pytest.raises(ValueError, match="not a conv layer name"):
        plan.on_quantized(["dense_0"], 16)
    with pytest.raises(ValueError, match="kept twice"):
        plan.on_quantized(["conv2d_1", "conv2d_1"], 16)
    with pytest.raises(ValueError, match="int8_block must be an int >= 0"):
        LayoutPlan({}, {}, -8)


QUANTIZED = [("resnet-18", {"image_size": 32}), ("mobilenet-v2", {"image_size": 32})]


@pytest.mark.cpu
@pytest.mark.parametrize(("name", "options"), QUANTIZED, ids=[m[0] for m in QUANTIZED])
def test_a_plan_on_a_quantized_model(name: str, options: dict):
    """Random layers in int8, a random plan for the float ones: each float layer is built in its
    block, every int8 convolution blocked, and the outputs are the reference interpreter's on the
    quantized model."""
    mod, params = zoo.get(name, **options)
    inputs = zoo.random_inputs(mod, params, seed=5)
    layers = conv_layers(mod)
    rng = random.Random(len(layers) + 1)
    plan = LayoutPlan({layer: rng.choice([0, 8, 16]) for layer in layers},
                      {layer: rng.choice([0, 2, 4]) for layer in layers})
    int8 = [layer for layer in layers if rng.random() < 0.5]
    calibration = calibrate(mod, params, [inputs], method="max", progress=False)
    precisions = QuantizePlan({n: "int8" if n in int8 else "fp32" for n in layer_calls(mod)})
    qmod, qparams = quantize_model(mod, params, calibration, precisions)
    kept = [layer for layer in float_layers(qmod) if layer in layers]
    assert kept == [layer for layer in layers if layer not in int8]  # every conv here has an int8 kernel
    qplan = plan.on_quantized(kept, 16)
    assert qplan.unknown_layers(conv_layers(qmod)) == [] and len(conv_layers(qmod)) == len(kept)
    fused = prepare(qmod, qparams, plan_pipeline(qplan))
    graph = prepare(qmod, qparams, Pipeline(graph_passes()))
    built, calls = built_layers(graph, fused), layer_calls(graph)
    for new, old in zip(conv_layers(qmod), kept):
        in_c = tensor_type(calls[new].args[0]).shape[1]
        assert built[new][0] == channel_block(in_c, plan.block(old)), (new, old)
    qconvs = [n for n in post_order(fused["main"].body) if isinstance(n, Call) and isinstance(n.op, Function)
              for m in post_order(n.op.body) if op_name(m) == "qnn.conv2d"
              and m.attrs["data_layout"].startswith("NCHW") and m.attrs["data_layout"] != "NCHW"]
    assert len(qconvs) == len(int8)
    got = np.asarray(build_prepared(fused, resolve_target("llvm"), None).run(**inputs))
    args = [inputs[p.name_hint] if p.name_hint in inputs else qparams[p.name_hint]
            for p in qmod["main"].params]
    want = np.asarray(autorelay.evaluate(qmod, *args))
    assert np.linalg.norm(got - want) <= 1e-3 * np.linalg.norm(want)


MODELS = [("resnet-18", {"image_size": 32}), ("inception", {"image_size": 16}),
          ("mobilenet-v2", {"image_size": 32})]


@pytest.mark.cpu
@pytest.mark.parametrize(("name", "options"), MODELS, ids=[m[0] for m in MODELS])
def test_plan_blocks_reach_the_built_graph_and_outputs_match(name: str, options: dict):
    """Random blocks and random Winograd tiles (0: direct): each layer is built as the plan says,
    blocked Winograd included (a tile only where the op computes the conv: 3x3, stride 1)."""
    mod, params = zoo.get(name, **options)
    inputs = zoo.random_inputs(mod, params, seed=5)
    layers = conv_layers(mod)
    rng = random.Random(len(layers))
    blocks = {layer: rng.choice([0, 8, 16]) for layer in layers}
    plan = LayoutPlan(blocks, {layer: rng.choice([0, 2, 4]) for layer in layers})
    fused = prepare(mod, params, plan_pipeline(plan))
    graph = prepare(mod, params, Pipeline(graph_passes()))
    built = built_layers(graph, fused)
    calls = layer_calls(graph)
    for layer in layers:
        in_c = tensor_type(calls[layer].args[0]).shape[1]
        want = channel_block(in_c, plan.block(layer))
        assert built[layer][0] == want, layer
        a = calls[layer].attrs
        computable = tuple(a["strides"]) == tuple(a["dilation"]) == (1, 1) and a["groups"] == 1 \
            and tuple(tensor_type(calls[layer].args[1]).shape[2:]) == (3, 3)
        tile = plan.winograd.get(layer, 0) if computable else 0
        assert _winograd_positions(built[layer][1]) == ((tile + 2) ** 2 if tile else 0), layer
    exe = build_prepared(fused, resolve_target("llvm"), None)
    got = np.asarray(exe.run(**inputs))
    default = np.asarray(autorelay.build(mod, params=params).run(**inputs))
    args = [inputs[p.name_hint] if p.name_hint in inputs else params[p.name_hint] for p in mod["main"].params]
    want = np.asarray(autorelay.evaluate(mod, *args))
    scale = max(float(np.abs(want).max()), 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(got, default, rtol=1e-4, atol=1e-4 * scale)


def _winograd_positions(fn) -> int:
    for n in post_order(fn.body):
        if op_name(n) == "nn.conv2d_winograd":
            return tensor_type(n.args[1]).shape[0]
    return 0


def test_all_zero_plan_is_the_default_layout():
    mod, params = zoo.get("resnet-18", image_size=32)
    fused = prepare(mod, params, plan_pipeline(LayoutPlan.uniform(conv_layers(mod), 0)))
    graph = prepare(mod, params, Pipeline(graph_passes()))
    assert {b for b, _ in built_layers(graph, fused).values()} == {0}
    assert len(built_layers(graph, fused)) == len(conv_layers(mod)) == 20
