"""Ops ONNX defines as functions (`autorelay.frontend.onnx.function_ops`), expanded and compiled:
LinearAttention (a Scan in its body) and CausalConvWithState against the ONNX backend test data;
an op whose body uses an op without a converter is reported with the unsupported ops."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend.onnx import UnsupportedOnnxOpsError, from_onnx  # noqa: E402
from autorelay.frontend.onnx.node_cases import _read_tensors, node_dir  # noqa: E402

pytestmark = pytest.mark.cpu

CASES = ["test_causal_conv_with_state_silu_with_past_state", "test_causal_conv_with_state_with_bias",
         "test_linear_attention_gated_delta_gqa", "test_linear_attention_prefill_with_past",
         "test_linear_attention_linear"]


@pytest.mark.parametrize("case", CASES)
def test_compiled_expansion_matches_the_onnx_test_data(case):
    folder = node_dir() / case
    if not folder.is_dir():
        pytest.skip(f"this onnx release ships no {case}")
    model = onnx.load(str(folder / "model.onnx"))
    assert {n.op_type for n in model.graph.node} & {"LinearAttention", "CausalConvWithState"}
    inputs = _read_tensors(folder / "test_data_set_0", "input")
    expected = _read_tensors(folder / "test_data_set_0", "output")
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, params=params, threads=2)
    assert not exe.report.fallbacks, exe.report
    got = exe(*inputs)
    got = list(got) if len(expected) > 1 else [got]
    for g, w in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4)


def test_an_op_whose_body_needs_an_op_without_a_converter_is_reported_unsupported():
    """Bernoulli's body draws with RandomUniformLike, which does not convert: the import reports
    Bernoulli with the other unsupported ops before converting anything."""
    node = helper.make_node("Bernoulli", ["x"], ["y"], name="coin")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    with pytest.raises(UnsupportedOnnxOpsError, match=r"Bernoulli \(nodes: coin \[#0\]\)"):
        from_onnx(model)
