"""Opset 23's transformer ops, Attention and RotaryEmbedding, imported as IR ops (batched matmuls,
softmax, elementwise), compiled with no NumPy fallback and checked against ONNX Runtime: heads
first (4-D) and packed (3-D), grouped and multi-query heads, causal and given masks (bool and
float; one shorter than the keys against ONNX's reference evaluator, as ONNX Runtime refuses it),
softcapping, a key/value cache and every qk output; halves and
interleaved rotations, whole and partial, with and without position ids. Opset 24's TensorScatter
(a key/value cache update) against its definition's loops: linear and circular, with and without
write indices, an update longer than the cache."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from ort_oracle import assert_matches_ort, make_model, value_info  # noqa: E402

RNG = np.random.default_rng(23)


def _check(model, feeds):
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    assert_matches_ort(exe, model, feeds, rtol=1e-4, atol=1e-5)


def _f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


CASES = {
    "mha 4-d": ({}, (2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), None),
    "gqa 4-d causal": ({"is_causal": 1}, (1, 4, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8), None),
    "mqa 3-d scale softcap": ({"q_num_heads": 4, "kv_num_heads": 1, "scale": 0.3, "softcap": 2.0},
                              (2, 3, 16), (2, 7, 4), (2, 7, 4), None),
    "bool mask": ({}, (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4), ("bool", (1, 1, 3, 5))),
    "float mask": ({"q_num_heads": 2, "kv_num_heads": 2}, (2, 3, 8), (2, 4, 8), (2, 4, 8),
                   ("float32", (3, 4))),
}


@pytest.mark.parametrize("case", CASES)
def test_attention(case):
    attrs, qs, ks, vs, mask = CASES[case]
    names = ["q", "k", "v"] + (["mask"] if mask else [])
    node = helper.make_node("Attention", names, ["y"], **attrs)
    inputs = [value_info("q", qs), value_info("k", ks), value_info("v", vs)]
    feeds = {"q": _f32(*qs), "k": _f32(*ks), "v": _f32(*vs)}
    if mask:
        dtype, shape = mask
        inputs.append(value_info("mask", shape, TensorProto.BOOL if dtype == "bool" else TensorProto.FLOAT))
        feeds["mask"] = RNG.random(shape) > 0.3 if dtype == "bool" else _f32(*shape)
        if dtype == "bool":
            feeds["mask"][..., 0] = True  # no query row masked entirely (softmax of nothing)
    _check(make_model([node], inputs, [value_info("y", None)], opset=23), feeds)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_with_a_cache_and_every_output(mode):
    """A decoding step: two new keys after five cached ones, causal, with all four outputs."""
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "key", "value", "qk"],
                            is_causal=1, softcap=3.0, qk_matmul_output_mode=mode)
    shapes = {"q": (1, 4, 2, 8), "k": (1, 2, 2, 8), "v": (1, 2, 2, 8), "pk": (1, 2, 5, 8), "pv": (1, 2, 5, 8)}
    model = make_model([node], [value_info(n, s) for n, s in shapes.items()],
                       [value_info(n, None) for n in ("y", "key", "value", "qk")], opset=23)
    feeds = {n: _f32(*s) for n, s in shapes.items()}
    if mode != 2:
        return _check(model, feeds)
    # the qk output with the causal mask in it: -inf where masked, as ONNX's reference; ONNX Runtime
    # writes the lowest finite float there instead
    mod, params = autorelay.frontend.from_onnx(model)
    got = autorelay.build(mod, params=params)(*feeds.values())
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    lowest = want[3] == np.finfo(np.float32).min
    assert lowest.any() and np.all(np.isneginf(got[3][lowest]))
    np.testing.assert_allclose(got[3][~lowest], want[3][~lowest], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("shape", "attrs", "positions"), [
    ((2, 5, 12), {"num_heads": 3}, True),
    ((2, 5, 12), {"num_heads": 2, "interleaved": 1, "rotary_embedding_dim": 4}, True),
    ((1, 3, 4, 8), {"interleaved": 1}, True),
    ((1, 3, 4, 8), {"rotary_embedding_dim": 6}, False),
])
def test_rotary_embedding(shape, attrs, positions):
    heads = attrs.get("num_heads") or shape[1]
    head = shape[-1] // heads if len(shape) == 3 else shape[-1]
    half = (attrs.get("rotary_embedding_dim") or head) // 2
    seq = shape[1] if len(shape) == 3 else shape[2]
    cache = (11, half) if positions else (shape[0], seq, half)
    names = ["x", "cos", "sin"] + (["pos"] if positions else [])
    inputs = [value_info("x", shape), value_info("cos", cache), value_info("sin", cache)]
    angles = RNG.uniform(0, 6.3, cache)
    feeds = {"x": _f32(*shape), "cos": np.cos(angles).astype("float32"),
             "sin": np.sin(angles).astype("float32")}
    if positions:
        inputs.append(value_info("pos", (shape[0], seq), TensorProto.INT64))
        feeds["pos"] = RNG.integers(0, 11, (shape[0], seq)).astype("int64")
    node = helper.make_node("RotaryEmbedding", names, ["y"], **attrs)
    _check(make_model([node], inputs, [value_info("y", None)], opset=23), feeds)


def test_a_mask_shorter_than_the_keys_is_padded_as_masked():
    """ONNX pads a mask shorter than the keys with "masked"; ONNX Runtime refuses such a model,
    so the oracle is ONNX's own reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])
    shapes = {"q": (1, 2, 3, 4), "k": (1, 2, 6, 4), "v": (1, 2, 6, 4)}
    inputs = [value_info(n, s) for n, s in shapes.items()] + [value_info("mask", (3, 4), TensorProto.BOOL)]
    model = make_model([node], inputs, [value_info("y", None)], opset=23)
    feeds = {n: _f32(*s) for n, s in shapes.items()} | {"mask": RNG.random((3, 4)) > 0.4}
    feeds["mask"][:, 0] = True
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    np.testing.assert_allclose(exe(*feeds.values()), want, rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore")
def test_pytorch_exports_scaled_dot_product_attention_as_attention():
    """torch.onnx's exporter at opset 23 writes `scaled_dot_product_attention` as one Attention node
    (grouped heads and a causal mask here), which imports and matches ONNX Runtime."""
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    args = (torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))
    model = torch.onnx.export(Block(), args, dynamo=True, opset_version=23, verbose=False).model_proto
    assert "Attention" in {n.op_type for n in model.graph.node}
    _check(model, {i.name: a.numpy() for i, a in zip(model.graph.input, args)})


