"""nn ops (dense, matmul, activations, normalisations, padding, upsampling …) against independent
NumPy/SciPy formulas, their shape relations and finite-difference gradients."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from autorelay.errors import TypeCheckError
from autorelay.ir.types import AnyDim, IncompleteType, SymDim, TensorType, TupleType
from autorelay.op.check import check_gradient, infer_op_type, run_op
from autorelay.op.registry import OpPattern, get

RNG = np.random.default_rng(2)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# dense / matmul / batch_matmul


def test_dense_reference_relation_and_weight_inference():
    x, w = rand(2, 3, 4), rand(5, 4)
    got = run_op("nn.dense", x, w)
    close(got, np.einsum("bik,uk->biu", x, w))
    n = SymDim("n")
    assert infer_op_type("nn.dense", [TensorType((n, 4)), TensorType((5, 4))]) == TensorType((n, 5))
    refined, out = get("nn.dense").type_rel([TensorType((7, 4)), IncompleteType()],
                                            get("nn.dense").make_attrs({"units": 3}))
    assert refined[1] == TensorType((3, 4)) and out == TensorType((7, 3))
    assert get("nn.dense").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    xi, wi = RNG.integers(-128, 127, (2, 8)).astype("int8"), RNG.integers(-128, 127, (3, 8)).astype("int8")
    got = run_op("nn.dense", xi, wi, out_dtype="int32")
    np.testing.assert_array_equal(got, xi.astype(np.int64) @ wi.astype(np.int64).T)


def test_dense_errors():
    with pytest.raises(TypeCheckError, match=r"nn.dense.*in_features.*\(2, 4\).*\(5, 3\)"):
        infer_op_type("nn.dense", [TensorType((2, 4)), TensorType((5, 3))])
    with pytest.raises(TypeCheckError, match="units=6"):
        infer_op_type("nn.dense", [TensorType((2, 4)), TensorType((5, 4))], units=6)
    with pytest.raises(TypeCheckError, match="dtype"):
        infer_op_type("nn.dense", [TensorType((2, 4)), TensorType((5, 4), "float64")])


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_transposes_and_gradient(ta, tb):
    a, b = rand(3, 4), rand(4, 5)
    a_in = a.T.copy() if ta else a
    b_in = b.T.copy() if tb else b
    got = run_op("nn.matmul", a_in, b_in, transpose_a=ta, transpose_b=tb)
    close(got, a @ b)
    assert infer_op_type("nn.matmul", [TensorType(a_in.shape), TensorType(b_in.shape)], transpose_a=ta,
                         transpose_b=tb).shape == (3, 5)
    check_gradient("nn.matmul", [a_in, b_in], {"transpose_a": ta, "transpose_b": tb})


def test_dense_gradient_nd():
    check_gradient("nn.dense", [rand(2, 2, 3), rand(4, 3)])


@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False), (True, True)])
def test_batch_matmul(ta, tb):
    x, y = rand(3, 2, 4), rand(3, 4, 5)
    xi = np.swapaxes(x, 1, 2).copy() if ta else x
    yi = np.swapaxes(y, 1, 2).copy() if tb else y
    close(run_op("nn.batch_matmul", xi, yi, transpose_a=ta, transpose_b=tb),
          np.stack([x[i] @ y[i] for i in range(3)]))
    check_gradient("nn.batch_matmul", [xi, yi], {"transpose_a": ta, "transpose_b": tb})


def test_batch_matmul_broadcast_and_errors():
    x, y = rand(1, 2, 3), rand(4, 5, 3)
    close(run_op("nn.batch_matmul", x, y), np.stack([x[0] @ y[i].T for i in range(4)]))
    assert infer_op_type("nn.batch_matmul", [TensorType(x.shape), TensorType(y.shape)]).shape == (4, 2, 5)
    check_gradient("nn.batch_matmul", [x, y])
    with pytest.raises(TypeCheckError, match=r"\(2, 2, 3\).*\(3, 5, 3\)"):
        infer_op_type("nn.batch_matmul", [TensorType((2, 2, 3)), TensorType((3, 5, 3))])
    with pytest.raises(TypeCheckError, match="reduction mismatch"):
        infer_op_type("nn.batch_matmul", [TensorType((2, 2, 3)), TensorType((2, 5, 4))])


# ---------------------------------------------------------------------------------------------
# bias, activations, softmax, losses


def test_bias_add_and_batch_flatten():
    x, b = rand(2, 3, 4), rand(3)
    close(run_op("nn.bias_add", x, b), x + b[None, :, None])
    close(run_op("nn.bias_add", x, rand(4) * 0 + 1, axis=-1), x + 1)
    with pytest.raises(TypeCheckError, match=r"bias of shape \(4,\).*\(2, 3, 4\)"):
        infer_op_type("nn.bias_add", [TensorType((2, 3, 4)), TensorType((4,))])
    check_gradient("nn.bias_add", [x, b])
    check_gradient("nn.bias_add", [x, rand(4)], {"axis": -1})
    assert run_op("nn.batch_flatten", x).shape == (2, 12)
    assert infer_op_type("nn.batch_flatten", [TensorType((SymDim("n"), 3, 4))]).shape == (SymDim("n"), 12)
    assert isinstance(infer_op_type("nn.batch_flatten", [TensorType((2, AnyDim(), 4))]).shape[1], AnyDim)
    check_gradient("nn.batch_flatten", [x])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family_matches_scipy(axis):
    x = rand(3, 4, 2) * 5
    close(run_op("nn.softmax", x, axis=axis), special.softmax(x, axis=axis))
    close(run_op("nn.log_softmax", x, axis=axis), special.log_softmax(x, axis=axis), 1e-4)
    check_gradient("nn.softmax", [x], {"axis": axis})
    check_gradient("nn.log_softmax", [x], {"axis": axis})


def test_softmax_errors_and_stability():
    with pytest.raises(TypeCheckError, match="axis=2"):
        infer_op_type("nn.softmax", [TensorType((3, 4))], axis=2)
    with pytest.raises(TypeCheckError, match="float"):
        infer_op_type("nn.softmax", [TensorType((3, 4), "int32")])
    big = np.array([[1000.0, 1000.0]], dtype="float32")
    close(run_op("nn.softmax", big), [[0.5, 0.5]])


def test_relu_family():
    x = np.array([[-2.0, -0.5, 0.5, 3.0]], dtype="float32")
    close(run_op("nn.relu", x), [[0, 0, 0.5, 3.0]])
    close(run_op("nn.leaky_relu", x, alpha=0.1), [[-0.2, -0.05, 0.5, 3.0]])
    xi = np.array([-3, 4], dtype="int32")
    np.testing.assert_array_equal(run_op("nn.relu", xi), [0, 4])
    x4 = rand(2, 3, 2, 2)
    alpha = np.array([0.1, 0.2, 0.3], dtype="float32")
    close(run_op("nn.prelu", x4, alpha), np.where(x4 > 0, x4, x4 * alpha[None, :, None, None]))
    with pytest.raises(TypeCheckError, match=r"alpha of shape \(2,\)"):
        infer_op_type("nn.prelu", [TensorType((2, 3, 2, 2)), TensorType((2,))])
    xs = np.array([[-1.5, -0.3, 0.4, 2.0], [0.7, -0.9, 1.1, -2.2]], dtype="float32")  # away from the kink
    check_gradient("nn.relu", [xs])
    check_gradient("nn.leaky_relu", [xs], {"alpha": 0.2})
    check_gradient("nn.prelu", [xs.reshape(2, 2, 2), np.array([0.1, 0.3], "float32")])


def test_cross_entropy():
    p = special.softmax(rand(4, 3), axis=1).astype("float32")
    t = np.eye(3, dtype="float32")[[0, 2, 1, 1]]
    expect = -np.mean(np.log(p[np.arange(4), [0, 2, 1, 1]]))
    close(run_op("nn.cross_entropy", p, t), expect)
    assert infer_op_type("nn.cross_entropy", [TensorType((4, 3)), TensorType((4, 3))]) == TensorType(())
    with pytest.raises(TypeCheckError, match=r"targets of shape \(4, 2\)"):
        infer_op_type("nn.cross_entropy", [TensorType((4, 3)), TensorType((4, 2))])
    check_gradient("nn.cross_entropy", [p, t])


def test_dropout_is_identity_at_inference():
    x = rand(2, 3)
    y, mask = run_op("nn.dropout", x, rate=0.3)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(mask, np.ones_like(x))
    assert infer_op_type("nn.dropout", [TensorType((2, 3))]) == TupleType((TensorType((2, 3)),) * 2)
    check_gradient("nn.dropout", [x])


# ---------------------------------------------------------------------------------------------
# normalisation


def test_batch_norm():
    x = rand(2, 3, 2, 2)
    gamma, beta, mean = rand(3), rand(3), rand(3)
    var = np.abs(rand(3)) + 0.5
    out, m, _ = run_op("nn.batch_norm", x, gamma, beta, mean, var, epsilon=1e-3)
    for c in range(3):
        close(out[:, c], (x[:, c] - mean[c]) / np.sqrt(var[c] + 1e-3) * gamma[c] + beta[c])
    np.testing.assert_array_equal(m, mean)
    t = infer_op_type("nn.batch_norm", [TensorType((2, 3, 2, 2))] + [TensorType((3,))] * 4)
    assert t.fields[0] == TensorType((2, 3, 2, 2)) and t.fields[1] == TensorType((3,))
    nhwc = run_op("nn.batch_norm", x.transpose(0, 2, 3, 1), gamma, beta, mean, var, axis=3, epsilon=1e-3)[0]
    close(nhwc, out.transpose(0, 2, 3, 1))
    plain = run_op("nn.batch_norm", x, gamma, beta, mean, var, center=False, scale=False)[0]
    close(plain, (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5))
    with pytest.raises(TypeCheckError, match=r"moving_var of shape \(4,\)"):
        infer_op_type("nn.batch_norm", [TensorType((2, 3))] + [TensorType((3,))] * 3 + [TensorType((4,))])
    check_gradient("nn.batch_norm", [rand(2, 2, 3), rand(2), rand(2), rand(2), np.abs(rand(2)) + 1])
    check_gradient("nn.batch_norm", [rand(2, 3), rand(3), rand(3), rand(3), np.abs(rand(3)) + 1],
                   {"axis": -1, "center": False, "scale": False})


def test_layer_norm():
    x, gamma, beta = rand(2, 3, 4), rand(4), rand(4)
    got = run_op("nn.layer_norm", x, gamma, beta, epsilon=1e-3)
    for i in range(2):
        for j in range(3):
            row = x[i, j].astype(np.float64)
            close(got[i, j], (row - row.mean()) / np.sqrt(row.var() + 1e-3) * gamma + beta)
    got1 = run_op("nn.layer_norm", x, rand(3), rand(3), axis=1, center=False, scale=False)
    close(got1, (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5), 1e-4)
    with pytest.raises(TypeCheckError, match=r"gamma of shape \(3,\)"):
        infer_op_type("nn.layer_norm", [TensorType((2, 4)), TensorType((3,)), TensorType((4,))])
    check_gradient("nn.layer_norm", [rand(2, 4), rand(4), rand(4)], atol=2e-3)
    check_gradient("nn.layer_norm", [rand(3, 2, 2), rand(2), rand(2)], {"axis": 1}, atol=2e-3)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn(size):
    x = rand(2, 5, 2, 2)
    attrs = dict(size=size, axis=1, bias=1.5, alpha=0.3, beta=0.75)
    got = run_op("nn.lrn", x, **attrs)
    expect = np.zeros_like(x, dtype=np.float64)
    for c in range(5):
        lo, hi = max(0, c - size // 2), min(5, c + (size - 1) // 2 + 1)
        sq = np.sum(x[:, lo:hi].astype(np.float64) ** 2, axis=1)
        expect[:, c] = x[:, c] / (1.5 + 0.3 / size * sq) ** 0.75
    close(got, expect)
    check_gradient("nn.lrn", [rand(1, 5, 2)], attrs)


# ---------------------------------------------------------------------------------------------
# padding and upsampling


def test_pad_modes_against_hand_written_results():
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype="float32")
    w = ((1, 0), (2, 1))
    const = run_op("nn.pad", x, np.float32(9), pad_width=w)
    np.testing.assert_array_equal(const, [[9, 9, 9, 9, 9, 9], [9, 9, 1, 2, 3, 9], [9, 9, 4, 5, 6, 9]])
    refl = run_op("nn.pad", x, np.float32(0), pad_width=w, pad_mode="reflect")
    np.testing.assert_array_equal(refl, [[6, 5, 4, 5, 6, 5], [3, 2, 1, 2, 3, 2], [6, 5, 4, 5, 6, 5]])
    edge = run_op("nn.pad", x, np.float32(0), pad_width=w, pad_mode="edge")
    np.testing.assert_array_equal(edge, [[1, 1, 1, 2, 3, 3], [1, 1, 1, 2, 3, 3], [4, 4, 4, 5, 6, 6]])
    t = infer_op_type("nn.pad", [TensorType((SymDim("n"), 3)), TensorType(())], pad_width=[[0, 0], [1, 2]])
    assert t.shape == (SymDim("n"), 6)
    with pytest.raises(TypeCheckError, match="reflect padding"):
        infer_op_type("nn.pad", [TensorType((2, 3)), TensorType(())], pad_width=[[2, 0], [0, 0]],
                      pad_mode="reflect")
    with pytest.raises(TypeCheckError, match="pad_width has 1 pairs"):
        infer_op_type("nn.pad", [TensorType((2, 3)), TensorType(())], pad_width=[[2, 0]])
    with pytest.raises(TypeCheckError, match="pad_value"):
        infer_op_type("nn.pad", [TensorType((2, 3)), TensorType((1,))], pad_width=[[0, 0], [1, 1]])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_gradient(mode):
    check_gradient("nn.pad", [rand(3, 4), np.float32(0.5)], {"pad_width": [[1, 2], [2, 1]], "pad_mode": mode})


def test_upsampling():
    x = rand(1, 2, 2, 3)
    near = run_op("nn.upsampling", x, scale_h=2, scale_w=3)
    np.testing.assert_array_equal(near, np.repeat(np.repeat(x, 2, axis=2), 3, axis=3))
    nhwc = run_op("nn.upsampling", x.transpose(0, 2, 3, 1), scale_h=2, scale_w=2, layout="NHWC")
    np.testing.assert_array_equal(nhwc, np.repeat(np.repeat(x, 2, 2), 2, 3).transpose(0, 2, 3, 1))
    bil = run_op("nn.upsampling", x, scale_h=2, scale_w=2, method="bilinear", align_corners=True)
    # align_corners: output o samples input o * (in - 1) / (out - 1)
    for o in range(4):
        y = o * 1 / 3
        y0 = int(np.floor(y))
        y1 = min(y0 + 1, 1)
        for p in range(6):
            xc = p * 2 / 5
            x0 = int(np.floor(xc))
            x1 = min(x0 + 1, 2)
            fy, fx = y - y0, xc - x0
            v = ((1 - fy) * ((1 - fx) * x[0, :, y0, x0] + fx * x[0, :, y0, x1])
                 + fy * ((1 - fx) * x[0, :, y1, x0] + fx * x[0, :, y1, x1]))
            close(bil[0, :, o, p], v)
    t = infer_op_type("nn.upsampling", [TensorType((1, 2, AnyDim(), 3))], scale_h=2, scale_w=1.5)
    assert isinstance(t.shape[2], AnyDim) and t.shape[3] == 5
    check_gradient("nn.upsampling", [rand(1, 1, 2, 3)], {"scale_h": 2, "scale_w": 2})
    check_gradient("nn.upsampling", [rand(1, 1, 2, 3)], {"scale_h": 2, "scale_w": 1.5, "method": "bilinear"})


Z = np.zeros((0, 3, 4, 4), "float32")
ONE3 = np.ones(3, "float32")


@pytest.mark.parametrize("name,args,attrs", [
    ("nn.batch_flatten", [Z], {}),
    ("nn.dense", [np.zeros((0, 4), "float32"), np.ones((3, 4), "float32")], {}),
    ("nn.softmax", [Z], {"axis": 1}),
    ("nn.softmax", [np.ones((2, 1), "float32")], {}),
    ("nn.batch_norm", [Z, ONE3, ONE3, ONE3, ONE3], {}),
    ("nn.layer_norm", [Z, np.ones(4, "float32"), np.ones(4, "float32")], {}),
    ("nn.lrn", [Z], {}),
    ("nn.pad", [Z, np.float32(1)], {"pad_width": [[0, 0], [0, 0], [1, 0], [0, 2]]}),
    ("nn.upsampling", [Z], {"scale_h": 2, "scale_w": 2}),
    ("nn.conv2d_transpose", [Z, np.ones((3, 2, 2, 2), "float32")], {}),
    ("nn.batch_matmul", [np.zeros((0, 2, 3), "float32"), np.zeros((0, 4, 3), "float32")], {}),
    ("nn.matmul", [np.ones((1, 1), "float32"), np.ones((1, 1), "float32")], {}),
    ("nn.prelu", [Z, ONE3], {}),
    ("nn.dropout", [Z], {}),
])
def test_relation_agrees_with_reference_on_edge_shapes(name, args, attrs):
    """Size-0 and size-1 extents: the reference runs and returns exactly the type the relation says."""
    from autorelay.op.check import value_type

    out = run_op(name, *args, **attrs)
    assert value_type(out) == infer_op_type(name, [value_type(a) for a in args], **attrs)


GRAPH_CASES = [
    ("nn.conv2d", [(1, 4, 7, 6), (6, 2, 3, 2)], dict(strides=(2, 1), padding=(1, 0, 0, 1), groups=2)),
    ("nn.conv2d", [(1, 5, 5, 4), (3, 3, 4, 2)], dict(data_layout="NHWC", kernel_layout="HWIO", strides=2)),
    ("nn.conv2d", [(1, 2, 5, 5, 2), (2, 2, 3, 3, 2, 2)],
     dict(data_layout="NCHW2c", kernel_layout="OIHW2i2o", out_layout="NCHW")),
    ("nn.conv1d", [(2, 3, 9), (4, 3, 3)], dict(strides=2, dilation=2)),
    ("nn.conv2d_transpose", [(1, 4, 3, 3), (4, 2, 3, 3)], dict(strides=2, output_padding=1, padding=1)),
    ("nn.max_pool2d", [(1, 2, 5, 5)], dict(pool_size=3, strides=2, ceil_mode=True)),
    ("nn.global_avg_pool2d", [(1, 2, 5, 5)], {}),
    ("nn.adaptive_avg_pool2d", [(1, 2, 5, 5)], dict(output_size=2)),
    ("nn.dense", [(2, 3, 4), (5, 4)], {}),
    ("nn.batch_matmul", [(1, 2, 3), (4, 5, 3)], {}),
    ("nn.softmax", [(2, 3)], dict(axis=0)),
    ("nn.prelu", [(2, 3, 2), (3,)], {}),
    ("nn.batch_norm", [(2, 3, 2), (3,), (3,), (3,), (3,)], {}),
    ("nn.layer_norm", [(2, 3), (3,), (3,)], {}),
    ("nn.lrn", [(1, 4, 2)], dict(size=3)),
    ("nn.pad", [(2, 3), ()], dict(pad_width=((1, 0), (0, 2)), pad_mode="reflect")),
    ("nn.upsampling", [(1, 1, 2, 2)], dict(scale_h=2, scale_w=3, method="bilinear")),
    ("image.resize2d", [(1, 2, 3, 3)], dict(size=(4, 5))),
    ("nn.cross_entropy", [(2, 3), (2, 3)], {}),
]


@pytest.mark.parametrize("name,shapes,attrs", GRAPH_CASES)
def test_gradient_graphs_type_check(name, shapes, attrs):
    """The IR a gradient rule builds passes the type checker: each gradient has its argument's type."""
    from autorelay.ir.expr import Call, Function, Op, Tuple, Var
    from autorelay.ir.module import IRModule
    from autorelay.typing import infer_types

    params = [Var(f"x{i}", TensorType(s, "float32")) for i, s in enumerate(shapes)]
    opdef = get(name)
    fwd = Call(Op(name), tuple(params), opdef.make_attrs(attrs))
    fwd_type = infer_op_type(name, [p.type_annotation for p in params], **attrs)
    for p in params:
        p.set_checked_type(p.type_annotation)
    fwd.set_checked_type(fwd_type)
    out_grad = Var("g", fwd_type)
    out_grad.set_checked_type(fwd_type)
    grads = opdef.gradient(fwd, out_grad)
    mod = infer_types(IRModule.from_expr(Function(tuple(params) + (out_grad,), Tuple(tuple(grads)))))
    ret = mod["main"].checked_type.ret_type
    assert list(ret.fields) == [p.type_annotation for p in params]


