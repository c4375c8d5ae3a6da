"""Reshape / Slice / Pad whose shape-like inputs are run-time values (issue #21), against ONNX Runtime.

The importer emits `dyn.*` ops, `build` picks the VM, and the VM compiles one kernel per concrete
shape (no NumPy fallback for the data); a second call with the same values reuses it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autorelay.build_module import BuildError  # noqa: E402
from autorelay.errors import AutoRelayError  # noqa: E402
from autorelay.frontend.onnx import OnnxImportError  # noqa: E402
from autorelay.runtime.specializing import SpecializingExecutable  # noqa: E402
from autorelay.runtime.vm import VMExecutable  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _compiled(exe) -> int:
    return sum(k.compiled for k in exe.provider.specializing)


def _check(exe, model, feeds: dict) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    got = exe(*feeds.values())
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.dtype == want.dtype


def _build(model):
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert isinstance(exe, VMExecutable)  # executor="auto" picks the VM for dyn ops
    assert exe.provider.specializing, "expected a specialising kernel"
    return exe


def _no_fallback(exe, *inputs) -> None:
    """No kernel ran on NumPy (a specialising build: in its static build for `inputs`)."""
    if isinstance(exe, SpecializingExecutable):
        build = exe.executable_for(*inputs)
        assert not build.report.fallbacks, build.report
        return
    assert not exe.report.fallbacks, exe.report
    assert all(r.source not in ("reference", "fallback") for r in exe.provider.report()), exe.report


def test_reshape_shape_is_a_graph_input():
    node = helper.make_node("Reshape", ["x", "s"], ["r"])
    relu = helper.make_node("Relu", ["r"], ["y"])
    model = _model([node, relu], [_vi("x", [2, 3, 4]), _vi("s", [3], TensorProto.INT64)], [_vi("y", None)])
    exe = _build(model)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")
    for s in ([4, 3, 2], [0, -1, 2], [4, 3, 2]):
        _check(exe, model, {"x": x, "s": np.array(s, "int64")})
    assert _compiled(exe) == 4  # reshape and relu, for two distinct shapes; the repeat compiled nothing
    _no_fallback(exe)
    assert "specialises" in str(exe.report)


def test_reshape_shape_computed_in_graph():
    # the target comes from data: Cast(float dims) * 2, concatenated with -1
    nodes = [
        helper.make_node("Cast", ["d"], ["di"], to=TensorProto.INT64),
        helper.make_node("Mul", ["di", "two"], ["d2"]),
        helper.make_node("Concat", ["d2", "minus1"], ["s"], axis=0),
        helper.make_node("Reshape", ["x", "s"], ["r"]),
        helper.make_node("Add", ["r", "r"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([2], "int64"), "two"),
             numpy_helper.from_array(np.array([-1], "int64"), "minus1")]
    model = _model(nodes, [_vi("x", [4, 6]), _vi("d", [1])], [_vi("y", None)], inits)
    exe = _build(model)
    x = np.arange(24, dtype="float32").reshape(4, 6)
    for d in (1.0, 3.0, 1.0):
        _check(exe, model, {"x": x, "d": np.array([d], "float32")})
    before = _compiled(exe)
    _check(exe, model, {"x": x, "d": np.array([3.0], "float32")})
    assert _compiled(exe) == before
    _no_fallback(exe)


@pytest.mark.parametrize("starts, ends, steps", [
    ([1, -3], [100, -1], [1, 1]),          # out-of-range end, negative bounds
    ([-1, 4], [-100, -7], [-1, -2]),       # negative steps walking to before index 0
    ([0, 10], [2, 20], [2, 1]),            # an empty axis
])
def test_slice_runtime_starts_ends(starts, ends, steps):
    node = helper.make_node("Slice", ["x", "b", "e", "", "st"], ["y"])
    i64 = TensorProto.INT64
    model = _model([node], [_vi("x", [4, 5]), _vi("b", [2], i64), _vi("e", [2], i64), _vi("st", [2], i64)],
                   [_vi("y", None)])
    exe = _build(model)
    x = np.arange(20, dtype="float32").reshape(4, 5)
    feeds = {"x": x, "b": np.array(starts, "int64"), "e": np.array(ends, "int64"),
             "st": np.array(steps, "int64")}
    _check(exe, model, feeds)
    _check(exe, model, feeds)
    assert _compiled(exe) == 1
    _no_fallback(exe)


def test_slice_runtime_ends_static_axes():
    # ends is a graph input, starts/axes/steps are initializers on the last axis only
    node = helper.make_node("Slice", ["x", "b", "e", "ax", "st"], ["y"])
    inits = [numpy_helper.from_array(np.array([-1], "int64"), "b"),
             numpy_helper.from_array(np.array([-1], "int64"), "ax"),
             numpy_helper.from_array(np.array([-1], "int64"), "st")]
    model = _model([node], [_vi("x", [2, 3, 6]), _vi("e", [1], TensorProto.INT64)], [_vi("y", None)], inits)
    exe = _build(model)
    x = np.random.default_rng(1).standard_normal((2, 3, 6)).astype("float32")
    for e in (0, -100, 2):
        _check(exe, model, {"x": x, "e": np.array([e], "int64")})
    _no_fallback(exe)


def test_slice_runtime_axes_is_refused():
    node = helper.make_node("Slice", ["x", "b", "e", "ax"], ["y"])
    i64 = TensorProto.INT64
    model = _model([node], [_vi("x", [4, 5]), _vi("b", [1], i64), _vi("e", [1], i64), _vi("ax", [1], i64)],
                   [_vi("y", None)])
    with pytest.raises(OnnxImportError, match=r"axes .*'ax'.*constants="):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize("pads, mode", [
    ([1, 0, 2, 3], "constant"), ([0, 2, 1, 0], "constant"), ([-1, 1, 0, -2], "constant"),
    ([1, 0, 2, 3], "edge"), ([2, 1, 0, 3], "reflect"),
])
def test_pad_runtime_pads(pads, mode):
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)
    model = _model([node], [_vi("x", [3, 4]), _vi("p", [4], TensorProto.INT64)], [_vi("y", None)],
                   [numpy_helper.from_array(np.array(1.5, "float32"), "v")])
    exe = _build(model)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype("float32")
    _check(exe, model, {"x": x, "p": np.array(pads, "int64")})
    _check(exe, model, {"x": x, "p": np.array(pads, "int64")})
    assert _compiled(exe) == 1
    _no_fallback(exe)


def test_pad_runtime_pads_static_axes_and_following_op():
    nodes = [helper.make_node("Pad", ["x", "p", "", "ax"], ["q"], mode="constant"),
             helper.make_node("Sigmoid", ["q"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3, 4]), _vi("p", [2], TensorProto.INT64)], [_vi("y", None)],
                   [numpy_helper.from_array(np.array([1], "int64"), "ax")], opset=18)
    exe = _build(model)
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype("float32")
    for p in ([1, 2], [0, 0], [1, 2]):
        _check(exe, model, {"x": x, "p": np.array(p, "int64")})
    assert _compiled(exe) == 4
    _no_fallback(exe)


def test_static_values_keep_the_static_ops():
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    model = _model([node], [_vi("x", [2, 3])], [_vi("y", None)],
                   [numpy_helper.from_array(np.array([3, 2], "int64"), "s")])
    mod, _ = autorelay.frontend.from_onnx(model)
    assert "dyn." not in mod.astext()


def test_graph_executor_refuses_dyn_ops():
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    model = _model([node], [_vi("x", [2, 3]), _vi("s", [2], TensorProto.INT64)], [_vi("y", None)])
    mod, params = autorelay.frontend.from_onnx(model)
    with pytest.raises(BuildError, match=r"dynamic op dyn\.reshape"):
        autorelay.build(mod, params=params, executor="graph")
    with pytest.raises(AutoRelayError, match=r"AoT code needs static shapes: build with executor=\"vm\""):
        autorelay.build(mod, params=params, executor="aot")


def test_reshape_to_a_shape_computed_from_a_dynamic_input():
    # Shape of an input with a symbolic batch -> slice, arithmetic -> Reshape: (n, 6) -> (3n, 2)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["n"]),
        helper.make_node("Mul", ["n", "three"], ["rows"]),
        helper.make_node("Concat", ["rows", "minus1"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([v], "int64"), name)
             for v, name in ((0, "zero"), (1, "one"), (3, "three"), (-1, "minus1"))]
    model = _model(nodes, [_vi("x", ["n", 6])], [_vi("y", None)], inits)
    exe = _build(model)
    rng = np.random.default_rng(4)
    for n in (2, 5, 2):
        _check(exe, model, {"x": rng.standard_normal((n, 6)).astype("float32")})
    _no_fallback(exe)


def _center_crop_cases():
    from pathlib import Path

    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    return sorted(root.glob("test_center_crop_pad_*_expanded"))


@pytest.mark.parametrize("case", _center_crop_cases(), ids=lambda p: p.name)
def test_center_crop_pad_expanded_compiles_its_dyn_ops(case):
    # the expanded CenterCropPad computes its Slice bounds and Pad widths from the shape input
    model = onnx.load(str(case / "model.onnx"))
    data = case / "test_data_set_0"
    ins = [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in sorted(data.glob("input_*.pb"))]
    want = numpy_helper.to_array(onnx.load_tensor(str(next(data.glob("output_*.pb")))))
    mod, params = autorelay.frontend.from_onnx(model)
    assert "dyn." in mod.astext()
    exe = autorelay.build(mod, params=params)
    np.testing.assert_array_equal(exe(*ins), want)
    assert any(r.source == "specialized" for r in exe.provider.report())
    _no_fallback(exe)  # the shape arithmetic (int64 Div, Sub, Max) compiles too


def test_dense_and_conv_after_dyn_ops():
    # ? extents flow into MatMul+Add and into Conv: their kernels specialise per shape too
    rng = np.random.default_rng(6)
    w = rng.standard_normal((4, 3)).astype("float32")
    k = rng.standard_normal((2, 1, 3, 3)).astype("float32")
    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
        helper.make_node("Pad", ["img", "p"], ["padded"], mode="constant"),
        helper.make_node("Conv", ["padded", "k"], ["z"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(3, "float32"), "b"),
             numpy_helper.from_array(k, "k")]
    model = _model(nodes, [_vi("x", [2, 6]), _vi("s", [2], TensorProto.INT64), _vi("img", [1, 1, 5, 5]),
                           _vi("p", [8], TensorProto.INT64)], [_vi("y", None), _vi("z", None)], inits)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    exe = _build(model)
    x = rng.standard_normal((2, 6)).astype("float32")
    img = rng.standard_normal((1, 1, 5, 5)).astype("float32")
    for p in ([0, 0, 1, 1, 0, 0, 1, 1], [0, 0, 0, 2, 0, 0, 3, 0]):
        feeds = {"x": x, "s": np.array([-1, 4], "int64"), "img": img, "p": np.array(p, "int64")}
        want = sess.run(None, feeds)
        got = exe(*feeds.values())
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-5)
    _no_fallback(exe)


@pytest.mark.parametrize("xshape, target", [((3, 1), [2, 3, 4]), ((1, 4), [5, 1]), ((2, 3), [1])])
def test_expand_runtime_shape(xshape, target):
    nodes = [helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node("Neg", ["e"], ["y"])]
    model = _model(nodes, [_vi("x", list(xshape)), _vi("s", [len(target)], TensorProto.INT64)],
                   [_vi("y", None)])
    exe = _build(model)
    x = np.random.default_rng(7).standard_normal(xshape).astype("float32")
    _check(exe, model, {"x": x, "s": np.array(target, "int64")})
    first = _compiled(exe)  # 2, or 1 where the result type is provably static (then Neg is static)
    _check(exe, model, {"x": x, "s": np.array(target, "int64")})
    assert _compiled(exe) == first
    _no_fallback(exe)


def test_slice_mismatched_lengths_is_a_clear_error():
    node = helper.make_node("Slice", ["x", "b", "e"], ["y"])
    model = _model([node], [_vi("x", [4, 5]), _vi("b", [2], TensorProto.INT64)], [_vi("y", None)],
                   [numpy_helper.from_array(np.array([3], "int64"), "e")])
    with pytest.raises(OnnxImportError, match="ends has 1 entries, expected 2"):
        autorelay.frontend.from_onnx(model)


def test_torch_export_with_dynamic_batch(tmp_path):
    # the TorchScript exporter writes x.reshape(x.shape[0], -1) and y[:, :x.shape[1]] as
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape and a Slice with a run-time end
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(12, 5)

        def forward(self, x):
            return self.fc(x.reshape(x.shape[0], -1))[:, : x.shape[1]]

    path = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(2, 3, 4),), str(path), dynamo=False, input_names=["x"],
                          opset_version=17, dynamic_axes={"x": {0: "batch", 1: "c"}})
    model = onnx.load(str(path))
    exe = _build(model)
    rng = np.random.default_rng(8)
    for batch in (2, 5, 2):
        _check(exe, model, {"x": rng.standard_normal((batch, 3, 4)).astype("float32")})
    _no_fallback(exe)


def test_constant_of_runtime_shape():
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"],
                              value=numpy_helper.from_array(np.array([2.5], "float32"))),
             helper.make_node("Add", ["c", "x"], ["y"])]
    model = _model(nodes, [_vi("s", [2], TensorProto.INT64), _vi("x", [1, 3])], [_vi("y", None)])
    exe = _build(model)
    x = np.arange(3, dtype="float32").reshape(1, 3)
    for s in ([4, 3], [2, 3], [4, 3]):
        _check(exe, model, {"s": np.array(s, "int64"), "x": x})
    assert _compiled(exe) == 4  # full and add, for two shapes
    _no_fallback(exe)


def test_static_extents_beside_a_dynamic_batch_stay_static():
    """The exporter's causal mask: Shape -> Gather(1) -> ConstantOfShape -> Trilu. With only the batch
    dynamic, the sequence length is static, so the mask folds to a constant (Trilu needs a static
    shape) instead of a `shape_of` at run time; Shape with start=1 is static too."""
    i64 = TensorProto.INT64

    def const(name, value):
        tensor = numpy_helper.from_array(np.array(value, "int64"))
        return helper.make_node("Constant", [], [name], value=tensor)

    nodes = [helper.make_node("Shape", ["x"], ["s"]), const("one", 1),
             helper.make_node("Gather", ["s", "one"], ["t"], axis=0), const("zero", [0]),
             helper.make_node("Unsqueeze", ["t", "zero"], ["t1"]),
             helper.make_node("Concat", ["t1", "t1"], ["tt"], axis=0),
             helper.make_node("ConstantOfShape", ["tt"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.0], "float32"))),
             helper.make_node("Trilu", ["ones"], ["mask"], upper=0),
             helper.make_node("Shape", ["x"], ["tail"], start=1),
             helper.make_node("Relu", ["x"], ["y"])]
    outputs = [_vi("mask", None), _vi("tail", None, i64), _vi("y", None)]
    model = _model(nodes, [_vi("x", ["b", 5, 3])], outputs, opset=15)
    mod, params = autorelay.frontend.from_onnx(model)
    text = autorelay.astext(mod)
    assert "shape_of" not in text and "dyn." not in text, text
    exe = autorelay.build(mod, params=params)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (2, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 5, 3)).astype("float32")
        for got, want in zip(exe(x), sess.run(None, {"x": x})):
            np.testing.assert_array_equal(np.asarray(got), want)


def test_torch_attention_block_with_a_dynamic_batch(tmp_path):
    """A decoder block exported with a dynamic batch: its head split (a reshape whose shape is the
    batch from Shape beside static sizes) stays a static reshape with -1, the attention products
    multiply operands whose only dynamic axis is the batch, the causal mask (Trilu) stays static,
    and the cache update (index_put -> ScatterND) scatters rows of a dynamic first axis."""
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self, d: int = 16, heads: int = 2):
            super().__init__()
            self.heads, self.qkv, self.out = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x, cache):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for z in self.qkv(x).split(d, -1))
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
            a = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf")).softmax(-1)
            y = x + self.out((a @ v).transpose(1, 2).reshape(b, t, d))
            cache = cache.clone()
            cache[:, 1:1 + t] = y
            return y, cache

    path = tmp_path / "block.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Block().eval(), (torch.randn(2, 4, 16), torch.zeros(2, 6, 16)), str(path),
                          dynamo=False, input_names=["x", "cache"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}, "cache": {0: "batch"}})
    model = onnx.load(str(path))
    mod, params = autorelay.frontend.from_onnx(model)  # it refused the head split's MatMul before
    assert "nn.batch_matmul" in autorelay.astext(mod)
    exe = autorelay.build(mod, params=params)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (2, 3):
        rng = np.random.default_rng(batch)
        feeds = {"x": rng.standard_normal((batch, 4, 16)).astype("float32"),
                 "cache": rng.standard_normal((batch, 6, 16)).astype("float32")}
        for got, want in zip(exe(*feeds.values()), sess.run(None, feeds)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    _no_fallback(exe)


def test_torch_attention_with_a_dynamic_sequence_length(tmp_path):
    """A causal attention block exported with a dynamic batch and sequence length: the attention
    products multiply operands whose last two axes are dynamic (flattened to one batch axis by
    reshape codes), and the causal mask is a Trilu of a run-time shape (row and column indices
    compared at run time). Run at several lengths, each against ONNX Runtime."""
    torch = pytest.importorskip("torch")

    class Attention(torch.nn.Module):
        def __init__(self, d: int = 16, heads: int = 4):
            super().__init__()
            self.heads, self.norm = heads, torch.nn.LayerNorm(d)
            self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x):
            b, n, d = x.shape
            heads = self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, d // self.heads)
            q, k, v = heads.permute(2, 0, 3, 1, 4)
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
            a = ((q @ k.transpose(-1, -2)) * 0.5).masked_fill(mask, float("-inf")).softmax(-1)
            return x + self.out((a @ v).transpose(1, 2).reshape(b, n, d))

    path = tmp_path / "attention.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attention().eval(), (torch.randn(2, 5, 16),), str(path), dynamo=False,
                          input_names=["x"], opset_version=17, dynamic_axes={"x": {0: "batch", 1: "seq"}})
    model = onnx.load(str(path))
    mod, params = autorelay.frontend.from_onnx(model)  # refused the products and the mask before
    exe = autorelay.build(mod, params=params)
    rng = np.random.default_rng(11)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in ((2, 5), (1, 9), (3, 2), (2, 5)):
        x = rng.standard_normal((batch, seq, 16)).astype("float32")
        np.testing.assert_allclose(np.asarray(exe(x)), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    _no_fallback(exe, x)


@pytest.mark.parametrize("dynamo", [False, True])
def test_torch_gpt_block_with_learned_positions_and_a_dynamic_length(tmp_path, dynamo):
    """Token and learned position embeddings (`arange(t)` of the run-time length) feeding causal
    attention, exported with a dynamic batch and length by both exporters: the positions are
    counted along the input's named length, so the block keeps its symbolic shapes (it was refused
    at the attention product, the embedding sum's length unknown)."""
    torch = pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, vocab: int = 23, d: int = 16, heads: int = 2):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(32, d)
            self.norm, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.heads = heads

        def forward(self, ids):
            b, t = ids.shape
            x = self.tok(ids) + self.pos(torch.arange(t))[None]
            q, k, v = self.qkv(self.norm(x)).split(x.shape[-1], dim=-1)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
            att = ((q @ k.transpose(-2, -1)) * 0.25).masked_fill(~causal, float("-inf")).softmax(-1)
            return x + self.proj((att @ v).transpose(1, 2).reshape(b, t, -1))

    path = tmp_path / "gpt.onnx"
    ids = torch.randint(0, 23, (2, 9))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        axes = {"ids": {0: "b", 1: "t"}}
        if dynamo:
            torch.onnx.export(Block().eval(), (ids,), str(path), input_names=["ids"], dynamic_axes=axes)
        else:
            torch.onnx.export(Block().eval(), (ids,), str(path), dynamo=False, input_names=["ids"],
                              opset_version=17, dynamic_axes=axes)
    model = onnx.load(str(path))
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for batch, length in ((2, 9), (1, 4), (3, 13)):
        x = rng.integers(0, 23, (batch, length)).astype("int64")
        np.testing.assert_allclose(np.asarray(exe(x)), sess.run(None, {"ids": x})[0], rtol=1e-4, atol=1e-5)


