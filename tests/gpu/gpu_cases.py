"""GPU workloads shared by the emulation and ptxas tests: (name, compute builder, NumPy oracle)."""

from __future__ import annotations

import numpy as np

from autorelay.te import expr as E
from autorelay.te import nn
from autorelay.te import tensor as te


def _ew():
    x, y = te.placeholder((300, 37), name="X"), te.placeholder((37,), name="Y")
    out = nn.elemwise(lambda a, b: E.call("exp", a) * b + E.call("tanh", a) - E.call("sigmoid", b), x, y,
                      name="out")
    return te.make_def([x, y], out), lambda x, y: np.exp(x) * y + np.tanh(x) - 1 / (1 + np.exp(-y))


def _transpose_relu():
    x = te.placeholder((19, 8, 5), name="X")
    t = te.compute((5, 19, 8), lambda a, b, c: x[b, c, a], name="t", tag="injective")
    return te.make_def([x], nn.relu(t, name="out")), lambda x: np.maximum(x.transpose(2, 0, 1), 0)


def _dense_bias_relu():
    a, w = te.placeholder((70, 33), name="A"), te.placeholder((50, 33), name="W")
    b = te.placeholder((50,), name="B")
    out = nn.relu(nn.dense(a, w, b), name="out")
    return te.make_def([a, w, b], out), lambda a, w, b: np.maximum(a @ w.T + b, 0)


def _sgemm():
    a, w = te.placeholder((64, 48), name="A"), te.placeholder((96, 48), name="W")
    return te.make_def([a, w], nn.dense(a, w, name="C")), lambda a, w: a @ w.T


def _batch_matmul():
    a, b = te.placeholder((3, 10, 12), name="A"), te.placeholder((3, 9, 12), name="B")
    return te.make_def([a, b], nn.batch_matmul(a, b)), lambda a, b: a @ b.transpose(0, 2, 1)


def _attention_scores():
    """Two batch axes (batch, heads): the GEMM's batch axes fuse onto blockIdx.z."""
    q, k = te.placeholder((2, 3, 10, 8), name="Q"), te.placeholder((2, 3, 9, 8), name="K")
    return te.make_def([q, k], nn.matmul(q, k, False, True)), lambda q, k: q @ k.transpose(0, 1, 3, 2)


