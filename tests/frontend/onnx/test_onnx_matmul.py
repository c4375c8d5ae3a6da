"""ONNX MatMul / Gemm models under the default pipeline: compiled (no NumPy fallback), tunable
(`extract_tasks` finds their kernels), and equal to ONNX Runtime's answer.

A constant right operand takes the packed dense form (`MatmulToDense`, its transpose folded at
build time); a product of two activations keeps its matmul and is compiled as it is.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autorelay  # noqa: E402
from autorelay.frontend import from_onnx  # noqa: E402
from autorelay.ir.expr import Call, Constant, Op  # noqa: E402
from autorelay.ir.visitor import post_order  # noqa: E402
from autorelay.transform import primitive_functions  # noqa: E402
from search.extract import extract_tasks, optimize  # noqa: E402

pytestmark = pytest.mark.cpu
F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _model(nodes, inputs: dict, weights: dict):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", F, None)],
        initializer=[numpy_helper.from_array(w, n) for n, w in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _weights(**shapes):
    return {n: RNG.standard_normal(s).astype("float32") for n, s in shapes.items()}


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _build_and_compare(model, feeds):
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, target="llvm", params=params)
    got = np.asarray(exe.run(**feeds))
    want = _ort(model, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert not exe.report.fallbacks, [(r.name, r.detail) for r in exe.report.fallbacks]
    return mod, params


def _products(mod, params):
    """(op name, call) of every product in the fused functions the build lowers."""
    calls = [n for fn in primitive_functions(optimize(mod, params, "default")) for n in post_order(fn.body)
             if isinstance(n, Call) and isinstance(n.op, Op)]
    return [(c.op.name, c) for c in calls if c.op.name in ("nn.dense", "nn.matmul", "nn.batch_matmul")]


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [((37, 48), (48, 40)), ((3, 11, 48), (48, 40)), ((2, 3, 5, 48), (1, 1, 48, 40))],
    ids=["2d", "3d", "4d-bcast"])
def test_matmul_with_constant_weight_is_a_compiled_tunable_dense(x_shape, w_shape):
    w = _weights(w=w_shape)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x_shape}, w)
    feeds = {"x": RNG.standard_normal(x_shape).astype("float32")}
    mod, params = _build_and_compare(model, feeds)
    prods = _products(mod, params)
    assert [p[0] for p in prods] == ["nn.dense"]
    weight = prods[0][1].args[1]  # the folded transpose: a (N, K) constant, no transpose kernel left
    assert isinstance(weight, Constant) and weight.data.shape == (40, 48)
    np.testing.assert_array_equal(weight.data, w["w"].reshape(48, 40).T)
    tasks = extract_tasks(mod, params, "llvm", pipeline="default")
    assert [t.template for t in tasks] == ["dense"]
    assert "nn.dense" in tasks[0].ops and len(tasks[0].space) > 1


@pytest.mark.parametrize("x_shape", [(3, 9, 24), (1, 9, 24)], ids=["same-batch", "broadcast-x"])
def test_batched_matmul_with_constant_3d_weight_takes_the_packed_form(x_shape):
    w = _weights(w=(3, 24, 20))
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x_shape}, w)
    mod, params = _build_and_compare(model, {"x": RNG.standard_normal(x_shape).astype("float32")})
    (name, c), = _products(mod, params)
    assert name == "nn.batch_matmul" and c.attrs["transpose_b"] and isinstance(c.args[1], Constant)
    assert c.args[1].data.shape == (3, 20, 24)


def test_matmul_gemm_and_add_of_activations_compile_in_every_transpose_form():
    """No constant operand: the products stay as they are and still compile (Gemm transA/transB
    give nn.matmul's transpose forms; a 4-d MatMul a batch_matmul of broadcast batch axes)."""
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["ab"]),                       # (6, 8) @ (8, 5)
        helper.make_node("Gemm", ["at", "b"], ["g1"], transA=1),              # (8, 6)^T @ (8, 5)
        helper.make_node("Gemm", ["at", "bt"], ["g2"], transA=1, transB=1),   # (8, 6)^T @ (5, 8)^T
        helper.make_node("Sum", ["ab", "g1", "g2"], ["s"]),
        helper.make_node("MatMul", ["q", "s"], ["y"]),                        # (2, 3, 4, 6) @ (6, 5)
    ]
    shapes = {"a": (6, 8), "b": (8, 5), "at": (8, 6), "bt": (5, 8), "q": (2, 3, 4, 6)}
    model = _model(nodes, shapes, {})
    feeds = {n: RNG.standard_normal(s).astype("float32") for n, s in shapes.items()}
    mod, params = _build_and_compare(model, feeds)
    forms = {(n, c.attrs.get("transpose_a", False), c.attrs.get("transpose_b", True)) for n, c in
             _products(mod, params)}
    assert ("nn.matmul", True, False) in forms and ("nn.matmul", True, True) in forms
    tasks = extract_tasks(mod, params, "llvm", pipeline="default")
    assert sum(t.template == "dense" for t in tasks) >= 3


