"""Hand-built ONNX graphs: opset-dependent forms, external data, parameters, error reporting.

Oracles are NumPy formulas written here, independent of the importer and of the op references.
"""

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import autorelay  # noqa: E402
from autorelay.errors import AutoRelayError  # noqa: E402
from autorelay.frontend import from_onnx  # noqa: E402
from autorelay.frontend.onnx import (  # noqa: E402
    OnnxModelError,
    OnnxNodeError,
    UnsupportedOnnxOpsError,
)
from autorelay.ir.types import SymDim  # noqa: E402

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=13, value_info=()):
    graph = helper.make_graph(
        nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info)
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _run(model, *inputs, **kw):
    mod, params = from_onnx(model, **kw)
    n = len(mod["main"].params) - len(params)
    args = list(inputs[:n]) + [params[p.name_hint] for p in mod["main"].params[n:]]
    return autorelay.evaluate(autorelay.infer_types(mod), *args)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---- opset-dependent semantics ---------------------------------------------------------------


def test_opsets_past_the_reviewed_range_warn_and_import():
    """Up to MAX_TESTED_OPSET a model imports silently; past it, with a warning naming both opsets,
    by the newest op versions the importer knows."""
    from autorelay.frontend.onnx.loader import MAX_TESTED_OPSET

    relu = [helper.make_node("Relu", ["x"], ["y"])]
    x = RNG.standard_normal((2, 3)).astype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(_run(_model(relu, [_vi("x", [2, 3])], [_vi("y", None)],
                                                  opset=MAX_TESTED_OPSET), x), np.maximum(x, 0))
    newer = _model(relu, [_vi("x", [2, 3])], [_vi("y", None)], opset=MAX_TESTED_OPSET + 1)
    with pytest.warns(UserWarning, match=f"opset {MAX_TESTED_OPSET + 1} is newer than {MAX_TESTED_OPSET}"):
        np.testing.assert_array_equal(_run(newer, x), np.maximum(x, 0))


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_coercion_before_13_vs_axis_from_13(opset):
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    m = _model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        [_vi("x", [2, 3, 4])],
        [_vi("y", [2, 3, 4])],
        opset=opset,
    )
    got = _run(m, x)
    if opset < 13:  # normalised over the flattened (3*4) tail
        want = _softmax(x.reshape(2, 12), 1).reshape(2, 3, 4)
    else:
        want = _softmax(x, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [9, 12])
def test_clip_attribute_and_input_forms(opset):
    x = RNG.standard_normal((3, 5)).astype("float32") * 3
    if opset < 11:
        nodes, inits = [helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=2.0)], []
    else:
        nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])]
        inits = [
            numpy_helper.from_array(np.array(-1.0, "float32"), "lo"),
            numpy_helper.from_array(np.array(2.0, "float32"), "hi"),
        ]
    m = _model(nodes, [_vi("x", [3, 5])], [_vi("y", [3, 5])], inits, opset=opset)
    np.testing.assert_allclose(_run(m, x), np.clip(x, -1, 2))


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_unsqueeze_squeeze_and_reduce_axes_forms(opset):
    x = RNG.standard_normal((3, 4)).astype("float32")
    axes_in = opset >= 13
    inits = [numpy_helper.from_array(np.array([0, 3], "int64"), "ax")] if axes_in else []
    kw = {} if axes_in else {"axes": [0, 3]}
    red_in = opset >= 18
    red_inits = [numpy_helper.from_array(np.array([-1], "int64"), "rax")] if red_in else []
    nodes = [
        helper.make_node("Unsqueeze", ["x", "ax"] if axes_in else ["x"], ["u"], **kw),  # (1, 3, 4, 1)
        helper.make_node(
            "ReduceMean",
            ["u", "rax"] if red_in else ["u"],
            ["r"],
            keepdims=1,
            **({} if red_in else {"axes": [-1]}),
        ),
        helper.make_node("Squeeze", ["r", "ax"] if axes_in else ["r"], ["y"], **kw),
    ]
    m = _model(nodes, [_vi("x", [3, 4])], [_vi("y", [3, 4])], inits + red_inits, opset=opset)
    np.testing.assert_allclose(_run(m, x), x, rtol=1e-6)


def test_shape_chain_folds_to_a_static_reshape():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write flatten
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    inits = [
        numpy_helper.from_array(np.array(0, "int64"), "zero"),
        numpy_helper.from_array(np.array([0], "int64"), "ax0"),
        numpy_helper.from_array(np.array([-1], "int64"), "minus1"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 12])], inits)
    mod, params = from_onnx(m)
    assert params == {}  # the integer initializers were folded, not parameters
    assert "reshape(%x, newshape=[2, 12]" in mod.astext()  # Shape/Gather/Concat left no trace
    np.testing.assert_allclose(_run(m, x), x.reshape(2, 12))


