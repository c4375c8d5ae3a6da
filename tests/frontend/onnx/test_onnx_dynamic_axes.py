"""Reductions, Squeeze, Unsqueeze, Split and Range whose axes / sizes / bounds are run-time values
(issue #21), against ONNX Runtime.

The importer emits `dyn.reduce`, `dyn.squeeze`, `dyn.expand_dims`, `dyn.split`, `dyn.arange`; `build`
picks the VM, which compiles one kernel per concrete value (no NumPy fallback for the data).
"""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from ort_oracle import assert_matches_ort, make_model, value_info  # noqa: E402

from autorelay.op.dynamic import DynamicValueError  # noqa: E402
from autorelay.runtime.vm import VMExecutable  # noqa: E402

I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _model(nodes, inputs, outputs, opset=18):
    return make_model(nodes, inputs, outputs, opset)


def _vi(name, shape, t=F32):
    return value_info(name, shape, t)


def _build(model):
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert isinstance(exe, VMExecutable)
    assert exe.provider.specializing, "expected a specialising kernel"
    return exe


def _check(exe, onnx_model, feeds: dict, rtol: float = 1e-5, compiled: bool = True) -> None:
    assert_matches_ort(exe, onnx_model, feeds, rtol=rtol)
    if compiled:
        assert all(r.source not in ("reference", "fallback") for r in exe.provider.report()), exe.report


X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")


@pytest.mark.parametrize("op,opset", [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMax", 18),
                                      ("ReduceMin", 18), ("ReduceProd", 18)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_is_a_graph_input(op, opset, keepdims):
    node = helper.make_node(op, ["x", "a"], ["r"], keepdims=keepdims)
    relu = helper.make_node("Relu", ["r"], ["y"])  # a following op runs on the `?`-shaped result
    model = _model([node, relu], [_vi("x", [2, 3, 4]), _vi("a", [2], I64)], [_vi("y", None)], opset)
    exe = _build(model)
    for axes in ([0, 1], [-1, 0], [2, 1], [0, 1]):
        _check(exe, model, {"x": X, "a": np.array(axes, "int64")})


def test_reduce_axes_computed_from_data_and_of_any_length_with_keepdims():
    # axes = a + 1, computed at run time; keepdims=1 keeps the rank whatever the number of axes
    nodes = [helper.make_node("Add", ["a", "one"], ["a1"]),
             helper.make_node("ReduceMean", ["x", "a1"], ["y"], keepdims=1)]
    one = helper.make_tensor("one", I64, [], [1])
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 3, 4]), _vi("a", ["n"], I64)], [_vi("y", None)],
                              initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    exe = _build(model)
    for axes in ([0], [1, -3], [0, 1], [-2]):
        _check(exe, model, {"x": X, "a": np.array(axes, "int64")})


@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_runtime_axes(noop):
    node = helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=1, noop_with_empty_axes=noop)
    model = _model([node], [_vi("x", [2, 3, 4]), _vi("a", [None], I64)], [_vi("y", None)], 13)
    if noop:  # noop decides the rank only once the length is known: one clear error
        with pytest.raises(autorelay.frontend.onnx.OnnxImportError, match=r"axes.*known length"):
            autorelay.frontend.from_onnx(model)
        model = _model([node], [_vi("x", [2, 3, 4]), _vi("a", [0], I64)], [_vi("y", None)], 13)
        mod, params = autorelay.frontend.from_onnx(model)
        exe = autorelay.build(mod, params=params)
        _check(exe, model, {"x": X, "a": np.zeros(0, "int64")})
        return
    exe = _build(model)
    for axes in ([], [1], []):
        _check(exe, model, {"x": X, "a": np.array(axes, "int64")})


def test_bool_reduce_max_min_with_runtime_axes():
    nodes = [helper.make_node("ReduceMax", ["b", "a"], ["y0"], keepdims=0),
             helper.make_node("ReduceMin", ["b", "a"], ["y1"], keepdims=0)]
    model = _model(nodes, [_vi("b", [3, 4], TensorProto.BOOL), _vi("a", [1], I64)],
                   [_vi("y0", None, TensorProto.BOOL), _vi("y1", None, TensorProto.BOOL)], 20)  # bool: 20
    exe = _build(model)
    b = np.random.default_rng(1).random((3, 4)) > 0.4
    for axes in ([0], [1], [-1]):
        _check(exe, model, {"b": b, "a": np.array(axes, "int64")})


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_composite_reduce_runtime_axes(op, keepdims):
    node = helper.make_node(op, ["x", "a"], ["y"], keepdims=keepdims)
    model = _model([node], [_vi("x", [2, 3, 4]), _vi("a", [2], I64)], [_vi("y", None)])
    exe = _build(model)
    x = np.abs(X) + 0.1  # LogSum needs positive sums
    for axes in ([0, 2], [-1, 1]):
        _check(exe, model, {"x": x, "a": np.array(axes, "int64")}, rtol=1e-4)