def test_products_of_activations_repack_their_operands_per_run():
    """Enough row and column blocks: the default packs a transposed A and a [K, N] B into panels
    each run (relayout kernels) and the answers still match ONNX Runtime on repeated calls."""
    shapes = {"at": (16, 40), "b": (16, 300)}  # 40 rows and 300 columns: several blocks on any target
    model = _model([helper.make_node("Gemm", ["at", "b"], ["y"], transA=1)], shapes, {})
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, target="llvm", params=params)
    assert not exe.report.fallbacks
    assert sum(r.source == "relayout" for r in exe.report.rows) == 2, str(exe.report)
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        feeds = {n: rng.standard_normal(s).astype("float32") for n, s in shapes.items()}
        np.testing.assert_allclose(np.asarray(exe.run(**feeds)), _ort(model, feeds), rtol=1e-4, atol=1e-4)


def test_pytorch_exported_attention_block_compiles_every_kernel(tmp_path):
    """A transformer block as PyTorch exports it (`x @ W` as MatMul with a (K, N) initializer, the
    attention products between activations): every kernel compiled, every linear layer a dense."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d: int = 32, heads: int = 4) -> None:
            super().__init__()
            self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff1, self.ff2, self.ln = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), nn.LayerNorm(d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(x).split(d, dim=-1))
            att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
            x = self.ln(x + self.out((att @ v).transpose(1, 2).reshape(b, t, d)))
            return x + self.ff2(torch.nn.functional.gelu(self.ff1(x)))

    torch.manual_seed(0)
    block, x = Block().eval(), torch.randn(2, 10, 32)
    path = tmp_path / "block.onnx"
    torch.onnx.export(block, (x,), str(path), dynamo=False, input_names=["x"], opset_version=17)
    model = onnx.load(str(path))
    assert sum(n.op_type == "MatMul" for n in model.graph.node) >= 6
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, target="llvm", params=params)
    assert not exe.report.fallbacks, str(exe.report)
    with torch.no_grad():
        want = block(x).numpy()
    np.testing.assert_allclose(np.asarray(exe.run(x=x.numpy())), want, rtol=1e-4, atol=1e-4)
    dense = [t for t in extract_tasks(mod, params, "llvm", pipeline="default") if "nn.dense" in t.ops]
    assert len(dense) >= 4  # qkv, out, ff1, ff2 (distinct shapes): all tunable


def test_a_weight_computed_from_constants_counts_as_constant():
    """`MatMul(x, Transpose(W))` with W an initializer (a common export of `x @ W.T`): the weight
    expression folds, so the product is still a dense with one folded (N, K) constant."""
    w = _weights(w=(40, 48))
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"])]
    model = _model(nodes, {"x": (5, 48)}, w)
    mod, params = _build_and_compare(model, {"x": RNG.standard_normal((5, 48)).astype("float32")})
    (name, c), = _products(mod, params)
    assert name == "nn.dense" and isinstance(c.args[1], Constant)
    np.testing.assert_array_equal(c.args[1].data, w["w"])  # transpose of the transpose: W itself
