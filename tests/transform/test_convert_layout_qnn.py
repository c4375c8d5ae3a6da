"""ConvertLayout on quantized graphs: qnn.conv2d runs in NCHW[x]c with its weight packed for the
dot-product instructions, the qnn ops around it follow, and the whole graph stays bit-identical to
the reference interpreter on the unconverted graph, for both vector widths."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_supports
from autorelay.ir import Function, IRModule, TensorType, Var
from autorelay.ir.expr import Constant
from autorelay.ir.visitor import post_order
from autorelay.op.registry import call
from autorelay.runtime.interpreter import Interpreter
from autorelay.transform.convert_layout_qnn import pack_weight
from autorelay.transform.pipelines import pipeline as get_pipeline

TARGETS = ["llvm -mcpu=znver3 -threads=1", "llvm -mcpu=znver5 -threads=2"]


def C(v, dtype):
    return Constant(np.asarray(v, dtype))


def _layer(rng, x, cin, cout, zd, stride=1):
    ws = (rng.random(cout) * 0.01 + 0.001).astype("float32")
    y = call("qnn.conv2d", x, Constant(rng.integers(-128, 128, (cout, cin, 3, 3)).astype("int8")),
             C(zd, "int32"), C(0, "int32"), C(0.05, "float32"), Constant(ws), padding=(1, 1),
             strides=(stride, stride), channels=cout, kernel_size=(3, 3))
    y = call("nn.bias_add", y, Constant(rng.integers(-1000, 1000, cout).astype("int32")))
    y = call("qnn.requantize", y, Constant((0.05 * ws).astype("float32")), C(0, "int32"), C(0.1, "float32"),
             C(3, "int32"), axis=1, out_dtype="uint8")
    return call("clip", y, a_min=3, a_max=255)


def _residual_net() -> IRModule:
    rng = np.random.default_rng(0)
    x = Var("x", TensorType((1, 16, 10, 10), "uint8"))
    h = _layer(rng, x, 16, 32, 7)
    h2 = _layer(rng, h, 32, 32, 3)
    h3 = call("qnn.add", h, h2, C(0.1, "float32"), C(3, "int32"), C(0.1, "float32"), C(3, "int32"),
              C(0.15, "float32"), C(2, "int32"))
    h4 = _layer(rng, h3, 32, 24, 0, stride=2)
    return IRModule.from_expr(Function([x], call("qnn.dequantize", h4, C(0.1, "float32"), C(3, "int32"))))


@pytest.mark.parametrize("pipeline", ["nchwc", "nchwc16"])
def test_blocked_quantized_net_is_bit_exact(pipeline):
    mod = _residual_net()
    x = np.random.default_rng(1).integers(0, 256, (1, 16, 10, 10)).astype("uint8")
    ref = np.asarray(Interpreter(mod).call("main", x))
    converted = get_pipeline(pipeline)(mod)
    packed = [n for n in post_order(converted["main"]) if getattr(getattr(n, "op", None), "name", "") ==
              "qnn.conv2d"]
    assert packed and all(n.attrs["kernel_layout"].endswith("4i") for n in packed), "every conv was blocked"
    for t in TARGETS:
        target = resolve_target(t)
        exe = autorelay.build(mod, target, pipeline=pipeline)
        assert not exe.report.fallbacks
        if host_supports(target):
            np.testing.assert_array_equal(np.asarray(exe(x)), ref, err_msg=t)


def test_pack_weight_layout():
    w = (np.arange(8 * 16 * 3 * 3) % 251 - 125).reshape(8, 16, 3, 3).astype("int8")
    p = pack_weight(w, icb=8, ocb=4, g=4)
    assert p.shape == (2, 2, 3, 3, 2, 4, 4)
    for o in range(8):
        for c in range(16):
            assert p[o // 4, c // 8, 1, 2, (c % 8) // 4, o % 4, c % 4] == w[o, c, 1, 2]


@pytest.mark.parametrize(("dtype", "channels", "blocked"), [("int8", 8, True), ("uint8", 3, True),
                                                      ("int8", 3, True)])
def test_int8_data_is_shifted_and_odd_channels_are_padded(dtype, channels, blocked):
    """vpdpbusd multiplies unsigned by signed bytes: int8 data is shifted to uint8 (+128, zero point
    +128) and blocked like uint8 data. A group needs 4 input channels: 3 are padded to 4 with the
    zero point (and zero weights)."""
    rng = np.random.default_rng(2)
    x = Var("x", TensorType((1, channels, 8, 8), dtype))
    y = call("qnn.conv2d", x, Constant(rng.integers(-128, 128, (8, channels, 3, 3)).astype("int8")),
             C(9, "int32"), C(0, "int32"), C(0.1, "float32"), C(0.1, "float32"), padding=(1, 1),
             kernel_size=(3, 3))
    mod = IRModule.from_expr(Function([x], y))
    converted = get_pipeline("nchwc")(mod)
    convs = [n for n in post_order(converted["main"]) if getattr(getattr(n, "op", None), "name", "") ==
             "qnn.conv2d"]
    assert (convs[0].attrs["data_layout"] != "NCHW") == blocked
    info = np.iinfo(dtype)
    xv = rng.integers(info.min, info.max + 1, (1, channels, 8, 8)).astype(dtype)
    want = np.asarray(Interpreter(mod).call("main", xv))
    for t in TARGETS:
        target = resolve_target(t)
        exe = autorelay.build(mod, target, pipeline="nchwc")
        if host_supports(target):
            np.testing.assert_array_equal(np.asarray(exe(xv)), want, err_msg=t)


@pytest.mark.parametrize(("dtype", "stride", "per_group"), [("uint8", 1, 1), ("int8", 2, 1), ("uint8", 1, 4),
                                                        ("int8", 2, 8), ("uint8", 1, 16), ("int8", 1, 32)])
def test_depthwise_runs_blocked_and_bit_exact(dtype, stride, per_group):
    """A depthwise qnn.conv2d goes to NCHW{x}c with an OIHW1i{x}o weight (int8 data stays int8),
    one of 4- or 8-channel groups to NCHW{x}c with its groups packed whole (OIHW{g}i{x}o), one of
    16- or 32-channel groups with a group per block, and each equals the interpreter on the
    unconverted graph, border (zero-point padding) included."""
    rng = np.random.default_rng(4)
    channels, zd = max(32, 2 * per_group), (7 if dtype == "uint8" else -3)
    block = max(16, per_group)
    x = Var("x", TensorType((1, channels, 9, 9), dtype))
    weight = rng.integers(-128, 128, (channels, per_group, 3, 3)).astype("int8")
    y = call("qnn.conv2d", x, Constant(weight), C(zd, "int32"), C(0, "int32"), C(0.1, "float32"),
             C(0.1, "float32"), padding=(1, 1), strides=(stride, stride), groups=channels // per_group,
             channels=channels, kernel_size=(3, 3))
    mod = IRModule.from_expr(Function([x], y))
    converted = get_pipeline("nchwc16")(mod)
    (conv,) = [n for n in post_order(converted["main"]) if getattr(getattr(n, "op", None), "name", "") ==
               "qnn.conv2d"]
    assert conv.attrs["kernel_layout"] == f"OIHW{per_group}i{block}o"
    assert conv.attrs["data_layout"] == f"NCHW{block}c"
    info = np.iinfo(dtype)
    xv = rng.integers(info.min, info.max + 1, (1, channels, 9, 9)).astype(dtype)
    want = np.asarray(Interpreter(mod).call("main", xv))
    for t in TARGETS:
        target = resolve_target(t)
        exe = autorelay.build(mod, target, pipeline="nchwc16")
        assert not exe.report.fallbacks and any("depthwise_nchwc" in r.detail for r in exe.report.rows)
        if host_supports(target):
            np.testing.assert_array_equal(np.asarray(exe(xv)), want, err_msg=t)


@pytest.mark.parametrize("kernel", [3, 23])
def test_depthwise_sums_exact_at_the_extremes(kernel):
    """The blocked int8 depthwise sums in float32 when every partial sum stays below 2^24 (3x3: at
    most 9 * 255 * 128) and in int32 when it may not (23x23: 529 taps reach 17.3 million): both
    equal the interpreter with the products at their largest magnitudes."""
    channels, size = 16, kernel + 2
    x = Var("x", TensorType((1, channels, size, size), "uint8"))
    weight = np.full((channels, 1, kernel, kernel), -127, "int8")  # odd sums: above 2^24 float32 rounds them
    weight[0], weight[1::2] = -128, 127
    y = call("qnn.conv2d", x, Constant(weight), C(0, "int32"), C(0, "int32"), C(0.1, "float32"),
             C(0.1, "float32"), strides=(1, 1), groups=channels, channels=channels,
             kernel_size=(kernel, kernel))
    mod = IRModule.from_expr(Function([x], y))
    xv = np.full((1, channels, size, size), 255, "uint8")
    want = np.asarray(Interpreter(mod).call("main", xv))
    assert abs(int(want.min())) == kernel * kernel * 255 * 128
    for t in TARGETS:
        target = resolve_target(t)
        exe = autorelay.build(mod, target, pipeline="nchwc16")
        assert any("depthwise_nchwc" in r.detail for r in exe.report.rows)
        if host_supports(target):
            np.testing.assert_array_equal(np.asarray(exe(xv)), want, err_msg=t)
