"""Convolutions against a naive loop and scipy, shape relations, weight inference and gradients."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal

from autorelay.errors import TypeCheckError
from autorelay.ir.types import AnyDim, IncompleteType, SymDim, TensorType
from autorelay.op.check import check_gradient, infer_op_type, run_op
from autorelay.op.registry import NotReady, get

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


def naive_conv2d(x, w, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """out[n, o, i, j] = sum_{c, p, q} xpad[n, g*cg + c, i*s + p*d, j*s + q*d] * w[o, c, p, q]."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pad[0] + pad[2], wd + pad[1] + pad[3]), np.float64)
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ci in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                r, s = i * stride[0] + p * dil[0], j * stride[1] + q * dil[1]
                                acc += xp[b, g * cg + ci, r, s] * w[oc, ci, p, q]
                    out[b, oc, i, j] = acc
    return out


@pytest.mark.parametrize(
    "stride,pad,dil,groups,cin,cout",
    [((1, 1), (0, 0, 0, 0), (1, 1), 1, 3, 4),
     ((2, 1), (1, 2, 0, 1), (1, 1), 1, 2, 3),
     ((1, 2), (1, 1, 1, 1), (2, 1), 2, 4, 6),
     ((2, 2), (2, 0, 1, 1), (1, 2), 4, 4, 4)],   # depthwise: groups == channels
)
def test_conv2d_matches_naive_loop(stride, pad, dil, groups, cin, cout):
    x, w = rand(2, cin, 7, 6), rand(cout, cin // groups, 3, 2)
    got = run_op("nn.conv2d", x, w, strides=stride, padding=pad, dilation=dil, groups=groups)
    np.testing.assert_allclose(got, naive_conv2d(x, w, stride, pad, dil, groups), rtol=1e-4, atol=1e-4)
    t = infer_op_type("nn.conv2d", [TensorType(x.shape), TensorType(w.shape)], strides=stride, padding=pad,
                      dilation=dil, groups=groups)
    assert t == TensorType(got.shape, "float32")


def test_conv2d_matches_scipy_correlate():
    x, w = rand(1, 2, 9, 8), rand(3, 2, 3, 3)
    got = run_op("nn.conv2d", x, w, padding=[1, 1])
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for o in range(3):
        ref = sum(signal.correlate(xp[0, c], w[o, c], mode="valid") for c in range(2))
        np.testing.assert_allclose(got[0, o], ref, rtol=1e-4, atol=1e-4)


def test_conv2d_nhwc_hwio_and_blocked_layouts():
    x, w = rand(1, 8, 5, 5), rand(16, 8, 3, 3)
    ref = naive_conv2d(x, w, pad=(1, 1, 1, 1))
    nhwc = run_op("nn.conv2d", x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), padding=[1, 1],
                  data_layout="NHWC", kernel_layout="HWIO")
    np.testing.assert_allclose(nhwc, ref.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)
    # NCHW4c data, OIHW4i8o kernel: x_b[n, C, h, w, c] = x[n, 4C + c, h, w]
    xb = x.reshape(1, 2, 4, 5, 5).transpose(0, 1, 3, 4, 2)
    wb = w.reshape(2, 8, 2, 4, 3, 3).transpose(0, 2, 4, 5, 3, 1)  # (O/8, I/4, kh, kw, 4i, 8o)
    got = run_op("nn.conv2d", xb, wb, padding=[1, 1], data_layout="NCHW4c", kernel_layout="OIHW4i8o",
                 out_layout="NCHW8c")
    np.testing.assert_allclose(got, ref.reshape(1, 2, 8, 5, 5).transpose(0, 1, 3, 4, 2), rtol=1e-4, atol=1e-4)
    t = infer_op_type("nn.conv2d", [TensorType(xb.shape), TensorType(wb.shape)], padding=[1, 1],
                      data_layout="NCHW4c", kernel_layout="OIHW4i8o", out_layout="NCHW8c")
    assert t.shape == (1, 2, 5, 5, 8)


def test_conv2d_int8_out_dtype():
    x = RNG.integers(-100, 100, (1, 2, 4, 4)).astype("int8")
    w = RNG.integers(-100, 100, (2, 2, 3, 3)).astype("int8")
    got = run_op("nn.conv2d", x, w, out_dtype="int32")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, naive_conv2d(x.astype(float), w.astype(float)).astype(np.int64))


def test_conv1d_matches_numpy_correlate():
    x, w = rand(2, 3, 11), rand(4, 3, 3)
    got = run_op("nn.conv1d", x, w, strides=2, padding=[1, 2], dilation=2)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 2)))
    for n in range(2):
        for o in range(4):
            full = 0
            for c in range(3):
                dilated = np.zeros(5)
                dilated[::2] = w[o, c]  # dilation 2 spreads the 3 taps over 5 positions
                full = full + np.correlate(xp[n, c], dilated, mode="valid")
            np.testing.assert_allclose(got[n, o], full[::2], rtol=1e-4, atol=1e-4)
    assert infer_op_type("nn.conv1d", [TensorType((2, 3, 11)), TensorType((4, 3, 3))], strides=2,
                         padding=[1, 2], dilation=2).shape == got.shape