def test_expand_of_a_dynamic_input_to_a_constant_shape():
    """`x[..., None].expand(-1, -1, 3)` with a dynamic batch and length: the exporter writes a
    constant shape of ones where the input's extents stay, a two-way broadcast (an add of zeros of
    that shape), so the result keeps the names b and n."""
    shape = numpy_helper.from_array(np.array([1, 1, 3], "int64"), "shape")
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    model = _model([node], [_vi("x", ["b", "n", 1])], [_vi("y", None)], [shape])
    mod, params = autorelay.frontend.from_onnx(model)
    assert [str(d) for d in autorelay.infer_types(mod)["main"].checked_type.ret_type.shape] == ["b", "n", "3"]
    exe = autorelay.build(mod, params=params)
    rng = np.random.default_rng(4)
    for dims in ((2, 5, 1), (1, 3, 1), (2, 5, 1)):
        x = rng.standard_normal(dims).astype("float32")
        _check(exe, model, {"x": x})
        _no_fallback(exe, x)


def test_resize_with_a_dynamic_batch(tmp_path):
    """A decoder's upsampling (`interpolate`, scale 2) in an export with a dynamic batch: the batch
    keeps its symbolic extent and the spatial axes resize; resizing a dynamic axis is refused by
    name."""
    torch = pytest.importorskip("torch")

    class Up(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            return torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear") + 1

    for axes, error in (({0: "batch"}, None), ({0: "batch", 2: "h"}, "axis 2 has dynamic extent")):
        path = tmp_path / "up.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Up().eval(), (torch.randn(2, 3, 6, 5),), str(path), dynamo=False,
                              input_names=["x"], opset_version=17, dynamic_axes={"x": axes})
        model = onnx.load(str(path))
        if error:
            with pytest.raises(OnnxImportError, match=error):
                autorelay.frontend.from_onnx(model)
            continue
        mod, params = autorelay.frontend.from_onnx(model)
        exe = autorelay.build(mod, params=params)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for batch in (2, 4):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 6, 5)).astype("float32")
            np.testing.assert_allclose(np.asarray(exe(x)), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_group_norm_after_a_strided_conv_with_dynamic_height_and_width(tmp_path):
    """GroupNorm reshapes its (N, G, rest) statistics back to Shape of the conv output, whose H and
    W are unknown extents (`?`) of a dynamic input: they are not the normalised tensor's own
    extents at those positions, so the reshape stays run-time (two `?` are not equal; the import
    once copied the wrong extent and the build failed its type check)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    model_t = nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.GroupNorm(2, 4)).eval()
    path = tmp_path / "gn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model_t, (torch.randn(1, 4, 6, 7),), str(path), dynamo=False, input_names=["x"],
                          opset_version=17, dynamic_axes={"x": {2: "h", 3: "w"}})
    mod, params = autorelay.frontend.from_onnx(str(path))
    exe = autorelay.build(mod, params=params)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for h, w in ((6, 7), (9, 4)):
        x = np.random.default_rng(h).standard_normal((1, 4, h, w)).astype("float32")
        np.testing.assert_allclose(np.asarray(exe(x)), sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_resize_sizes_naming_a_dynamic_axis_are_refused():
    """`sizes` fixes every axis it names, a dynamic batch included (its output extent is the size,
    whatever the input's): refused by name, where the import had kept the batch dynamic."""
    sizes = numpy_helper.from_array(np.array([1, 3, 8, 8], "int64"), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")
    model = _model([node], [_vi("x", ["b", 3, 4, 4])], [_vi("y", None)], [sizes], opset=13)
    message = r"axis 0 has dynamic extent b and is resized \(an entry of sizes\)"
    with pytest.raises(OnnxImportError, match=message):
        autorelay.frontend.from_onnx(model)
