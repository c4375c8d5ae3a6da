"""Layer names and QuantizePlan: stable names, JSON round trip, clear errors."""

from __future__ import annotations

import pytest
from quantize_nets import small_net

from autorelay.frontend import zoo
from autorelay.transform.quantize import QuantizePlan, layer_support, prepare_for_quantize, quantizable_layers


def test_layer_names_in_post_order_per_kind():
    names = quantizable_layers(small_net())
    assert names == [f"conv2d_{i}" for i in range(7)] + ["dense_0"]


def test_names_survive_batch_norm_folding():
    mod, params = zoo.get("resnet-18", image_size=32)
    before = quantizable_layers(mod)
    assert len(before) == 21 and before[-1] == "dense_0"
    prepared = prepare_for_quantize(mod, params)
    assert quantizable_layers(prepared) == before
    # the stem keeps its name: still a 7x7 convolution, now with the folded weight
    from autorelay.transform.quantize.layers import layer_calls

    assert layer_calls(prepared)["conv2d_0"].attrs["kernel_size"] == (7, 7)


def test_plan_json_round_trip():
    plan = QuantizePlan({"conv2d_1": "fp32", "dense_0": "fp32"}, default="int8")
    text = plan.to_json()
    back = QuantizePlan.from_json(text)
    assert back == plan and back.to_json() == text
    assert back.precision("conv2d_1") == "fp32" and back.precision("conv2d_0") == "int8"
    assert QuantizePlan.from_json(plan.to_dict()) == plan
    assert QuantizePlan.uniform("fp32").int8_layers(["conv2d_0"]) == []


def test_plan_unknown_layer_is_a_one_line_error_listing_the_valid_ones():
    plan = QuantizePlan({"conv2d_99": "fp32"})
    with pytest.raises(ValueError) as err:
        plan.check(small_net())
    msg = str(err.value)
    assert "conv2d_99" in msg and "conv2d_0" in msg and "dense_0" in msg and "\n" not in msg


def test_plan_rejects_unknown_precisions_and_keys():
    with pytest.raises(ValueError, match="int4"):
        QuantizePlan({"conv2d_0": "int4"})
    with pytest.raises(ValueError, match="default"):
        QuantizePlan({}, default="fp8")
    with pytest.raises(ValueError, match="layers"):
        QuantizePlan.from_json('{"default": "int8", "layers": {}}')


def test_layer_support_names_what_cannot_be_int8():
    assert set(layer_support(small_net()).values()) == {""}
    mod, params = zoo.get("mlp", in_features=16)
    assert set(layer_support(mod, params).values()) == {""}
    unbound = layer_support(mod)  # weights left as parameters: nothing to quantize at build time
    assert unbound and all("not a constant" in why for why in unbound.values())
