"""ONNX `Loop` scan outputs and `Scan` as recursive closures on the VM, against ONNX Runtime: values
stacked per iteration (forward and reverse, on any output axis), carried values whose extents change
between iterations, sequence lengths known only at run time."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from ort_oracle import assert_matches_ort, make_model, value_info  # noqa: E402

from autorelay.frontend.onnx import OnnxImportError  # noqa: E402
from autorelay.runtime.vm import VMExecutable  # noqa: E402
from autorelay.transform.pipelines import pipeline  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset=17):
    return make_model(nodes, inputs, outputs, opset)


def _vi(name, shape, t=F):
    return value_info(name, shape, t)


def _check(onnx_model, feeds_list):
    mod, params = autorelay.frontend.from_onnx(onnx_model)
    exe = autorelay.build(mod, params=params)
    assert isinstance(exe, VMExecutable)
    for feeds in feeds_list:
        assert_matches_ort(exe, onnx_model, feeds)
    return exe


def _loop_with_scans():
    """acc <- acc * 0.5 + x * i; scan outputs: acc, and i as a float (two stacks)."""
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["acc", "half"], ["a1"]),
             helper.make_node("Mul", ["x", "fi"], ["xi"]),
             helper.make_node("Add", ["a1", "xi"], ["acc_out"]),
             helper.make_node("Identity", ["acc_out"], ["s0"]),
             helper.make_node("Identity", ["fi"], ["s1"]),
             helper.make_node("Identity", ["cond"], ["cond_out"])]
    body = helper.make_graph(nodes, "body", [_vi("i", [], I64), _vi("cond", [], B), _vi("acc", [2, 3])],
                             [_vi("cond_out", [], B), _vi("acc_out", [2, 3]), _vi("s0", [2, 3]),
                              _vi("s1", [])],
                             initializer=[helper.make_tensor("half", F, [], [0.5])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["y", "st0", "st1"], body=body)
    return _model([loop], [_vi("x", [2, 3]), _vi("acc0", [2, 3]), _vi("M", [], I64)],
                  [_vi(n, None) for n in ("y", "st0", "st1")])


def test_loop_scan_outputs_stack_per_iteration():
    rng = np.random.default_rng(0)
    x, acc0 = (rng.standard_normal((2, 3)).astype("float32") for _ in range(2))
    feeds = [{"x": x, "acc0": acc0, "M": np.array(m, "int64")} for m in (1, 4, 7, 4)]
    exe = _check(_loop_with_scans(), feeds)
    assert all(r.source not in ("reference", "fallback") for r in exe.provider.report()), exe.report


def test_loop_carried_value_whose_extents_change():
    # y grows by one element per iteration (Concat): its type widens to `?`; scan output: y's sum
    nodes = [helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Unsqueeze", ["fi", "zero"], ["fi1"]),
             helper.make_node("Concat", ["y", "fi1"], ["y_out"], axis=0),
             helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
             helper.make_node("Identity", ["cond"], ["cond_out"])]
    body = helper.make_graph(nodes, "body", [_vi("i", [], I64), _vi("cond", [], B), _vi("y", [1])],
                             [_vi("cond_out", [], B), _vi("y_out", [None]), _vi("s", [])],
                             initializer=[helper.make_tensor("zero", I64, [1], [0])])
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y", "sums"], body=body)
    model = _model([loop], [_vi("y0", [1]), _vi("M", [], I64)], [_vi("y", None), _vi("sums", None)])
    _check(model, [{"y0": np.array([2.0], "float32"), "M": np.array(m, "int64")} for m in (0, 1, 5, 3)])


def _scan_model(x_shape, in_axis=0, in_dir=0, out_axis=0, out_dir=0, opset=11):
    """state <- state + slice; outputs per step: state and slice * 2."""
    nodes = [helper.make_node("Add", ["s", "xi"], ["s_out"]),
             helper.make_node("Add", ["xi", "xi"], ["twice"]),
             helper.make_node("Identity", ["s_out"], ["cum"])]
    slice_shape = [d for k, d in enumerate(x_shape) if k != in_axis]
    body = helper.make_graph(nodes, "body", [_vi("s", slice_shape), _vi("xi", slice_shape)],
                             [_vi("s_out", slice_shape), _vi("cum", slice_shape), _vi("twice", slice_shape)])
    scan = helper.make_node("Scan", ["s0", "x"], ["s", "cums", "twices"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis, 0], scan_output_directions=[out_dir, 0])
    return _model([scan], [_vi("s0", slice_shape), _vi("x", x_shape)],
                  [_vi(n, None) for n in ("s", "cums", "twices")], opset)


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 0, 0), (0, 0, 1, 1),
                                                             (1, 0, -1, 0), (0, 1, 1, 0)])
def test_scan_axes_and_directions(in_axis, in_dir, out_axis, out_dir):
    x_shape = [4, 3] if in_axis == 0 else [3, 4]
    model = _scan_model(x_shape, in_axis, in_dir, out_axis, out_dir)
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal(3).astype("float32"),
             "x": rng.standard_normal(x_shape).astype("float32")}
    _check(model, [feeds])


def test_scan_sequence_length_known_at_run_time():
    model = _scan_model([None, 3])
    rng = np.random.default_rng(2)
    _check(model, [{"s0": np.zeros(3, "float32"), "x": rng.standard_normal((n, 3)).astype("float32")}
                   for n in (1, 5, 2)])


def test_scan_two_inputs_and_opset_8_is_refused():
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"]), helper.make_node("Add", ["s", "ab"], ["s_out"])]
    body = helper.make_graph(nodes, "body", [_vi("s", []), _vi("a", []), _vi("b", [])], [_vi("s_out", [])])
    scan = helper.make_node("Scan", ["s0", "xa", "xb"], ["dot"], body=body, num_scan_inputs=2)
    model = _model([scan], [_vi("s0", []), _vi("xa", [5]), _vi("xb", [5])], [_vi("dot", None)], 16)
    rng = np.random.default_rng(3)
    _check(model, [{"s0": np.array(1.0, "float32"), "xa": rng.standard_normal(5).astype("float32"),
                    "xb": rng.standard_normal(5).astype("float32")}])
    old = _model([helper.make_node("Scan", ["", "s0", "x"], ["y"], body=body, num_scan_inputs=1)],
                 [_vi("s0", [1]), _vi("x", [1, 5])], [_vi("y", None)], 8)
    with pytest.raises(OnnxImportError, match=r"\(Scan\): opset 8 Scan"):
        autorelay.frontend.from_onnx(old)


def _calls_inside_functions(expr) -> list[str]:
    """The names of the ops called inside the closures (the loops' bodies) of `expr`, fused into
    primitive functions or not."""
    from autorelay.ir.expr import Call, Function, Op
    from autorelay.ir.visitor import post_order

    return [n.op.name for f in post_order(expr) if isinstance(f, Function) and not f.is_primitive
            for n in post_order(f.body) if isinstance(n, Call) and isinstance(n.op, Op)]


@pytest.mark.parametrize("kind", ["Loop", "Scan"])
def test_a_body_reads_enclosing_values_computed_once(kind):
    """The body reads `heavy = Exp(x) @ Exp(x)^T`, computed by the enclosing graph: it is bound before
    the loop and read through the closure, not computed again on every iteration (Mask R-CNN's
    paste loop reads its box head's detections so)."""
    heavy = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Transpose", ["e"], ["et"]),
             helper.make_node("MatMul", ["e", "et"], ["heavy"])]
    body_nodes = [helper.make_node("Add", ["acc", "heavy"], ["acc_out"])]
    if kind == "Loop":
        body_nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
        ins, outs = [_vi("i", [], I64), _vi("cond", [], B), _vi("acc", [3, 3])], [_vi("cond_out", [], B)]
        loop = helper.make_node("Loop", ["M", "", "acc0"], ["y"], body=None)
        graph_inputs = [_vi("x", [3, 4]), _vi("acc0", [3, 3]), _vi("M", [], I64)]
    else:
        body_nodes.append(helper.make_node("Identity", ["s"], ["s_out"]))
        ins, outs = [_vi("acc", [3, 3]), _vi("s", [])], []
        loop = helper.make_node("Scan", ["acc0", "seq"], ["y", "ss"], num_scan_inputs=1, body=None)
        graph_inputs = [_vi("x", [3, 4]), _vi("acc0", [3, 3]), _vi("seq", [5])]
    outs = [*outs, _vi("acc_out", [3, 3])] + ([_vi("s_out", [])] if kind == "Scan" else [])
    loop.attribute.append(helper.make_attribute("body", helper.make_graph(body_nodes, "body", ins, outs)))
    results = [_vi("y", None)] + ([_vi("ss", None)] if kind == "Scan" else [])
    model = _model([*heavy, loop], graph_inputs, results)
    mod, params = autorelay.frontend.from_onnx(model)
    for built in (mod, pipeline("default")(mod)):  # as imported, and as the build optimises it
        inside = _calls_inside_functions(built["main"].body)
        heavy_ops = {"exp", "nn.matmul", "nn.batch_matmul", "nn.dense", "transpose"}
        assert "add" in inside and not heavy_ops & set(inside), inside
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((3, 4)).astype("float32"), "acc0": np.zeros((3, 3), "float32")}
    feeds |= {"M": np.array(4, "int64")} if kind == "Loop" else {"seq": np.arange(5, dtype="float32")}
    assert_matches_ort(autorelay.build(mod, params=params), model, feeds, rtol=1e-5, atol=1e-5)
