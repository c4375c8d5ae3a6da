"""image.resize2d against a per-pixel formula; qnn quantize/dequantize/requantize against formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir.types import AnyDim, SymDim, TensorType
from autorelay.op.check import check_gradient, infer_op_type, run_op

RNG = np.random.default_rng(3)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


def naive_resize(x, oh, ow, method, mode):
    """Per output pixel: map to a source coordinate, then pick (nearest) or blend (bilinear)."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))

    def src(o, size, out_size):
        if mode == "align_corners":
            return o * (size - 1) / (out_size - 1) if out_size > 1 else 0.0
        if mode == "asymmetric":
            return o * size / out_size
        return (o + 0.5) * size / out_size - 0.5  # half_pixel

    def clamp(i, size):
        return min(max(i, 0), size - 1)

    for i in range(oh):
        for j in range(ow):
            y, xx = src(i, h, oh), src(j, w, ow)
            if method == "nearest_neighbor":
                if mode == "align_corners":
                    yi, xi = math.floor(y + 0.5), math.floor(xx + 0.5)
                else:
                    yi, xi = math.floor(y), math.floor(xx)
                out[:, :, i, j] = x[:, :, clamp(yi, h), clamp(xi, w)]
            else:
                y0, x0 = math.floor(y), math.floor(xx)
                fy, fx = y - y0, xx - x0
                acc = 0.0
                for dy, wy in ((0, 1 - fy), (1, fy)):
                    for dx, wx in ((0, 1 - fx), (1, fx)):
                        acc = acc + wy * wx * x[:, :, clamp(y0 + dy, h), clamp(x0 + dx, w)]
                out[:, :, i, j] = acc
    return out


@pytest.mark.parametrize("method", ["nearest_neighbor", "linear"])
@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("size", [(7, 5), (2, 3), (1, 1)])
def test_resize2d_matches_per_pixel_formula(method, mode, size):
    x = rand(1, 2, 4, 6)
    got = run_op("image.resize2d", x, size=size, method=method, coordinate_transformation_mode=mode)
    np.testing.assert_allclose(got, naive_resize(x, *size, method, mode), rtol=1e-5, atol=1e-6)


def test_resize2d_layouts_relation_and_errors():
    x = rand(1, 8, 3, 3)
    ref = naive_resize(x, 5, 4, "linear", "half_pixel")
    got = run_op("image.resize2d", x.transpose(0, 2, 3, 1), size=(5, 4), layout="NHWC")
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-6)
    xb = x.reshape(1, 2, 4, 3, 3).transpose(0, 1, 3, 4, 2)
    got = run_op("image.resize2d", xb, size=(5, 4), layout="NCHW4c")
    np.testing.assert_allclose(got, ref.reshape(1, 2, 4, 5, 4).transpose(0, 1, 3, 4, 2), rtol=1e-5, atol=1e-6)
    t = infer_op_type("image.resize2d", [TensorType((SymDim("n"), 3, AnyDim(), 9))], size=(16, 16))
    assert t == TensorType((SymDim("n"), 3, 16, 16))
    t = infer_op_type("image.resize2d", [TensorType((1, 2, 3, 3))], size=[4, 4], out_dtype="float64")
    assert t.dtype == "float64"
    with pytest.raises(TypeCheckError, match="method='area' is not one of"):
        infer_op_type("image.resize2d", [TensorType((1, 2, 3, 3))], size=[4, 4], method="area")
    with pytest.raises(TypeCheckError, match="coordinate_transformation_mode"):
        infer_op_type("image.resize2d", [TensorType((1, 2, 3, 3))], size=[4, 4],
                      coordinate_transformation_mode="bogus")
    with pytest.raises(TypeCheckError, match="rank"):
        infer_op_type("image.resize2d", [TensorType((2, 3, 3))], size=[4, 4])


@pytest.mark.parametrize("method,mode", [("linear", "half_pixel"), ("linear", "align_corners"),
                                         ("nearest_neighbor", "asymmetric")])
def test_resize2d_gradient(method, mode):
    check_gradient("image.resize2d", [rand(1, 2, 3, 4)],
                   {"size": (5, 3), "method": method, "coordinate_transformation_mode": mode})


# ---------------------------------------------------------------------------------------------
# quantization


def f32(v) -> np.ndarray:
    return np.asarray(v, dtype="float32")


def i32(v) -> np.ndarray:
    return np.asarray(v, dtype="int32")