def test_relay_network_text_infers_every_parameter():
    """As in Relay, the relations assign types to unannotated weights, biases and norm parameters."""
    import autorelay

    text = """#[version = "0.0.5"]
def @main(%data: Tensor[(1, 3, 32, 32), float32], %w, %gamma, %beta, %mean, %var, %a, %fc_w, %fc_b, %g, %b) {
  %0 = nn.conv2d(%data, %w, strides=[2, 2], padding=[3, 3, 3, 3], channels=64, kernel_size=[7, 7]);
  %1 = nn.batch_norm(%0, %gamma, %beta, %mean, %var, epsilon=2e-05f);
  %2 = nn.prelu(%1.0, %a);
  %3 = nn.max_pool2d(%2, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
  %4 = nn.batch_flatten(nn.global_avg_pool2d(%3));
  %5 = nn.bias_add(nn.dense(%4, %fc_w, units=10), %fc_b, axis=-1);
  nn.softmax(nn.layer_norm(%5, %g, %b))
}
"""
    fn_type = autorelay.infer_types(autorelay.parse(text))["main"].checked_type
    vec64, vec10 = TensorType((64,)), TensorType((10,))
    assert list(fn_type.arg_types[1:]) == [TensorType((64, 3, 7, 7)), vec64, vec64, vec64, vec64, vec64,
                                           TensorType((10, 64)), vec10, vec10, vec10]
    assert fn_type.ret_type == TensorType((1, 10))
