"""Kernel test cases: (name, build compute, numpy oracle). Shapes are deliberately ragged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kernel_oracles as H
import numpy as np

from autorelay.te import expr as E
from autorelay.te import nn, nn_depthwise
from autorelay.te import tensor as te


@dataclass
class Case:
    name: str
    build: Callable[[], te.ComputeDef]
    oracle: Callable[..., np.ndarray]
    template: str
    rtol: float = 1e-4


def _dense():
    a, w = te.placeholder((37, 53), name="A"), te.placeholder((29, 53), name="W")
    return te.make_def([a, w], nn.dense(a, w), "dense")


def _dense_bias_relu():
    a, w, b = (
        te.placeholder((19, 40), name="A"),
        te.placeholder((45, 40), name="W"),
        te.placeholder((45,), name="b"),
    )
    return te.make_def([a, w, b], nn.relu(nn.dense(a, w, b)), "dense_bias_relu")


def _bmm():
    a, b = te.placeholder((3, 17, 19), name="A"), te.placeholder((3, 23, 19), name="B")
    return te.make_def([a, b], nn.batch_matmul(a, b), "bmm")


def _matmul(a_shape, b_shape, ta: bool, tb: bool):
    """`te.nn.matmul` in one transpose form; batch axes broadcast (missing or 1)."""

    def build():
        a, b = te.placeholder(a_shape, name="A"), te.placeholder(b_shape, name="B")
        return te.make_def([a, b], nn.matmul(a, b, ta, tb), "matmul")

    return build


def _matmul_oracle(ta: bool, tb: bool):
    def oracle(a, b):
        a, b = a.astype(np.float64), b.astype(np.float64)
        return np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)

    return oracle


def _mm_case(name, a_shape, b_shape, ta=False, tb=False):
    return Case(name, _matmul(a_shape, b_shape, ta, tb), _matmul_oracle(ta, tb), "dense")


def _conv(s: int, p: int):
    def build():
        x, w = te.placeholder((1, 6, 11, 13), name="X"), te.placeholder((10, 6, 3, 3), name="W")
        return te.make_def([x, w], nn.conv2d_nchw(x, w, s, p), "conv")

    return build


def _conv1x1():
    x, w = te.placeholder((2, 8, 9, 9), name="X"), te.placeholder((12, 8, 1, 1), name="W")
    return te.make_def([x, w], nn.conv2d_nchw(x, w, 2, 0), "conv1x1")


def _pointwise(epilogue: bool):
    """A 1x1 stride-1 conv as a GEMM over pixels: 63 pixels and 13 channels, ragged for every tile."""

    def build():
        x, w = te.placeholder((2, 8, 9, 7), name="X"), te.placeholder((13, 8, 1, 1), name="W")
        out = nn.conv2d_1x1_nchw(x, w)
        if not epilogue:
            return te.make_def([x, w], out, "pointwise")
        b = te.placeholder((13, 1, 1), name="b")
        act = nn.elemwise(lambda a, c: E.maximum(a + c, E.const(0.0, "float32")), out, b, name="act")
        return te.make_def([x, w, b], act, "pointwise_bias_relu")

    return build


def _conv_nchwc(s: int):
    def build():
        x, w = te.placeholder((1, 2, 10, 13, 4), name="X"), te.placeholder((2, 2, 3, 3, 4, 8), name="W")
        return te.make_def([x, w], nn.conv2d_nchwc(x, w, s, 1), "conv_nchwc")

    return build


def _conv_nchwc_1x1():
    """No padding stage; 6 output blocks (register tiles of 1, 2 or 3 blocks); 11 px rows."""
    x, w = te.placeholder((1, 3, 9, 11, 8), name="X"), te.placeholder((6, 3, 1, 1, 8, 8), name="W")
    return te.make_def([x, w], nn.conv2d_nchwc(x, w, 1, 0), "conv_nchwc_1x1")


def _dw_nchwc(s: int):
    def build():
        x, w = te.placeholder((1, 2, 12, 19, 8), name="X"), te.placeholder((2, 1, 3, 3, 1, 8), name="W")
        return te.make_def([x, w], nn_depthwise.depthwise_conv2d_nchwc(x, w, s, 1), "dw_nchwc")

    return build


def _group_nchwc(s: int, g: int, b: int, blocks: int):
    """Groups of g channels packed whole in blocks of b (`packed_group_conv2d_nchwc`)."""

    def build():
        x = te.placeholder((1, blocks, 9, 6, b), name="X")  # narrow: the unrolled tile stays small
        w = te.placeholder((blocks, 1, 3, 3, g, b), name="W")
        return te.make_def([x, w], nn_depthwise.packed_group_conv2d_nchwc(x, w, s, 1), "group_nchwc")

    return build


def _blocked_oracle(s: int, p: int, groups: int = 1):
    """The NCHW[x]c conv through the NCHW oracle: unpack data (and OIHW[i]i[o]o weights), repack."""

    def oracle(x, w):
        ob, ib = w.shape[0], w.shape[1]
        oihw = w.transpose(0, 5, 1, 4, 2, 3).reshape(ob * w.shape[5], ib * w.shape[4], *w.shape[2:4])
        return H.to_nchwc(H.conv_nchw(H.from_nchwc(x), oihw, s, p, groups), w.shape[5])

    return oracle


def _dw(s: int):
    def build():
        x, w = te.placeholder((1, 5, 12, 19), name="X"), te.placeholder((5, 1, 3, 3), name="W")
        return te.make_def([x, w], nn_depthwise.depthwise_conv2d_nchw(x, w, s, 1), "dw")

    return build


def _pool(kind: str, k: int, s: int, p: int):
    def build():
        x = te.placeholder((1, 3, 13, 11), name="X")
        return te.make_def([x], nn.pool2d(x, kind, k, s, p), f"{kind}pool")

    return build


def _softmax():
    x = te.placeholder((5, 37), name="X")
    return te.make_def([x], nn.softmax(x), "softmax")


def _reduce(kind: str, axes, keep: bool):
    def build():
        x = te.placeholder((4, 6, 21), name="X")
        return te.make_def([x], nn.reduce(x, kind, axes, keep), f"{kind}")

    return build


def _elemwise():
    x, y = te.placeholder((3, 5, 19), name="X"), te.placeholder((5, 1), name="Y")
    out = nn.elemwise(lambda a, b: E.call("tanh", a) * b + E.call("exp", b * 0.5), x, y, name="ew")
    return te.make_def([x, y], out, "elemwise")


def _transpose_sigmoid():
    x = te.placeholder((7, 33), name="X")
    t = te.compute((33, 7), lambda i, j: E.call("sigmoid", x[j, i]), name="T")
    return te.make_def([x], t, "transpose")


def _conv_oracle(s, p):
    return lambda x, w: H.conv_nchw(x, w, s, p)


CASES = [
    Case("dense", _dense, lambda a, w: a.astype(np.float64) @ w.T, "dense"),
    Case(
        "dense_bias_relu",
        _dense_bias_relu,
        lambda a, w, b: np.maximum(a.astype(np.float64) @ w.T + b, 0),
        "dense",
    ),
    Case("batch_matmul", _bmm, lambda a, b: a.astype(np.float64) @ b.transpose(0, 2, 1), "dense"),
    _mm_case("matmul_nn", (53, 21), (21, 37)),  # enough row blocks: B packed by default
    _mm_case("matmul_tn", (21, 19), (21, 37), ta=True),
    _mm_case("matmul_tt", (21, 19), (37, 21), ta=True, tb=True),
    _mm_case("matmul_3d_weight_nk", (2, 7, 21), (29, 21), tb=True),
    _mm_case("batch_matmul_nn_bcast", (3, 9, 13), (1, 13, 23)),
    _mm_case("batch_matmul_tt", (3, 13, 9), (3, 23, 13), ta=True, tb=True),
    _mm_case("matmul_4d_bcast_batch", (2, 3, 5, 11), (3, 11, 17)),
    Case("conv_s1", _conv(1, 1), _conv_oracle(1, 1), "conv2d_nchw"),
    Case("conv_s2", _conv(2, 1), _conv_oracle(2, 1), "conv2d_nchw"),
    Case("conv_1x1_s2", _conv1x1, _conv_oracle(2, 0), "conv2d_nchw"),
    Case("conv_1x1_s1", _pointwise(False), _conv_oracle(1, 0), "conv2d_1x1_nchw"),
    Case(
        "conv_1x1_bias_relu",
        _pointwise(True),
        lambda x, w, b: np.maximum(H.conv_nchw(x, w, 1, 0) + b, 0),
        "conv2d_1x1_nchw",
    ),
    Case("conv_nchwc_s1", _conv_nchwc(1), _blocked_oracle(1, 1), "conv2d_nchwc"),
    Case("conv_nchwc_s2", _conv_nchwc(2), _blocked_oracle(2, 1), "conv2d_nchwc"),
    Case("conv_nchwc_1x1", _conv_nchwc_1x1, _blocked_oracle(1, 0), "conv2d_nchwc"),
    Case("depthwise_nchwc_s1", _dw_nchwc(1), _blocked_oracle(1, 1, groups=16), "depthwise_nchwc"),
    Case("depthwise_nchwc_s2", _dw_nchwc(2), _blocked_oracle(2, 1, groups=16), "depthwise_nchwc"),
    Case("group4_nchwc16_s1", _group_nchwc(1, 4, 16, 2), _blocked_oracle(1, 1, groups=8), "depthwise_nchwc"),
    Case("group2_nchwc8_s2", _group_nchwc(2, 2, 8, 3), _blocked_oracle(2, 1, groups=12), "depthwise_nchwc"),
    Case("depthwise_s1", _dw(1), lambda x, w: H.conv_nchw(x, w, 1, 1, groups=5), "depthwise_conv2d_nchw"),
    Case("depthwise_s2", _dw(2), lambda x, w: H.conv_nchw(x, w, 2, 1, groups=5), "depthwise_conv2d_nchw"),
    Case("maxpool", _pool("max", 3, 2, 1), lambda x: H.pool(x, 3, 2, 1, "max"), "reduction"),
    Case("avgpool", _pool("avg", 2, 2, 0), lambda x: H.pool(x, 2, 2, 0, "avg"), "reduction"),
    Case("softmax", _softmax, H.softmax, "reduction"),
    Case("sum_last", _reduce("sum", [2], False), lambda x: x.sum(2), "reduction"),
    Case("max_first_keep", _reduce("max", [0], True), lambda x: x.max(0, keepdims=True), "reduction"),
    Case("mean_all", _reduce("mean", [0, 1, 2], False), lambda x: np.array([x.mean()]), "reduction"),
    Case("elemwise_broadcast", _elemwise, lambda x, y: np.tanh(x) * y + np.exp(y * 0.5), "injective"),
    Case("transpose_sigmoid", _transpose_sigmoid, lambda x: 1 / (1 + np.exp(-x.T)), "injective"),
]


def inputs_for(cdef: te.ComputeDef, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype) for t in cdef.inputs]
