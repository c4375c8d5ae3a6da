"""ONNX sequence and optional ops, compiled: sequences built inside the graph (SplitToSequence,
SequenceConstruct, Insert, Erase, At, Length, ConcatFromSequence, SequenceMap) and sequence graph
inputs and outputs, against ONNX's reference implementation (`onnx.reference`); optionals made
inside the graph."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend.onnx import OnnxImportError, from_onnx  # noqa: E402

pytestmark = pytest.mark.cpu

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(5)


def _graph(nodes, inputs, outputs, consts=()) -> onnx.ModelProto:
    inits = [helper.make_tensor(name, I64, np.shape(v), np.ravel(v).tolist()) for name, v in consts]
    graph = helper.make_graph(nodes, "seq", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tensor(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, shape)


def _sequence(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_sequence_value_info(name, F, None)


def _build_and_run(model: onnx.ModelProto, feeds: dict, shape: dict | None = None):
    mod, params = from_onnx(model, shape=shape)
    exe = autorelay.build(mod, params=params, threads=2)
    assert not exe.report.fallbacks, exe.report
    args = [a for v in feeds.values() for a in (v if isinstance(v, list) else [v])]
    return exe(*args)


def _assert_same(got, want) -> None:
    if isinstance(want, list):
        assert isinstance(got, tuple) and len(got) == len(want), (got, len(want))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
    else:
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_a_sequence_built_edited_and_joined_inside_the_graph():
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=1),  # widths 1, 2, 3
        helper.make_node("SequenceInsert", ["parts", "y", "one"], ["inserted"]),  # y at position 1
        helper.make_node("SequenceErase", ["inserted"], ["erased"]),  # drops the last (width 3)
        helper.make_node("SequenceAt", ["erased", "minus_two"], ["second_last"]),  # width 4: y
        helper.make_node("ConcatFromSequence", ["erased"], ["joined"], axis=-2),  # 1 + 4 + 2 = 7 wide
        helper.make_node("SequenceLength", ["erased"], ["length"]),
        helper.make_node("Mul", ["second_last", "second_last"], ["squared"]),
    ]
    model = _graph(nodes, [_tensor("x", [2, 6, 3]), _tensor("y", [2, 4, 3])],
                   [_tensor("joined", None), _tensor("squared", None),
                    helper.make_tensor_value_info("length", I64, [])],
                   consts=[("sizes", [1, 2, 3]), ("one", 1), ("minus_two", -2)])
    feeds = {"x": rng.standard_normal((2, 6, 3)).astype("float32"),
             "y": rng.standard_normal((2, 4, 3)).astype("float32")}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _build_and_run(model, feeds)
    for g, w in zip(got, want):
        _assert_same(g, w)


@pytest.mark.parametrize(("split", "keepdims"), [(None, 0), (None, 1), (2, 1)])
def test_split_to_sequence_as_the_graph_output(split, keepdims):
    ins = ["x"] + (["size"] if split is not None else [])
    node = helper.make_node("SplitToSequence", ins, ["parts"], axis=0, keepdims=keepdims)
    model = _graph([node], [_tensor("x", [5, 4])], [_sequence("parts")],
                   consts=[("size", split)] if split is not None else [])
    feeds = {"x": rng.standard_normal((5, 4)).astype("float32")}
    _assert_same(_build_and_run(model, feeds), ReferenceEvaluator(model).run(None, feeds)[0])


def test_stacking_a_constructed_sequence_on_a_new_axis():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["stacked"], axis=-1, new_axis=1)]
    model = _graph(nodes, [_tensor(n, [3, 2]) for n in "abc"], [_tensor("stacked", None)])
    feeds = {n: rng.standard_normal((3, 2)).astype("float32") for n in "abc"}
    got = _build_and_run(model, feeds)
    np.testing.assert_array_equal(np.asarray(got), np.stack(list(feeds.values()), axis=-1))


def test_sequence_map_over_a_sequence_input_of_given_shapes():
    """The body runs once per element: the element plus the tensor, and the element's shape."""
    body = helper.make_graph(
        [helper.make_node("Add", ["elem", "bias"], ["shifted"]),
         helper.make_node("Shape", ["elem"], ["dims"])],
        "body", [_tensor("elem", None), _tensor("bias", [1])],
        [_tensor("shifted", None), helper.make_tensor_value_info("dims", I64, [2])])
    node = helper.make_node("SequenceMap", ["seq", "bias"], ["shifted_seq", "dims_seq"], body=body)
    model = _graph([node], [_sequence("seq"), _tensor("bias", [1])],
                   [_sequence("shifted_seq"), helper.make_tensor_sequence_value_info("dims_seq", I64, None)])
    seq = [rng.standard_normal(s).astype("float32") for s in ((2, 3), (4, 1), (1, 5))]
    feeds = {"seq": seq, "bias": np.array([0.5], "float32")}
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _build_and_run(model, feeds, shape={"seq": [a.shape for a in seq]})
    for g, w in zip(got, want):
        _assert_same(g, w)


def test_what_a_static_sequence_cannot_hold_is_refused_with_the_reason():
    node = helper.make_node("SequenceLength", ["seq"], ["n"])
    model = _graph([node], [_sequence("seq")], [helper.make_tensor_value_info("n", I64, [])])
    with pytest.raises(OnnxImportError, match=r"'seq' is a sequence.*pass shape=\{'seq': \[shape of each"):
        from_onnx(model)
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceAt", ["s", "three"], ["t"])]
    model = _graph(nodes, [_tensor("a", [2]), _tensor("b", [2])], [_tensor("t", [2])], consts=[("three", 3)])
    with pytest.raises(OnnxImportError, match=r"SequenceAt.*position 3 is out of range for a sequence of 2"):
        from_onnx(model)


def test_optionals_made_inside_the_graph():
    """A present optional is its value, an empty one has no element: OptionalHasElement is known
    at import and selects between the two branches of a Where; getting the empty one's element is
    refused."""
    empty_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))
    nodes = [helper.make_node("Optional", ["x"], ["some"]),
             helper.make_node("Optional", [], ["none"], type=empty_type.optional_type.elem_type),
             helper.make_node("OptionalHasElement", ["some"], ["has_some"]),
             helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
             helper.make_node("OptionalGetElement", ["some"], ["value"]),
             helper.make_node("Where", ["has_none", "x", "value"], ["picked"]),  # the value, doubled below
             helper.make_node("Add", ["picked", "value"], ["y"])]
    outputs = [_tensor("y", [3]), helper.make_tensor_value_info("has_some", TensorProto.BOOL, [])]
    model = _graph(nodes, [_tensor("x", [3])], outputs)
    x = rng.standard_normal(3).astype("float32")
    y, has_some = _build_and_run(model, {"x": x})
    np.testing.assert_array_equal(np.asarray(y), 2 * x)
    assert bool(np.asarray(has_some))
    nodes = [helper.make_node("Optional", [], ["none"], type=empty_type.optional_type.elem_type),
             helper.make_node("OptionalGetElement", ["none"], ["t"])]
    with pytest.raises(OnnxImportError, match=r"OptionalGetElement.*the optional is empty"):
        from_onnx(_graph(nodes, [], [_tensor("t", [3])]))