def test_matmul_batched_broadcast_and_gemm():
    a = RNG.standard_normal((2, 1, 3, 4)).astype("float32")
    b = RNG.standard_normal((5, 4, 6)).astype("float32")
    m = _model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [_vi("a", [2, 1, 3, 4]), _vi("b", [5, 4, 6])],
        [_vi("y", [2, 5, 3, 6])],
    )
    np.testing.assert_allclose(_run(m, a, b), np.matmul(a, b), rtol=1e-5, atol=1e-5)
    A, B, C = (RNG.standard_normal(s).astype("float32") for s in ((4, 3), (5, 4), (5,)))
    m = _model(
        [helper.make_node("Gemm", ["A", "B", "C"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        [_vi("A", [4, 3]), _vi("B", [5, 4]), _vi("C", [5])],
        [_vi("y", [3, 5])],
    )
    np.testing.assert_allclose(_run(m, A, B, C), 0.5 * A.T @ B.T + 2.0 * C, rtol=1e-5, atol=1e-5)


# ---- parameters, inputs, external data -------------------------------------------------------


def _conv_model():
    w = RNG.standard_normal((4, 3, 3, 3)).astype("float32")
    b = RNG.standard_normal((4,)).astype("float32")
    nodes = [
        helper.make_node("Conv", ["input.1", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["out"]),
    ]
    inits = [numpy_helper.from_array(w, "conv.weight"), numpy_helper.from_array(b, "conv.bias")]
    m = _model(nodes, [_vi("input.1", ["batch", 3, 8, 8])], [_vi("out", ["batch", 4, 8, 8])], inits)
    return m, w, b


def _conv_ref(x, w, b):
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), "float64")
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return np.maximum(out + b[None, :, None, None], 0)


def test_params_follow_inputs_and_dynamic_dims(tmp_path):
    m, w, b = _conv_model()
    mod, params = from_onnx(m)
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["input_1", "conv_weight", "conv_bias"]
    assert main.params[0].type_annotation.shape[0] == SymDim("batch")
    np.testing.assert_array_equal(params["conv_weight"], w)
    mod2, _ = from_onnx(m, shape={"input.1": (2, 3, 8, 8)})
    assert mod2["main"].params[0].type_annotation.shape == (2, 3, 8, 8)
    x = RNG.standard_normal((2, 3, 8, 8)).astype("float32")
    np.testing.assert_allclose(
        _run(m, x, shape={"input.1": (2, 3, 8, 8)}), _conv_ref(x, w, b), rtol=1e-4, atol=1e-4
    )


def test_external_data_weights_load(tmp_path):
    m, w, b = _conv_model()
    path = tmp_path / "model.onnx"
    onnx.save(
        m,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (tmp_path / "weights.bin").stat().st_size >= w.nbytes + b.nbytes
    _, params = from_onnx(str(path))
    np.testing.assert_array_equal(params["conv_weight"], w)
    np.testing.assert_array_equal(params["conv_bias"], b)
    # the same model loaded without its external data: the folder is given separately
    proto = onnx.load(str(path), load_external_data=False)
    _, params2 = from_onnx(proto, base_dir=tmp_path)
    np.testing.assert_array_equal(params2["conv_weight"], w)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(OnnxModelError, match=r"conv\.weight.*not found"):
        from_onnx(str(path))


@pytest.mark.parametrize("where", ["parent", "absolute"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, where):
    """A model names its external data file; one outside the model's folder must not be read,
    even when it exists and has exactly the bytes the tensor needs."""
    m, _w, _b = _conv_model()
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "model.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    outside = tmp_path / "secret.bin"
    (tmp_path / "model" / "weights.bin").rename(outside)
    location = "../secret.bin" if where == "parent" else str(outside)
    proto = onnx.load(str(path), load_external_data=False)
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save(proto, str(path))
    with pytest.raises(OnnxModelError, match="outside the model's folder") as info:
        from_onnx(str(path))
    assert "\n" not in str(info.value)


# ---- errors ---------------------------------------------------------------------------------


def test_all_unsupported_ops_reported_at_once():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r0"),
        helper.make_node("Bernoulli", ["a"], ["b"], name="u1"),
        helper.make_node("TfIdfVectorizer", ["b"], ["c"], name="tfidf"),
        helper.make_node("Bernoulli", ["c"], ["y"], name="u2"),
    ]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    with pytest.raises(UnsupportedOnnxOpsError) as info:
        from_onnx(m)
    msg = str(info.value)
    assert "Bernoulli (nodes: u1 [#1], u2 [#3])" in msg and "TfIdfVectorizer (nodes: tfidf [#2])" in msg
    assert "\n" not in msg and set(info.value.unsupported) == {"Bernoulli", "TfIdfVectorizer"}


def test_not_onnx_and_truncated_files(tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is a text file, not a model\n" * 20)
    with pytest.raises(OnnxModelError, match=r"not .*ONNX") as info:
        from_onnx(str(bad))
    assert "\n" not in str(info.value)
    m, _, _ = _conv_model()
    data = m.SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxModelError) as info:
        from_onnx(str(cut))
    assert "\n" not in str(info.value) and isinstance(info.value, AutoRelayError)


def test_shape_contradiction_names_the_node():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Add", ["a", "y"], ["z"], name="the_add"),
    ]
    m = _model(nodes, [_vi("x", [2, 3]), _vi("y", [4, 5])], [_vi("z", [2, 3])])
    with pytest.raises(OnnxNodeError, match=r"node #1 'the_add' \(Add\)") as info:
        from_onnx(m)
    assert "\n" not in str(info.value)
    # a declared shape that disagrees with what the node computes: warned (as ONNX Runtime warns),
    # and the computed shape kept, as exporters sometimes declare wrong shapes
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="tr", perm=[1, 0])]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("t", [2, 3])])
    x = RNG.standard_normal((2, 3)).astype("float32")
    with pytest.warns(UserWarning, match=r"'tr'.*declared with shape \(2, 3\).*\(3, 2\); the import keeps"):
        np.testing.assert_array_equal(_run(m, x), x.T)