def _scatter_loops(cache, update, starts, axis, circular):
    """TensorScatter as ONNX's pseudocode states it: element by element, later steps overwriting."""
    out = cache.copy()
    length, steps = cache.shape[axis], update.shape[axis]
    for prefix in np.ndindex(cache.shape[:axis]):
        for s in range(steps):
            j = starts[prefix[0]] + s
            out[(*prefix, j % length if circular else j)] = update[(*prefix, s)]
    return out


@pytest.mark.parametrize(("cache_shape", "steps", "axis", "mode", "starts"), [
    ((2, 3, 8, 4), 3, -2, "linear", [0, 5]),
    ((2, 3, 8, 4), 3, 2, "linear", None),
    ((2, 6, 5), 4, 1, "circular", [3, 4]),  # wraps around
    ((3, 4, 2), 6, 1, "circular", [1, 0, 3]),  # an update longer than the cache: the last write wins
])
def test_tensor_scatter_against_the_op_definition(cache_shape, steps, axis, mode, starts):
    rank = len(cache_shape)
    update_shape = list(cache_shape)
    update_shape[axis] = steps
    names = ["past", "update"] + (["starts"] if starts is not None else [])
    node = helper.make_node("TensorScatter", names, ["present"], axis=axis, mode=mode)
    inputs = [value_info("past", cache_shape), value_info("update", update_shape)]
    if starts is not None:
        inputs.append(value_info("starts", [cache_shape[0]], TensorProto.INT64))
    graph = helper.make_graph([node], "kv", inputs, [value_info("present", cache_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    feeds = [_f32(*cache_shape), _f32(*update_shape)]
    if starts is not None:
        feeds.append(np.array(starts, "int64"))
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    want = _scatter_loops(feeds[0], feeds[1], starts or [0] * cache_shape[0], axis % rank, mode == "circular")
    np.testing.assert_array_equal(np.asarray(exe(*feeds)), want)