def test_quantize_per_tensor_and_saturation():
    x = np.array([-2.0, -0.26, -0.25, 0.0, 0.25, 0.74, 10.0], dtype="float32")
    q = run_op("qnn.quantize", x, f32(0.5), i32(3), out_dtype="int8")
    # x / 0.5 = -4, -0.52, -0.5, 0, 0.5, 1.48, 20 -> round half even: -4, -1, -0, 0, 0, 1, 20; + 3
    np.testing.assert_array_equal(q, [-1, 2, 3, 3, 3, 4, 23])
    assert q.dtype == np.int8
    qs = run_op("qnn.quantize", np.array([-1000.0, 1000.0], "float32"), f32(1.0), i32(0), out_dtype="uint8")
    np.testing.assert_array_equal(qs, [0, 255])
    assert infer_op_type("qnn.quantize", [TensorType((2, 3)), TensorType(()), TensorType((), "int32")],
                         out_dtype="uint8") == TensorType((2, 3), "uint8")


def test_quantize_dequantize_per_channel():
    x = rand(2, 3, 4)
    scale, zp = f32([0.1, 0.02, 0.5]), i32([0, -5, 7])
    q = run_op("qnn.quantize", x, scale, zp, axis=1)
    expect = np.clip(np.round(x / scale[None, :, None]) + zp[None, :, None], -128, 127)
    np.testing.assert_array_equal(q, expect)
    back = run_op("qnn.dequantize", q, scale, zp, axis=1)
    np.testing.assert_allclose(back, (expect - zp[None, :, None]) * scale[None, :, None], rtol=1e-6)
    # away from saturation, dequantize(quantize(x)) is within half a step of x
    inside = np.abs(expect - zp[None, :, None]) < 120
    err = np.abs(back - x) / scale[None, :, None]
    assert np.all(err[inside] <= 0.5 + 1e-4)


def test_requantize_rounding_modes():
    q = np.array([-7, -5, -3, 0, 3, 5, 7, 127], dtype="int8")
    # (q - 1) * 0.5 / 1.0 -> -4, -3, -2, -0.5, 1, 2, 3, 63
    up = run_op("qnn.requantize", q, f32(0.5), i32(1), f32(1.0), i32(10), out_dtype="int8")
    np.testing.assert_array_equal(up, np.floor((q.astype(float) - 1) * 0.5 + 0.5) + 10)
    near = run_op("qnn.requantize", q, f32(0.5), i32(1), f32(1.0), i32(10), rounding="TONEAREST")
    np.testing.assert_array_equal(near[3], 9)   # -0.5 rounds away from zero to -1
    assert up[3] == 10                         # -0.5 rounds up to 0
    big = run_op("qnn.requantize", q, f32(1.0), i32(0), f32(0.1), i32(0), out_dtype="int8")
    np.testing.assert_array_equal(big, np.clip(q.astype(np.int32) * 10, -128, 127))  # saturates
    wide = run_op("qnn.requantize", q, f32(1.0), i32(0), f32(0.1), i32(0), out_dtype="int32")
    np.testing.assert_array_equal(wide, q.astype(np.int32) * 10)


def test_qnn_relation_errors():
    with pytest.raises(TypeCheckError, match="output_scale must have dtype float32"):
        infer_op_type("qnn.quantize", [TensorType((2, 3)), TensorType((), "float64"),
                                       TensorType((), "int32")])
    with pytest.raises(TypeCheckError, match=r"output_zero_point of shape \(4,\)"):
        infer_op_type("qnn.quantize", [TensorType((2, 3)), TensorType(()), TensorType((4,), "int32")])
    with pytest.raises(TypeCheckError, match="data must have dtype"):
        infer_op_type("qnn.dequantize", [TensorType((2, 3)), TensorType(()), TensorType((), "int32")])
    with pytest.raises(TypeCheckError, match="out_dtype"):
        infer_op_type("qnn.quantize", [TensorType((2, 3)), TensorType(()), TensorType((), "int32")],
                      out_dtype="float32")
    args = [TensorType((2, 3), "int8"), TensorType((3,)), TensorType((3,), "int32"), TensorType(()),
            TensorType((), "int32")]
    assert infer_op_type("qnn.requantize", args, axis=1, out_dtype="uint8") == TensorType((2, 3), "uint8")
    with pytest.raises(TypeCheckError, match="rounding"):
        infer_op_type("qnn.requantize", args, axis=1, rounding="DOWN")
