"""TopK, GatherElements, Einsum and NonZero imported from ONNX, compiled (no NumPy fallback), against ONNX
Runtime."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from autorelay.frontend.onnx import OnnxImportError  # noqa: E402


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, feeds, fallback_ok=False):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    got = exe(*feeds.values())
    got = list(got) if isinstance(got, tuple | list) else [got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        assert g.dtype == w.dtype
    if not fallback_ok:
        assert not exe.report.fallbacks, exe.report


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),  # attention scores
    ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("ik,jk", [(3, 4), (5, 4)]),  # implicit output: ij
    ("ijk,jl->il", [(2, 3, 4), (3, 6)]),  # k appears once: summed first
])
def test_einsum(eq, shapes):
    rng = np.random.default_rng(0)
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=eq)
    model = _model([node], [_vi(n, s) for n, s in zip(names, shapes)], [_vi("y", None)])
    _check(model, {n: rng.standard_normal(s).astype("float32") for n, s in zip(names, shapes)})


@pytest.mark.parametrize("eq, shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("...ij,...jk", [(5, 1, 2, 3), (1, 4, 3, 2)]),  # extents of 1 broadcast, implicit output
    ("...ij,jk->...ik", [(3, 4), (4, 5)]),  # an empty ellipsis
    ("b...d,bkd->b...k", [(2, 3, 4, 8), (2, 5, 8)]),
    ("...ii->...i", [(2, 4, 4)]),  # batched diagonals
    ("ii", [(5, 5)]),  # a trace
    ("iji->j", [(3, 4, 3)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),  # three operands, contracted left to right
    ("bi,bj,bk->bijk", [(2, 3), (2, 4), (2, 2)]),
])
def test_einsum_ellipses_diagonals_and_chains(eq, shapes):
    """The forms PyTorch programs write: batched matrix products over '...', diagonals and traces,
    and chains of more than two operands; NumPy's einsum is the oracle, as is ONNX Runtime."""
    rng = np.random.default_rng(3)
    names = [f"x{i}" for i in range(len(shapes))]
    feeds = {n: rng.standard_normal(s).astype("float32") for n, s in zip(names, shapes)}
    node = helper.make_node("Einsum", names, ["y"], equation=eq)
    model = _model([node], [_vi(n, s) for n, s in zip(names, shapes)], [_vi("y", None)])
    _check(model, feeds)
    mod, _ = autorelay.frontend.from_onnx(model)
    got = autorelay.evaluate(autorelay.infer_types(mod), *feeds.values())
    np.testing.assert_allclose(got, np.einsum(eq, *feeds.values()), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("eq, shapes, match", [
    ("...ij->ij", [(2, 3, 3)], "need a '...' in the output"),
    ("ij->i", [(3, 3, 3)], "does not fit an operand of rank 3"),
    ("ij,j.k->ik", [(3, 3), (3, 3)], "does not fit"),
    ("ii->i", [(3, 4)], "repeated in one operand over extents 3 and 4"),
    ("i1->i", [(3, 3)], "subscripts must be letters"),
])
def test_malformed_einsums_say_why(eq, shapes, match):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=eq)
    ins = [_vi(n, s) for n, s in zip(names, shapes)]
    with pytest.raises(OnnxImportError, match=match):
        autorelay.frontend.from_onnx(_model([node], ins, [_vi("y", None)]))


@pytest.mark.parametrize("largest, axis", [(1, -1), (0, 0), (1, 1)])
def test_topk(largest, axis):
    x = np.random.default_rng(1).permutation(60).reshape(5, 12).astype("float32")
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    model = _model([node], [_vi("x", x.shape)], [_vi("v", None), _vi("i", None, TensorProto.INT64)], [k])
    _check(model, {"x": x}, fallback_ok=True)  # topk has no compute yet: its reference runs, reported