@pytest.mark.parametrize("stride,pad,opad,dil,groups", [((1, 1), (0, 0), (0, 0), (1, 1), 1),
                                                        ((2, 2), (1, 0), (1, 0), (1, 1), 1),
                                                        ((2, 1), (0, 1), (0, 0), (1, 2), 2)])
def test_conv2d_transpose_is_the_adjoint_of_conv2d(stride, pad, opad, dil, groups):
    """<conv(y, w), x> == <y, convT(x, w)> for every x, y: an oracle independent of either code."""
    cin, cout = 4, 2  # conv: cout -> cin channels; transposed: cin -> cout
    w = rand(cin, cout // groups, 3, 2)  # OIHW for the conv == IOHW for the transposed conv
    x = rand(2, cin, 4, 5)
    y = run_op("nn.conv2d_transpose", x, w, strides=stride, padding=pad, output_padding=opad,
               dilation=dil, groups=groups)
    expect_h = (4 - 1) * stride[0] - 2 * pad[0] + dil[0] * 2 + 1 + opad[0]
    expect_w = (5 - 1) * stride[1] - 2 * pad[1] + dil[1] * 1 + 1 + opad[1]
    assert y.shape == (2, cout, expect_h, expect_w)
    z = rand(*y.shape)
    conv_z = naive_conv2d(z, w, stride, (pad[0], pad[1], pad[0], pad[1]), dil, groups)
    assert conv_z.shape == x.shape
    np.testing.assert_allclose(np.sum(conv_z * x), np.sum(z * y), rtol=1e-4)
    t = infer_op_type("nn.conv2d_transpose", [TensorType(x.shape), TensorType(w.shape)], strides=stride,
                      padding=pad, output_padding=opad, dilation=dil, groups=groups)
    assert t.shape == y.shape


def test_conv2d_relation_symbolic_and_inferred_weight():
    n = SymDim("n")
    t = infer_op_type("nn.conv2d", [TensorType((n, 3, 32, 32)), TensorType((8, 3, 3, 3))], padding=[1, 1])
    assert t.shape == (n, 8, 32, 32)
    t = infer_op_type("nn.conv2d", [TensorType((1, 3, AnyDim(), 9)), TensorType((8, 3, 3, 3))], strides=2)
    assert isinstance(t.shape[2], AnyDim) and t.shape[3] == 4
    rel = get("nn.conv2d").type_rel
    attrs = get("nn.conv2d").make_attrs({"channels": 16, "kernel_size": [3, 3], "padding": [1, 1]})
    (_, weight_t), out = rel([TensorType((1, 4, 8, 8)), IncompleteType()], attrs)
    assert weight_t == TensorType((16, 4, 3, 3)) and out == TensorType((1, 16, 8, 8))
    # depthwise NHWC / HWOI, inferred
    attrs = get("nn.conv2d").make_attrs({"channels": 6, "kernel_size": [3, 3], "groups": 6,
                                         "data_layout": "NHWC", "kernel_layout": "HWOI"})
    (_, weight_t), out = rel([TensorType((1, 8, 8, 6)), IncompleteType()], attrs)
    assert weight_t.shape == (3, 3, 6, 1) and out.shape == (1, 6, 6, 6)
    attrs = get("nn.conv2d").make_attrs({"channels": 16, "kernel_size": [1, 1],
                                         "data_layout": "NCHW4c", "kernel_layout": "OIHW4i4o"})
    (_, weight_t), out = rel([TensorType((1, 2, 8, 8, 4)), IncompleteType()], attrs)
    assert weight_t.shape == (4, 2, 1, 1, 4, 4) and out.shape == (1, 4, 8, 8, 4)
    with pytest.raises(NotReady):
        rel([TensorType((1, 4, 8, 8)), IncompleteType()], get("nn.conv2d").make_attrs({}))


def test_conv_relation_errors_name_the_shapes():
    with pytest.raises(TypeCheckError, match=r"nn.conv2d.*\(1, 3, 8, 8\).*\(4, 5, 3, 3\)"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 8, 8)), TensorType((4, 5, 3, 3))])
    with pytest.raises(TypeCheckError, match="groups"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 8, 8)), TensorType((4, 1, 3, 3))], groups=2)
    with pytest.raises(TypeCheckError, match="kernel_size"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 8, 8)), TensorType((4, 3, 3, 3))], kernel_size=[5, 5])
    with pytest.raises(TypeCheckError, match="larger than the padded"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 2, 2)), TensorType((4, 3, 3, 3))])
    with pytest.raises(TypeCheckError, match="padding takes"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 8, 8)), TensorType((4, 3, 3, 3))], padding=[1, 1, 1])
    with pytest.raises(TypeCheckError, match="data_layout"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 8, 8)), TensorType((4, 3, 3, 3))], data_layout="NCHX")
    with pytest.raises(TypeCheckError, match="rank"):
        infer_op_type("nn.conv2d", [TensorType((3, 8, 8)), TensorType((4, 3, 3, 3))])
    with pytest.raises(TypeCheckError, match=r"nn.conv2d_transpose.*\(1, 3, 4, 4\).*\(2, 3, 3, 3\)"):
        infer_op_type("nn.conv2d_transpose", [TensorType((1, 3, 4, 4)), TensorType((2, 3, 3, 3))])
    with pytest.raises(TypeCheckError, match="dtype"):
        infer_op_type("nn.conv2d", [TensorType((1, 3, 8, 8), "int8"), TensorType((4, 3, 3, 3))])


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 1], "padding": [1, 0, 0, 1]},
    {"dilation": [1, 2], "groups": 2, "padding": [1, 1]},
])
def test_conv2d_gradient(attrs):
    check_gradient("nn.conv2d", [rand(1, 2, 5, 5), rand(2, 2 // attrs.get("groups", 1), 2, 2)], attrs)


def test_conv2d_gradient_nhwc_and_conv1d():
    check_gradient("nn.conv2d", [rand(1, 4, 4, 2), rand(2, 2, 2, 3)],
                   {"data_layout": "NHWC", "kernel_layout": "HWIO", "strides": [2, 2], "padding": [1, 1]})
    check_gradient("nn.conv1d", [rand(2, 2, 7), rand(3, 2, 3)], {"strides": 2, "padding": [1, 0]})


def test_conv_transpose_gradients():
    check_gradient("nn.conv2d_transpose", [rand(1, 2, 3, 3), rand(2, 2, 2, 2)],
                   {"strides": [2, 2], "padding": [1, 0], "output_padding": [1, 0]})
    check_gradient("nn.conv1d_transpose", [rand(1, 4, 4), rand(4, 1, 3)], {"groups": 2, "strides": 2})


def test_conv_edge_shapes_and_more_inference():
    # an empty batch, a 1x1 kernel over a 1x1 image, and a blocked-layout gradient
    assert run_op("nn.conv2d", rand(0, 2, 4, 4), rand(3, 2, 3, 3)).shape == (0, 3, 2, 2)
    x, w = rand(2, 3, 1, 1), rand(4, 3, 1, 1)
    got = run_op("nn.conv2d", x, w)[:, :, 0, 0]
    np.testing.assert_allclose(got, x[:, :, 0, 0] @ w[:, :, 0, 0].T, rtol=1e-5)
    check_gradient("nn.conv2d", [rand(1, 1, 3, 3, 2), rand(1, 1, 2, 2, 2, 2)],
                   {"data_layout": "NCHW2c", "kernel_layout": "OIHW2i2o", "padding": [1, 1],
                    "out_layout": "NHWC"})
    # depthwise with a channel multiplier of 2, strided and dilated
    check_gradient("nn.conv2d", [rand(1, 2, 6, 5), rand(4, 1, 2, 2)],
                   {"groups": 2, "strides": [2, 2], "dilation": [2, 1]})
    rel = get("nn.conv1d").type_rel
    (_, wt), out = rel([TensorType((SymDim("n"), 4, 10)), IncompleteType()],
                       get("nn.conv1d").make_attrs({"channels": 6, "kernel_size": 3, "groups": 2}))
    assert wt.shape == (6, 2, 3) and out.shape == (SymDim("n"), 6, 8)
    rel = get("nn.conv2d_transpose").type_rel
    (_, wt), out = rel([TensorType((1, 4, 5, 5)), IncompleteType()],
                       get("nn.conv2d_transpose").make_attrs({"channels": 6, "kernel_size": [4, 4],
                                                              "strides": [2, 2], "padding": [1, 1]}))
    assert wt.shape == (4, 6, 4, 4) and out.shape == (1, 6, 10, 10)


def test_conv2d_through_the_type_checker():
    """Weight inference and the channel-mismatch error as seen from Relay text."""
    import autorelay

    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w) {
  nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1], channels=16, kernel_size=[3, 3])
}
"""
    mod = autorelay.infer_types(autorelay.parse(text))
    assert str(mod["main"].checked_type) == (
        "fn (Tensor[(1, 3, 8, 8), float32], Tensor[(16, 3, 3, 3), float32]) -> Tensor[(1, 16, 4, 4), float32]"
    )
    bad = text.replace("%w)", "%w: Tensor[(16, 4, 3, 3), float32])")
    with pytest.raises(TypeCheckError, match=r"3:3.*\(1, 3, 8, 8\).*\(16, 4, 3, 3\)"):
        autorelay.infer_types(autorelay.parse(bad))
