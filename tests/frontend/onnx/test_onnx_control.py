"""ONNX `If` onto the IR's `if`: data-dependent branches run on the VM and match ONNX Runtime; a
condition known at import time picks its branch then; mismatched branches and unsupported ops
inside a branch are one clear error."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from autorelay.frontend.onnx import OnnxImportError  # noqa: E402

F = TensorProto.FLOAT


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _branch(name, op, out, shape=(2, 3), extra=()):
    nodes = [helper.make_node(op, ["x", *extra], [f"{out}0"])]
    nodes.append(helper.make_node("Relu", ["x"], [f"{out}1"]))
    return helper.make_graph(nodes, name, [], [_vi(f"{out}0", list(shape)), _vi(f"{out}1", [2, 3])])


def _model(cond_nodes, then_g, else_g, outputs=("y0", "y1")):
    node = helper.make_node("If", ["c"], list(outputs), then_branch=then_g, else_branch=else_g)
    graph = helper.make_graph([*cond_nodes, node], "g", [_vi("x", [2, 3])], [_vi(o, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _sum_positive():
    zero = helper.make_tensor("zero", F, [], [0.0])
    return [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Constant", [], ["z"], value=zero),
            helper.make_node("Greater", ["s", "z"], ["c"])]


def test_a_data_dependent_if_runs_the_branch_the_data_picks():
    model = _model(_sum_positive(), _branch("then", "Mul", "t", extra=["x"]), _branch("else", "Neg", "e"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert type(exe).__name__ == "VMExecutable"
    rng = np.random.default_rng(0)
    for sign in (1.0, -1.0):
        x = (sign * (rng.random((2, 3)) + 0.1)).astype("float32")
        for got, want in zip(exe(x), sess.run(None, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_constant_condition_picks_its_branch_at_import():
    false = helper.make_tensor("c", TensorProto.BOOL, [1], [False])
    cond = helper.make_node("Constant", [], ["c"], value=false)
    model = _model([cond], _branch("then", "Mul", "t", extra=["x"]), _branch("else", "Neg", "e"))
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert type(exe).__name__ == "Executable"  # no control flow left: the graph executor runs it
    x = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(exe(x)[0], -x)


def test_branches_of_different_types_are_one_clear_error():
    model = _model(_sum_positive(), _branch("then", "Mul", "t", extra=["x"]),
                   _branch("else", "ReduceSum", "e", shape=(1, 1)), outputs=("y0", "y1"))
    with pytest.raises(OnnxImportError, match="output 0: the then branch gives Tensor"):
        autorelay.frontend.from_onnx(model)


def test_an_unsupported_op_inside_a_branch_is_reported_before_conversion():
    model = _model(_sum_positive(), _branch("then", "Mul", "t", extra=["x"]), _branch("else", "Hardmax", "e"))
    with pytest.raises(OnnxImportError, match="Hardmax"):
        autorelay.frontend.from_onnx(model)
