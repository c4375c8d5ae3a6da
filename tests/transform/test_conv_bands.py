"""SplitConvBands computes a channel-blocked convolution whose taps read padding over part of its
output in bands of outputs, each over its live taps (`autorelay.transform.conv_bands`): the bands
agree with a brute-force reading of which taps each output reaches the data with, the pieces
concatenated equal the convolution on the reference interpreter, and the pipelines compile it."""

from __future__ import annotations

import random

import numpy as np
import pytest
from transform_nets import typed

import autorelay
from autorelay.ir import Function, IRModule, TensorType, Var
from autorelay.ir.expr import Constant
from autorelay.ir.visitor import post_order
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import ConvertLayout, FoldConstant
from autorelay.transform.conv_bands import SplitConvBands, axis_bands


def _live(size: int, kernel: int, stride: int, dilation: int, before: int, o: int) -> list[int]:
    return [k for k in range(kernel) if 0 <= o * stride - before + k * dilation < size]


def test_bands_follow_the_live_taps_of_every_output():
    rng = random.Random(0)
    for _ in range(2000):
        size, kernel = rng.randint(1, 40), rng.randint(1, 5)
        stride, dilation = rng.randint(1, 3), rng.randint(1, 14)
        before, after = rng.randint(0, 2 * dilation), rng.randint(0, 2 * dilation)
        out = (size + before + after - (kernel - 1) * dilation - 1) // stride + 1
        if out < 1:
            continue
        live = [_live(size, kernel, stride, dilation, before, o) for o in range(out)]
        bands = axis_bands(size, out, kernel, stride, dilation, before)
        if not all(live):
            assert bands is None
            continue
        assert bands is not None and bands[0][0] == 0 and bands[-1][1] == out
        for (a, b, taps), nxt in zip(bands, [*bands[1:], None]):
            spans = {(ks[0], ks[-1]) for ks in live[a:b]}
            assert len(spans) == 1, (size, kernel, stride, dilation, before, a, b)
            (first, last), = spans
            assert taps == last - first + 1
            if nxt is not None:  # neighbours differ, else they would be one band
                assert (live[b][0], live[b][-1]) != (first, last)
            if nxt is not None:
                assert nxt[0] == b


def test_the_atrous_pyramid_band_layout_on_a_small_map():
    """DeepLab's 3x3 at dilation 12 on 16 pixels: the outer taps reach the data only from the
    first and last 4 outputs, the middle 8 read it with the centre tap alone."""
    assert axis_bands(16, 16, 3, 1, 12, 12) == [(0, 4, 2), (4, 12, 1), (12, 16, 2)]
    assert axis_bands(16, 16, 3, 1, 2, 2) == [(0, 2, 2), (2, 14, 3), (14, 16, 2)]


def _blocked_conv(data: tuple, weight: np.ndarray, block: int, **attrs) -> IRModule:
    x = Var("x", TensorType(data))
    mod = typed(IRModule.from_expr(Function((x,), call("nn.conv2d", x, Constant(weight), **attrs))))
    return FoldConstant()(ConvertLayout(dst="NCHWc", block=block)(mod))


def _convs(mod: IRModule) -> list:
    return [n for n in post_order(mod["main"].body)
            if getattr(getattr(n, "op", None), "name", "") == "nn.conv2d"]


def _macs(mod: IRModule) -> int:
    """Multiply-adds of the blocked convolutions (a grouped weight holds one group's inputs)."""
    total = 0
    for conv in _convs(typed(mod)):
        w, o = conv.args[1].checked_type.concrete_shape, conv.checked_type.concrete_shape
        total += int(np.prod(w)) * int(np.prod(o[2:4])) * o[0]
    return total


def test_the_pieces_equal_the_convolution():
    rng, split = random.Random(1), 0
    for _ in range(200):
        groups = rng.choice((1, 1, 2))
        cin, cout = 4 * groups, 8 * groups
        h, w = rng.randint(1, 12), rng.randint(1, 12)
        kernel = (rng.randint(1, 4), rng.randint(1, 4))
        dilation = (rng.choice((1, 2, 3, 6, 9)), rng.choice((1, 2, 4, 7)))
        strides = (rng.choice((1, 1, 2)), rng.choice((1, 3)))
        pads = tuple(rng.randint(0, (k - 1) * d + 1) for k, d in (*zip(kernel, dilation),) * 2)
        weight = np.random.default_rng(rng.randint(0, 99)).standard_normal(
            (cout, cin // groups, *kernel)).astype("float32")
        try:
            mod = _blocked_conv((1, cin, h, w), weight, 4, padding=pads, dilation=dilation,
                                strides=strides, groups=groups)
        except autorelay.TypeCheckError:
            continue  # a window larger than the padded input
        out = SplitConvBands(min_saving=-1.0)(mod)
        pieces = len(_convs(out))
        split += pieces > 1
        assert _macs(out) <= _macs(mod)
        x = np.random.default_rng(5).standard_normal((1, cin, h, w)).astype("float32")
        np.testing.assert_allclose(np.asarray(evaluate(out, x)), np.asarray(evaluate(mod, x)), rtol=1e-5,
                                   atol=1e-5, err_msg=f"{weight.shape} {pads} {dilation} {strides} {groups}")
    assert split >= 50  # the random cases exercise the split, not only the whole convolution


def test_the_default_threshold_splits_the_pyramid_and_leaves_a_backbone_layer_whole():
    weight = np.random.default_rng(0).standard_normal((8, 16, 3, 3)).astype("float32")
    pyramid = _blocked_conv((1, 16, 16, 16), weight, 8, padding=(12, 12), dilation=(12, 12))
    out = SplitConvBands()(pyramid)
    assert len(_convs(out)) == 9 and _macs(out) * 4 == _macs(pyramid)  # 576 of 2304 tap-pixels live
    backbone = _blocked_conv((1, 16, 16, 16), weight, 8, padding=(2, 2), dilation=(2, 2))
    assert len(_convs(SplitConvBands()(backbone))) == 1


@pytest.mark.cpu
@pytest.mark.parametrize("pipeline", ["default", "nchwc"])
def test_an_atrous_block_compiles_to_the_same_values(pipeline):
    """A pyramid branch (dilation 12 on 16x16, bias and ReLU after it) and a backbone layer
    (dilation 2), with no fallback: `default` blocks the dilated layers and splits the branch."""
    gen = np.random.default_rng(3)
    x = Var("x", TensorType((1, 16, 16, 16)))
    w1, w2 = (Constant(gen.standard_normal(s).astype("float32") * 0.2)
              for s in ((16, 16, 3, 3), (8, 16, 3, 3)))
    bias = Constant(gen.standard_normal((8, 1, 1)).astype("float32"))
    body = call("nn.relu", call("nn.conv2d", x, w1, padding=(2, 2), dilation=(2, 2)))
    pyramid = call("nn.conv2d", body, w2, padding=(12, 12), dilation=(12, 12))
    body = call("nn.relu", call("add", pyramid, bias))
    mod = IRModule.from_expr(Function((x,), body))
    xv = gen.standard_normal((1, 16, 16, 16)).astype("float32")
    want = np.asarray(evaluate(typed(mod), xv))
    exe = autorelay.build(mod, pipeline=pipeline)
    np.testing.assert_allclose(np.asarray(exe(xv)), want, rtol=1e-4, atol=1e-4)
    templates = [row.detail.split()[0] for row in exe.report.rows]
    assert templates.count("conv2d_nchwc") == 10, templates  # the backbone layer and 9 pieces
    assert not exe.report.fallbacks