def test_gather_elements_with_constant_and_runtime_negative_indices():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5)).astype("float32")
    idx = rng.integers(-5, 5, (4, 3)).astype(np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    const = _model([node], [_vi("x", x.shape)], [_vi("y", None)], [numpy_helper.from_array(idx, "i")])
    _check(const, {"x": x})
    runtime = _model([node], [_vi("x", x.shape), _vi("i", idx.shape, TensorProto.INT64)], [_vi("y", None)])
    _check(runtime, {"x": x, "i": idx})


@pytest.mark.parametrize("shape,dtype", [((2, 3, 4), TensorProto.FLOAT), ((7,), TensorProto.INT32),
                                         ((3, 5), TensorProto.BOOL), ((1, 1), TensorProto.FLOAT)])
def test_nonzero_runs_on_the_vm_with_compiled_kernels(shape, dtype):
    node = helper.make_node("NonZero", ["x"], ["i"])
    after = helper.make_node("Transpose", ["i"], ["y"])  # a following op on the (rank, ?) result
    model = _model([node, after], [helper.make_tensor_value_info("x", dtype, list(shape))],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert type(exe).__name__ == "VMExecutable"
    rng = np.random.default_rng(0)
    nptype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    for p in (0.0, 0.3, 1.0, 0.3):  # none, some, all non-zero
        x = ((rng.random(shape) < p) * rng.integers(1, 9, shape)).astype(nptype)
        got, want = exe(x), sess.run(None, {"x": x})[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert all(r.source not in ("reference", "fallback") for r in exe.provider.report()), exe.report


def test_boolean_mask_selection_gathers_a_dynamic_count():
    """`x[x > 0]` as PyTorch exports it: NonZero, Transpose, GatherND of a dynamic number of index
    tuples (their length, the rank, stays static), then an op on the selected values."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["i"]), helper.make_node("Transpose", ["i"], ["t"]),
             helper.make_node("GatherND", ["x", "t"], ["v"]), helper.make_node("Mul", ["v", "two"], ["y"])]
    consts = [numpy_helper.from_array(np.array(0, "float32"), "zero"),
              numpy_helper.from_array(np.array(2, "float32"), "two")]
    model = _model(nodes, [_vi("x", (3, 5))], [_vi("y", None)], consts)
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    rng = np.random.default_rng(2)
    for shift in (0.0, 3.0, -3.0, 0.5):  # some, all, none, most selected
        x = (rng.standard_normal((3, 5)) + shift).astype("float32")
        np.testing.assert_array_equal(np.asarray(exe(x)), x[x > 0] * 2)
    assert all(r.source not in ("reference", "fallback") for r in exe.provider.report()), exe.report


def test_gather_nd_over_a_dynamic_batch_selects_at_every_batch_size():
    """GatherND into data whose first axis is a symbolic batch: `x[x > 0]` exported with a dynamic
    batch, and constant index tuples with negative entries, wrapped by the run-time batch."""
    mask = [helper.make_node("Greater", ["x", "zero"], ["m"]), helper.make_node("NonZero", ["m"], ["i"]),
            helper.make_node("Transpose", ["i"], ["t"]), helper.make_node("GatherND", ["x", "t"], ["v"])]
    rows = [helper.make_node("GatherND", ["x", "pairs"], ["r"])]
    consts = [numpy_helper.from_array(np.array(0, "float32"), "zero"),
              numpy_helper.from_array(np.array([[0, 1], [-1, 0], [0, -1]], "int64"), "pairs")]
    x_info = _vi("x", ("b", 5, 3))
    for nodes, out in ((mask, "v"), (rows, "r")):
        model = _model(nodes, [x_info], [_vi(out, None)], consts)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        mod, params = autorelay.frontend.from_onnx(model)
        exe = autorelay.build(mod, params=params)
        for batch in (1, 4, 2):
            x = np.random.default_rng(batch).standard_normal((batch, 5, 3)).astype("float32")
            np.testing.assert_array_equal(np.asarray(exe(x)), sess.run(None, {"x": x})[0])


def test_gather_nd_with_batch_axes_over_dynamic_data_is_refused_clearly():
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)
    model = _model([node], [_vi("x", ("b", 4)), _vi("i", ("b", 1), TensorProto.INT64)], [_vi("y", None)])
    with pytest.raises(OnnxImportError, match=r"\(GatherND\): data of shape \('b', '4'\) \(batch_dims=1\)"):
        autorelay.frontend.from_onnx(model)


def test_nonzero_of_a_scalar_is_refused_clearly():
    model = _model([helper.make_node("NonZero", ["x"], ["y"])], [helper.make_tensor_value_info("x", 1, [])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    with pytest.raises(OnnxImportError, match=r"\(NonZero\): a scalar input \(rank 0\)"):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize("shape, axis, m", [((4, 5), 0, 4), ((4, 5), 1, 3), ((2, 3, 4), None, 24),
                                            ((2, 3, 4), -1, 4), ((6,), 0, 5)])
def test_compress_with_a_run_time_condition(shape, axis, m):
    """Compress keeps the slices whose condition is true (none past a short condition's end): the
    count is data, so it runs on the VM, every kernel compiled."""
    node = helper.make_node("Compress", ["x", "c"], ["y"], **({} if axis is None else {"axis": axis}))
    model = _model([node], [_vi("x", shape), _vi("c", (m,), TensorProto.BOOL)], [_vi("y", None)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    rng = np.random.default_rng(m)
    x = rng.standard_normal(shape).astype("float32")
    for p in (0.0, 0.5, 1.0, 0.3):
        c = rng.random(m) < p
        got, want = exe(x, c), sess.run(None, {"x": x, "c": c})[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert all(r.source not in ("reference", "fallback") for r in exe.provider.report()), exe.report


def test_compress_with_a_constant_condition_is_a_static_take():
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=1)
    cond = numpy_helper.from_array(np.array([True, False, True]), "c")
    model = _model([node], [_vi("x", (2, 3))], [_vi("y", None)], [cond])
    mod, params = autorelay.frontend.from_onnx(model)
    assert type(autorelay.build(mod, params=params)).__name__ != "VMExecutable"  # static shapes
    _check(model, {"x": np.arange(6, dtype="float32").reshape(2, 3)})


def test_compress_with_a_condition_longer_than_the_axis_is_refused():
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=0)
    model = _model([node], [_vi("x", (2, 3)), _vi("c", (3,), TensorProto.BOOL)], [_vi("y", None)])
    with pytest.raises(OnnxImportError, match="longer than axis 0"):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize("shape, axis, dtype", [
    ((12,), None, TensorProto.FLOAT), ((3, 4), None, TensorProto.INT64), ((5, 3), 0, TensorProto.FLOAT),
    ((2, 6, 2), -2, TensorProto.INT64)])
@pytest.mark.parametrize("is_sorted", [1, 0])
def test_unique_against_onnx_runtime(shape, axis, dtype, is_sorted):
    """All four results, at several numbers of distinct values (the count is data: the VM); only the
    sorts run on NumPy."""
    attrs = {"sorted": is_sorted} | ({} if axis is None else {"axis": axis})
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    outs = [_vi("y", None, dtype)] + [_vi(n, None, TensorProto.INT64) for n in ("first", "inverse", "counts")]
    model = _model([node], [_vi("x", shape, dtype)], outs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    rng = np.random.default_rng(len(shape) + is_sorted)
    nptype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    for distinct in (1, 3, 100):
        x = rng.integers(0, distinct, shape).astype(nptype)
        got, want = exe(x), sess.run(None, {"x": x})
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    fallbacks = {r.name for r in exe.provider.report() if r.source in ("reference", "fallback")}
    assert fallbacks and all("argsort" in name for name in fallbacks), fallbacks