def test_static_input_requirement_is_named_and_bindable():
    # Slice's axes must be known at import time (run-time Reshape/Slice/Pad/Expand shapes and the
    # axes of Reduce*/Squeeze/Unsqueeze become dyn ops instead: test_onnx_dynamic_values.py,
    # test_onnx_dynamic_axes.py)
    inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("b", 1), ("e", 3))]
    nodes = [helper.make_node("Slice", ["x", "b", "e", "target"], ["y"], name="sl")]
    m = _model(nodes, [_vi("x", [2, 3]), _vi("target", [1], TensorProto.INT64)], [_vi("y", [2, 2])], inits)
    with pytest.raises(OnnxNodeError, match=r"'sl'.*'target'.*constants="):
        from_onnx(m)
    x = RNG.standard_normal((2, 3)).astype("float32")
    got = _run(m, x, constants={"target": np.array([1], "int64")})
    np.testing.assert_array_equal(got, x[:, 1:3])


def test_unsqueeze_runtime_axes_runs_or_binds():
    nodes = [helper.make_node("Unsqueeze", ["x", "target"], ["y"], name="us")]
    m = _model(nodes, [_vi("x", [2, 3]), _vi("target", [1], TensorProto.INT64)], [_vi("y", [2, 1, 3])])
    x = RNG.standard_normal((2, 3)).astype("float32")
    got = _run(m, x, constants={"target": np.array([1], "int64")})
    np.testing.assert_array_equal(got, x[:, None, :])
    np.testing.assert_array_equal(_run(m, x, np.array([1], "int64")), x[:, None, :])


def test_runtime_reshape_target_with_declared_output_shape():
    nodes = [helper.make_node("Reshape", ["x", "target"], ["y"], name="rs")]
    m = _model(nodes, [_vi("x", [2, 6]), _vi("target", [2], TensorProto.INT64)], [_vi("y", [3, 4])])
    x = RNG.standard_normal((2, 6)).astype("float32")
    mod, params = from_onnx(m)
    exe = autorelay.build(mod, params=params)
    np.testing.assert_array_equal(exe(x, np.array([3, 4], "int64")), x.reshape(3, 4))


def test_old_opset_is_refused():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], opset=6)
    with pytest.raises(OnnxModelError, match="opset 6"):
        from_onnx(m)


# ---- recurrent layers with random weights (the node cases use constant ones) ------------------


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _gru_ref(x, w, r, b, lbr, reverse):
    """ONNX GRU, one direction, gates z, r, h; x (seq, batch, in)."""
    h_size = r.shape[-1]
    wz, wr, wh = np.split(w, 3)
    rz, rr, rh = np.split(r, 3)
    wbz, wbr, wbh, rbz, rbr, rbh = np.split(b, 6)
    h = np.zeros((x.shape[1], h_size))
    ys = [None] * len(x)
    for t in reversed(range(len(x))) if reverse else range(len(x)):
        z = _sigmoid(x[t] @ wz.T + h @ rz.T + wbz + rbz)
        rg = _sigmoid(x[t] @ wr.T + h @ rr.T + wbr + rbr)
        if lbr:
            hh = np.tanh(x[t] @ wh.T + rg * (h @ rh.T + rbh) + wbh)
        else:
            hh = np.tanh(x[t] @ wh.T + (rg * h) @ rh.T + rbh + wbh)
        h = (1 - z) * hh + z * h
        ys[t] = h
    return np.stack(ys), h


