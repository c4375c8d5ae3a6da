"""ONNX `If` onto the IR's `if`: data-dependent branches run on the VM and match ONNX Runtime; a
condition known at import time picks its branch then; branches whose extents differ give a value
of run-time extents; branches of different dtypes or ranks and unsupported ops inside a branch
are one clear error."""

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


def test_branches_of_different_extents_give_a_value_of_run_time_extents():
    """ONNX lets the branches' shapes differ: (2, 3) against (1, 1) becomes (?, ?), and each run
    gives the extents of the branch it took."""
    model = _model(_sum_positive(), _branch("then", "Mul", "t", extra=["x"]),
                   _branch("else", "ReduceSum", "e", shape=(1, 1)), outputs=("y0", "y1"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    for sign in (1.0, -1.0):
        x = (sign * (np.random.default_rng(1).random((2, 3)) + 0.1)).astype("float32")
        for got, want in zip(exe(x), sess.run(None, {"x": x}), strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_branches_of_different_types_are_one_clear_error():
    model = _model(_sum_positive(), _branch("then", "Mul", "t", extra=["x"]),
                   _branch("else", "Shape", "e", shape=(2,)), outputs=("y0", "y1"))
    with pytest.raises(OnnxImportError, match="output 0: the then branch gives Tensor"):
        autorelay.frontend.from_onnx(model)


def test_an_unsupported_op_inside_a_branch_is_reported_before_conversion():
    model = _model(_sum_positive(), _branch("then", "Mul", "t", extra=["x"]),
                   _branch("else", "Bernoulli", "e"))
    with pytest.raises(OnnxImportError, match="Bernoulli"):
        autorelay.frontend.from_onnx(model)


def _loop_model(scan_outputs=0):
    """acc <- 2 * acc + x + i while i < M and sum(acc) < limit; a second state counts iterations."""
    i64, f32 = TensorProto.INT64, F
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=f32),
             helper.make_node("Add", ["acc", "acc"], ["a2"]),
             helper.make_node("Add", ["a2", "x"], ["a3"]),
             helper.make_node("Add", ["a3", "fi"], ["acc_out"]),
             helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
             helper.make_node("Less", ["s", "limit"], ["cond_out"]),
             helper.make_node("Add", ["n", "one"], ["n_out"])]
    outs = [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [3], f32), _vi("n_out", [], i64)]
    outs += [_vi("acc_out", [3], f32)] * scan_outputs
    body = helper.make_graph(nodes, "body", [_vi("i", [], i64), _vi("cond", [], TensorProto.BOOL),
                                             _vi("acc", [3], f32), _vi("n", [], i64)], outs,
                             initializer=[helper.make_tensor("one", i64, [], [1])])
    ys = ["y", "count"] + [f"scan{k}" for k in range(scan_outputs)]
    loop = helper.make_node("Loop", ["M", "", "x0", "n0"], ys, body=body)
    ins = [_vi("x", [3]), _vi("x0", [3]), _vi("n0", [], i64), _vi("M", [], i64), _vi("limit", [])]
    graph = helper.make_graph([loop], "g", ins, [_vi(y, None, i64 if y == "count" else f32) for y in ys])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_loop_runs_as_a_recursive_closure_and_matches_onnx_runtime():
    model = _loop_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    for trips, limit in [(5, 1e9), (10, 50.0), (0, 1.0), (3, -1.0)]:  # by count, by condition, none, one
        feeds = {"x": np.array([1, 2, 3], "float32"), "x0": np.zeros(3, "float32"),
                 "n0": np.array(0, np.int64), "M": np.array(trips, np.int64),
                 "limit": np.array(limit, "float32")}
        for got, want in zip(exe(*feeds.values()), sess.run(None, feeds)):
            np.testing.assert_array_equal(got, want)