def test_reduce_bad_runtime_axis_is_a_clear_error():
    node = helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)
    model = _model([node], [_vi("x", [2, 3, 4]), _vi("a", [1], I64)], [_vi("y", None)], 13)
    exe = _build(model)
    with pytest.raises(DynamicValueError, match="axis 3 is out of range for rank 3"):
        exe(X, np.array([3], "int64"))


def test_squeeze_and_unsqueeze_runtime_axes():
    nodes = [helper.make_node("Squeeze", ["x", "s"], ["q"]),
             helper.make_node("Unsqueeze", ["q", "u"], ["y"])]
    model = _model(nodes, [_vi("x", [1, 3, 1, 2]), _vi("s", [2], I64), _vi("u", [1], I64)],
                   [_vi("y", None)], 13)
    exe = _build(model)
    x = np.arange(6, dtype="float32").reshape(1, 3, 1, 2)
    for s, u in (([0, 2], [0]), ([-2, 0], [2]), ([0, 2], [-1]), ([2, 0], [1])):
        _check(exe, model, {"x": x, "s": np.array(s, "int64"), "u": np.array(u, "int64")})
    with pytest.raises(DynamicValueError, match=r"axes \[1\] of data \(1, 3, 1, 2\) do not have extent 1"):
        exe(x, np.array([1, 0], "int64"), np.array([0], "int64"))


@pytest.mark.parametrize("opset", [13, 18])
def test_split_runtime_sizes(opset):
    node = helper.make_node("Split", ["x", "s"], ["a", "b", "c"], axis=1)
    model = _model([node], [_vi("x", [2, 6]), _vi("s", [3], I64)], [_vi(n, None) for n in "abc"], opset)
    exe = _build(model)
    x = np.arange(12, dtype="float32").reshape(2, 6)
    for sizes in ([1, 2, 3], [2, 2, 2], [1, 2, 3]):
        _check(exe, model, {"x": x, "s": np.array(sizes, "int64")})
    for sizes in ([0, 6, 0], [3, 3, 0]):  # empty pieces: kernels take no empty buffers, NumPy runs these
        _check(exe, model, {"x": x, "s": np.array(sizes, "int64")}, compiled=False)
    with pytest.raises(DynamicValueError, match="must be >= 0 and sum to axis 1's extent 6"):
        exe(x, np.array([1, 1, 1], "int64"))


@pytest.mark.parametrize("dtype,cases", [
    (TensorProto.INT64, [(0, 5, 1), (10, 2, -3), (3, 3, 1), (-4, 7, 2)]),
    (TensorProto.FLOAT, [(0.5, 3.0, 0.75), (1.0, -2.0, -0.5)]),
])
def test_range_runtime_bounds(dtype, cases):
    node = helper.make_node("Range", ["s", "l", "d"], ["r"])
    nptype = "int64" if dtype == TensorProto.INT64 else "float32"
    plus = helper.make_node("Add", ["r", "r"], ["y"])
    model = _model([node, plus], [_vi(n, [], dtype) for n in "sld"], [_vi("y", None, dtype)], 13)
    exe = _build(model)
    for s, limit, d in cases:
        _check(exe, model, {"s": np.array(s, nptype), "l": np.array(limit, nptype), "d": np.array(d, nptype)})


def test_range_with_one_runtime_bound_and_constant_others():
    consts = [helper.make_node("Constant", [], [n], value=helper.make_tensor(n, I64, [], [v]))
              for n, v in (("s", 2), ("d", 3))]
    node = helper.make_node("Range", ["s", "l", "d"], ["y"])
    model = _model([*consts, node], [_vi("l", [], I64)], [_vi("y", None, I64)], 13)
    exe = _build(model)
    for limit in (2, 3, 20):
        _check(exe, model, {"l": np.array(limit, "int64")})


def test_split_of_a_static_axis_of_a_dynamic_shape_input():
    sizes = helper.make_tensor("s", I64, [2], [2, 4])
    node = helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)
    graph = helper.make_graph([node], "g", [_vi("x", ["n", 6])], [_vi("a", None), _vi("b", None)],
                              initializer=[sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    for n in (1, 3):  # a build per input shape (SpecializingExecutable), not the VM
        _check(exe, model, {"x": np.arange(6 * n, dtype="float32").reshape(n, 6)}, compiled=False)