@pytest.mark.parametrize("lbr,direction", [(0, "forward"), (1, "reverse")])
def test_gru_random_weights_against_numpy(lbr, direction):
    seq, batch, n_in, hid = 4, 2, 3, 5
    x = RNG.standard_normal((seq, batch, n_in)).astype("float32")
    w = RNG.standard_normal((1, 3 * hid, n_in)).astype("float32")
    r = RNG.standard_normal((1, 3 * hid, hid)).astype("float32")
    b = RNG.standard_normal((1, 6 * hid)).astype("float32")
    node = helper.make_node(
        "GRU",
        ["x", "W", "R", "B"],
        ["y", "y_h"],
        hidden_size=hid,
        linear_before_reset=lbr,
        direction=direction,
    )
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (r, "R"), (b, "B"))]
    m = _model(
        [node],
        [_vi("x", [seq, batch, n_in])],
        [_vi("y", [seq, 1, batch, hid]), _vi("y_h", [1, batch, hid])],
        inits,
    )
    y, y_h = _run(m, x)
    want_y, want_h = _gru_ref(x.astype("float64"), w[0], r[0], b[0], lbr, direction == "reverse")
    np.testing.assert_allclose(y[:, 0], want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y_h[0], want_h, rtol=1e-4, atol=1e-5)


def test_lstm_peepholes_random_weights_against_numpy():
    seq, batch, n_in, hid = 3, 2, 4, 3
    x = RNG.standard_normal((seq, batch, n_in)).astype("float32")
    w = RNG.standard_normal((1, 4 * hid, n_in)).astype("float32")
    r = RNG.standard_normal((1, 4 * hid, hid)).astype("float32")
    b = RNG.standard_normal((1, 8 * hid)).astype("float32")
    p = RNG.standard_normal((1, 3 * hid)).astype("float32")
    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B", "", "", "", "P"], ["y", "y_h", "y_c"], hidden_size=hid
    )
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (r, "R"), (b, "B"), (p, "P"))]
    outs = [_vi("y", [seq, 1, batch, hid]), _vi("y_h", [1, batch, hid]), _vi("y_c", [1, batch, hid])]
    y, y_h, y_c = _run(_model([node], [_vi("x", [seq, batch, n_in])], outs, inits), x)
    # oracle: ONNX LSTM, gates i, o, f, c; peepholes i, o, f
    wi, wo, wf, wc = np.split(w[0], 4)
    ri, ro, rf, rc = np.split(r[0], 4)
    bsum = np.split(b[0][: 4 * hid] + b[0][4 * hid :], 4)
    pi, po, pf = np.split(p[0], 3)
    h = c = np.zeros((batch, hid))
    for t in range(seq):
        i = _sigmoid(x[t] @ wi.T + h @ ri.T + bsum[0] + pi * c)
        f = _sigmoid(x[t] @ wf.T + h @ rf.T + bsum[2] + pf * c)
        c = f * c + i * np.tanh(x[t] @ wc.T + h @ rc.T + bsum[3])
        o = _sigmoid(x[t] @ wo.T + h @ ro.T + bsum[1] + po * c)
        h = o * np.tanh(c)
        np.testing.assert_allclose(y[t, 0], h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y_h[0], h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y_c[0], c, rtol=1e-4, atol=1e-5)


def test_symbolic_batch_flows_through_conv_pool_flatten_gemm():
    w = RNG.standard_normal((4, 3, 3, 3)).astype("float32")
    fc = RNG.standard_normal((5, 4 * 4 * 4)).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")]
    m = _model(nodes, [_vi("x", ["N", 3, 8, 8])], [_vi("y", ["N", 5])], inits)
    mod, _ = from_onnx(m)
    ret = autorelay.infer_types(mod)["main"].checked_type.ret_type
    assert ret.shape == (SymDim("N"), 5)
    x = RNG.standard_normal((3, 3, 8, 8)).astype("float32")
    got = _run(m, x)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c = sum(
        np.einsum("nchw,oc->nohw", xp[:, :, i : i + 8, j : j + 8], w[:, :, i, j])
        for i in range(3)
        for j in range(3)
    )
    p = c.reshape(3, 4, 4, 2, 4, 2).max(axis=(3, 5))
    np.testing.assert_allclose(got, p.reshape(3, -1) @ fc.T, rtol=1e-4, atol=1e-4)