def _softmax():
    x = te.placeholder((37, 50), name="X")

    def ref(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return te.make_def([x], nn.softmax(x)), ref


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_case(shape):
    def build():
        x = te.placeholder(shape, name="X")
        return te.make_def([x], nn.softmax(x)), _softmax_ref

    return build


def _global_avg_pool_case(shape):
    """global_avg_pool2d as the op computes it: a sum over H, W (keepdims) times 1 / (H W)."""

    def build():
        x = te.placeholder(shape, name="X")
        s = nn.reduce(x, "sum", [2, 3], keepdims=True, name="gsum")
        out = te.compute(s.shape, lambda *i: s[i] * (1.0 / (shape[2] * shape[3])), name="gap")
        return te.make_def([x], out), lambda x: x.mean(axis=(2, 3), keepdims=True)

    return build


def _reduce_case(shape, kind, axes, dtype="float32"):
    def build():
        x = te.placeholder(shape, dtype=dtype, name="X")
        fn = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[kind]
        ref = lambda x: np.atleast_1d(fn(x, axis=tuple(axes))).astype(dtype)
        return te.make_def([x], nn.reduce(x, kind, axes)), ref

    return build


def _max_pool_big():
    x = te.placeholder((1, 4, 12, 12), name="X")

    def ref(x):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        win = np.lib.stride_tricks.sliding_window_view(xp, (9, 9), axis=(2, 3))[:, :, ::3, ::3]
        return win.max(axis=(-2, -1))

    return te.make_def([x], nn.pool2d(x, "max", 9, 3, 1)), ref


# long reductions with few outputs: `cuda_reduction` computes them with a block per output
XRED_CASES = {
    "softmax_1000": _softmax_case((2, 1000)),
    "softmax_37": _softmax_case((5, 37)),
    "global_avg_pool_512x7x7": _global_avg_pool_case((1, 512, 7, 7)),
    "global_avg_pool_2x64x13x13": _global_avg_pool_case((2, 64, 13, 13)),
    "sum_axis_999": _reduce_case((3, 999), "sum", [1]),
    "mean_axes_0_2": _reduce_case((37, 4, 23), "mean", [0, 2]),
    "max_axis_0": _reduce_case((300, 17), "max", [0]),
    "min_all": _reduce_case((41, 29), "min", [0, 1]),
    "int32_sum_axis_200": _reduce_case((7, 200), "sum", [1], "int32"),
    "max_pool_9x9": _max_pool_big,
}


def _conv():
    x, w = te.placeholder((1, 3, 10, 9), name="X"), te.placeholder((4, 3, 3, 3), name="W")

    def ref(x, w):
        out = np.zeros((1, 4, 10, 9), np.float32)
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        for dy in range(3):
            for dx in range(3):
                out += np.einsum("chw,kc->khw", xp[0, :, dy:dy + 10, dx:dx + 9], w[:, :, dy, dx])[None]
        return out

    return te.make_def([x, w], nn.conv2d_nchw(x, w, padding=1)), ref


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    """NCHW/OIHW convolution in NumPy (windows + einsum), float64 accumulation."""
    kh, kw = w.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,kcij->nkhw", win, w.astype(np.float64)).astype(np.float32)


def _conv_case(n, c, h, w, k, ks, stride, pad, epilogue=""):
    """A conv2d_nchw (the `cuda_conv2d` template's compute), optionally with a fused bias + relu
    or bias + residual add + relu epilogue as in ResNet's fused kernels."""

    def build():
        x, wt = te.placeholder((n, c, h, w), name="X"), te.placeholder((k, c, ks, ks), name="W")
        conv = nn.conv2d_nchw(x, wt, stride, pad)
        if not epilogue:
            return te.make_def([x, wt], conv), lambda x, wt: conv_ref(x, wt, stride, pad)
        b = te.placeholder((k, 1, 1), name="B")
        if epilogue == "bias_relu":
            out = nn.elemwise(lambda a, bb: E.maximum(a + bb, 0.0), conv, b, name="out")
            return te.make_def([x, wt, b], out), \
                lambda x, wt, b: np.maximum(conv_ref(x, wt, stride, pad) + b, 0)
        r = te.placeholder(conv.shape, name="R")
        out = nn.elemwise(lambda a, bb, rr: E.maximum(a + bb + rr, 0.0), conv, b, r, name="out")
        return te.make_def([x, wt, b, r], out), \
            lambda x, wt, b, r: np.maximum(conv_ref(x, wt, stride, pad) + b + r, 0)

    return build


CONV_CASES = {
    "conv3x3_s1_odd": _conv_case(1, 5, 11, 13, 12, 3, 1, 1),
    "conv3x3_s2_batch2": _conv_case(2, 6, 9, 10, 10, 3, 2, 1),
    "conv1x1_s2": _conv_case(1, 8, 9, 9, 12, 1, 2, 0),
    "conv1x1_s1": _conv_case(2, 16, 7, 5, 9, 1, 1, 0),
    "conv7x7_s2_stem": _conv_case(1, 3, 15, 15, 8, 7, 2, 3),
    "conv_bias_relu": _conv_case(1, 8, 10, 7, 16, 3, 1, 1, "bias_relu"),
    "conv_bias_residual_relu": _conv_case(2, 16, 6, 6, 16, 3, 1, 1, "residual"),
}


def _dense_bf16():
    """bfloat16 words in (uint16), float32 accumulation out: the bit conversions on the GPU."""
    from autorelay.op.bf16 import from_bf16
    from autorelay.te import nn_bf16

    a, w = te.placeholder((20, 24), "uint16", name="A"), te.placeholder((12, 24), "uint16", name="W")
    return (te.make_def([a, w], nn_bf16.dense_bf16(a, w)),
            lambda a, w: from_bf16(a).astype(np.float64) @ from_bf16(w).T.astype(np.float64))


CASES = {"softmax": _softmax, "conv2d": _conv, "elemwise_math": _ew, "transpose_relu": _transpose_relu,
         "dense_bias_relu": _dense_bias_relu, "sgemm": _sgemm, "batch_matmul": _batch_matmul,
         "attention_scores": _attention_scores, "dense_bf16": _dense_bf16, **CONV_CASES, **XRED_CASES}


def inputs(cdef, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    from autorelay.op.bf16 import to_bf16

    def one(t) -> np.ndarray:
        if t.dtype == "uint16":  # bfloat16 words of normal values
            return to_bf16(rng.standard_normal(t.shape).astype(np.float32))
        if t.dtype.startswith("int"):
            return rng.integers(-1000, 1000, t.shape).astype(t.dtype)
        return rng.standard_normal(t.shape).astype(t.dtype)

    return [one(t) for t in cdef.inputs]


def without_barriers(s):
    """Statement `s` with every barrier removed: a racy schedule, which the emulation must catch."""
    from autorelay.tir.nodes import Allocate, Barrier, For, If, Seq

    if isinstance(s, Seq):
        return Seq(tuple(without_barriers(t) for t in s.stmts if not isinstance(t, Barrier)))
    if isinstance(s, For):
        return For(s.var, s.extent, without_barriers(s.body), s.kind)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, without_barriers(s.body))
    if isinstance(s, If):
        return If(s.cond, without_barriers(s.then), None if s.orelse is None else without_barriers(s.orelse))
    return s


def driver_reason() -> str | None:
    """Why no CUDA driver opens here (its message), or None where a GPU is usable."""
    from autorelay.codegen.nvptx.driver import CudaDriverError, open_driver

    try:
        open_driver()
    except CudaDriverError as e:
        return str(e)
    return None


def random_codes(cdef, target, n: int, seed: int, template: str | None = None):
    """`n` random legal configs of `template`'s space (the compute's first template by default)
    and their kernels, as (config, code); illegal points are pruned."""
    import random

    from autorelay.errors import ScheduleError
    from autorelay.kernel import emit_kernel
    from autorelay.schedule.templates import template_for

    space = template_for(cdef, template, target=target).space(cdef, target)
    rng, done = random.Random(seed), 0
    while done < n:
        cfg = space.sample(rng)
        try:
            code = emit_kernel(cdef, cfg, target)
        except ScheduleError:
            continue
        done += 1
        yield cfg, code
