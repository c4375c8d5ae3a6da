"""qnn.conv2d / dense / add / concatenate / requantize: references against independent integer
oracles written here (explicit loops, exact rationals), and compiled kernels against the references
bit for bit on an AVX2 and an AVX-512 target (each run where this host can)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

import autorelay
from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_supports
from autorelay.errors import TypeCheckError
from autorelay.ir import Function, IRModule, TensorType, Tuple, Var
from autorelay.ir.expr import Constant
from autorelay.op.registry import call
from autorelay.runtime.interpreter import Interpreter

TARGETS = ["llvm -mcpu=znver3 -threads=1", "llvm -mcpu=znver5 -threads=2"]


def C(v, dtype):
    return Constant(np.asarray(v, dtype))


def _ratio_exact(scale_in: float, scale_out: float) -> Fraction:
    """in/out with the ratio rounded to 31 significant bits, as the rule says."""
    ratio = Fraction(float(np.float64(np.float32(scale_in)) / np.float64(np.float32(scale_out))))
    exp = math.floor(math.log2(ratio)) + 1  # ratio = frac * 2**exp, frac in [0.5, 1)
    return Fraction(round(ratio * 2 ** (31 - exp)), 2 ** (31 - exp))


def _rescale_exact(x: int, scale_in: float, scale_out: float) -> int:
    """Round-half-up of x * (in/out)."""
    return math.floor(x * _ratio_exact(scale_in, scale_out) + Fraction(1, 2))


def _sat(v: int, dtype: str) -> int:
    info = np.iinfo(dtype)
    return max(info.min, min(info.max, v))


def _run_everywhere(mod: IRModule, *args: np.ndarray) -> np.ndarray:
    """The reference interpreter's result, after checking every runnable target's build equals it."""
    ref = np.asarray(Interpreter(mod).call("main", *args))
    for t in TARGETS:
        target = resolve_target(t)
        if not host_supports(target):
            continue
        exe = autorelay.build(mod, target)
        assert not exe.report.fallbacks, exe.report.fallbacks
        np.testing.assert_array_equal(np.asarray(exe(*args)), ref, err_msg=t)
    return ref


def _conv_oracle(x, w, zd, zw, stride, pad, groups):
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    og = o // groups
    for f in range(o):
        for y in range(oh):
            for z in range(ow):
                acc = 0
                for ci in range(cg):
                    ch = f // og * cg + ci
                    for i in range(kh):
                        for j in range(kw):
                            yy, zz = y * stride + i - pad, z * stride + j - pad
                            v = int(x[0, ch, yy, zz]) if 0 <= yy < h and 0 <= zz < wd else zd
                            acc += (v - zd) * (int(w[f, ci, i, j]) - int(zw[f]))
                out[0, f, y, z] = acc
    return out


@pytest.mark.parametrize(("dtype", "groups", "stride", "per_channel_zp"),
                         [("uint8", 1, 1, False), ("int8", 1, 2, True), ("uint8", 6, 1, True)])
def test_conv2d_against_loops(dtype, groups, stride, per_channel_zp):
    rng = np.random.default_rng(groups + stride)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, 6, 7, 6)).astype(dtype)
    x[0, 0, 0, :] = info.max  # saturating extremes on purpose
    w = rng.integers(-128, 128, (6 if groups == 6 else 4, 6 // groups, 3, 3)).astype("int8")
    w[0, 0] = -128
    zd = -7 if dtype == "int8" else 131
    zw = rng.integers(-4, 5, w.shape[0]) if per_channel_zp else np.zeros(w.shape[0], np.int64)
    xv = Var("x", TensorType(x.shape, dtype))
    y = call("qnn.conv2d", xv, Constant(w), C(zd, "int32"),
             C(zw, "int32") if per_channel_zp else C(0, "int32"), C(0.1, "float32"), C(0.2, "float32"),
             strides=(stride, stride), padding=(1, 1), groups=groups, kernel_size=(3, 3))
    got = _run_everywhere(IRModule.from_expr(Function([xv], y)), x)
    np.testing.assert_array_equal(got, _conv_oracle(x, w, zd, zw, stride, 1, groups))


def test_dense_against_integer_matmul():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (2, 3, 33)).astype("uint8")
    w = rng.integers(-128, 128, (9, 33)).astype("int8")
    zw = rng.integers(-3, 4, 9).astype("int32")
    xv = Var("x", TensorType(x.shape, "uint8"))
    y = call("qnn.dense", xv, Constant(w), C(128, "int32"), Constant(zw), C(0.1, "float32"),
             C(np.full(9, 0.1), "float32"))
    got = _run_everywhere(IRModule.from_expr(Function([xv], y)), x)
    want = np.einsum("abk,nk->abn", x.astype(np.int64) - 128, w.astype(np.int64) - zw[:, None])
    np.testing.assert_array_equal(got, want)


def test_requantize_per_channel_against_exact_rationals():
    rng = np.random.default_rng(3)
    acc = rng.integers(-200000, 200000, (1, 5, 3)).astype("int32")
    acc[0, 0, 0], acc[0, 1, 0] = 2**31 - 1, -2**31  # saturate both ways
    s_in = (rng.random(5) * 1e-3 + 1e-5).astype("float32")
    xv = Var("x", TensorType(acc.shape, "int32"))
    y = call("qnn.requantize", xv, Constant(s_in), C(-4, "int32"), C(0.03, "float32"), C(-9, "int32"),
             axis=1, out_dtype="int8")
    got = _run_everywhere(IRModule.from_expr(Function([xv], y)), acc)
    for c in range(5):
        for k in range(3):
            want = _sat(_rescale_exact(int(acc[0, c, k]) + 4, s_in[c], 0.03) - 9, "int8")
            assert got[0, c, k] == want, (c, k)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_add_and_concatenate_against_exact_rationals(dtype):
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (2, 3, 4)).astype(dtype)
    b = rng.integers(info.min, info.max + 1, (2, 3, 4)).astype(dtype)
    a[0, 0, 0], b[0, 0, 0] = info.max, info.max
    av, bv = Var("a", TensorType(a.shape, dtype)), Var("b", TensorType(b.shape, dtype))
    ls, lz, rs, rz, os_, oz = 0.02, -3, 0.07, 11, 0.05, 6
    y = call("qnn.add", av, bv, C(ls, "float32"), C(lz, "int32"), C(rs, "float32"), C(rz, "int32"),
             C(os_, "float32"), C(oz, "int32"))
    got = _run_everywhere(IRModule.from_expr(Function([av, bv], y)), a, b)
    for idx in np.ndindex(a.shape):
        # the real sum of both rescaled operands, rounded once
        total = (int(a[idx]) - lz) * _ratio_exact(ls, os_) + (int(b[idx]) - rz) * _ratio_exact(rs, os_)
        want = math.floor(total + Fraction(1, 2)) + oz
        assert got[idx] == _sat(want, dtype), idx
    y = call("qnn.concatenate", Tuple((av, bv)), Tuple((C(ls, "float32"), C(rs, "float32"))),
             Tuple((C(lz, "int32"), C(rz, "int32"))), C(os_, "float32"), C(oz, "int32"), axis=1)
    got = _run_everywhere(IRModule.from_expr(Function([av, bv], y)), a, b)
    for idx in np.ndindex(got.shape):
        src, s, z = (a, ls, lz) if idx[1] < 3 else (b, rs, rz)
        v = src[idx[0], idx[1] % 3, idx[2]]
        assert got[idx] == _sat(_rescale_exact(int(v) - z, s, os_) + oz, dtype), idx


def test_quantized_layer_kernel_random_configs():
    """conv + bias + requantize + clip lower to one kernel; its default and random configs of the
    template all equal the reference interpreter."""
    from autorelay.errors import ScheduleError
    from autorelay.ir.attrs import Attrs
    from autorelay.kernel import emit_kernel, load_kernel
    from autorelay.lower.lower import lower
    from autorelay.schedule.templates import template_for

    rng = np.random.default_rng(6)
    xv = Var("x", TensorType((1, 8, 6, 6), "uint8"))
    y = call("qnn.conv2d", xv, Constant(rng.integers(-128, 128, (16, 8, 3, 3)).astype("int8")),
             C(3, "int32"), C(0, "int32"), C(0.05, "float32"), C(np.full(16, 0.01), "float32"),
             padding=(1, 1), kernel_size=(3, 3))
    y = call("nn.bias_add", y, Constant(rng.integers(-500, 500, 16).astype("int32")))
    y = call("qnn.requantize", y, Constant(np.full(16, 5e-4, "float32")), C(0, "int32"),
             C(0.02, "float32"), C(2, "int32"), axis=1, out_dtype="uint8")
    mod = autorelay.infer_types(IRModule.from_expr(Function([xv], call("clip", y, a_min=2, a_max=255))))
    x = rng.integers(0, 256, (1, 8, 6, 6)).astype("uint8")
    ref = np.asarray(Interpreter(mod).call("main", x))
    main = mod["main"]
    lowered = lower(Function(main.params, main.body, main.body.checked_type, (),
                             Attrs({"Primitive": 1})))
    consts = iter([s.value for s in lowered.sources if s.kind == "const"])
    arrays = [x if s.kind == "param" else next(consts) for s in lowered.sources]
    for t in TARGETS:
        target = resolve_target(t)
        space = template_for(lowered.cdef).space(lowered.cdef, target)
        pick = random.Random(t).sample(range(space.size), min(3, space.size))
        built = 0
        for cfg in [None, *(space.get(i) for i in pick)]:
            try:
                code = emit_kernel(lowered.cdef, cfg, target)
            except ScheduleError:
                assert cfg is not None, "the default config must be legal"
                continue
            built += 1
            if host_supports(target):
                np.testing.assert_array_equal(load_kernel(code).run(*arrays), ref, err_msg=f"{t} {cfg}")
        assert built


def test_type_errors_name_the_op_and_shapes():
    xv = Var("x", TensorType((1, 4, 5, 5), "uint8"))
    bad = call("qnn.conv2d", xv, Constant(np.zeros((8, 3, 3, 3), "int8")), C(0, "int32"), C(0, "int32"),
               C(0.1, "float32"), C(0.1, "float32"), kernel_size=(3, 3))
    with pytest.raises(TypeCheckError, match=r"qnn\.conv2d.*channel"):
        autorelay.infer_types(IRModule.from_expr(Function([xv], bad)))
    fv = Var("f", TensorType((2, 8), "float32"))
    bad = call("qnn.dense", fv, Constant(np.zeros((3, 8), "int8")), C(0, "int32"), C(0, "int32"),
               C(0.1, "float32"), C(0.1, "float32"))
    with pytest.raises(TypeCheckError, match=r"qnn\.dense.*int8 or uint8"):
        autorelay.infer_types(IRModule.from_expr(Function([fv], bad)))
    av, bv = Var("a", TensorType((2, 3), "uint8")), Var("b", TensorType((4, 3), "uint8"))
    bad = call("qnn.add", av, bv, *(C(v, d) for v, d in (
        (0.1, "float32"), (0, "int32"), (0.1, "float32"), (0, "int32"), (0.1, "float32"), (0, "int32"))))
    with pytest.raises(TypeCheckError, match=r"qnn\.add.*\(2, 3\).*\(4, 3\)"):
        autorelay.infer_types(IRModule.from_expr(Function([av, bv], bad)))


@pytest.mark.parametrize("zd", [0, 128])
def test_dense_dot_product_form_against_integer_matmul(zd):
    """uint8 rows x int8 weight with a zero weight zero point: the raw-product form plus the
    precomputed zero-point correction."""
    rng = np.random.default_rng(zd)
    x = rng.integers(0, 256, (5, 64)).astype("uint8")
    x[0] = 255
    w = rng.integers(-128, 128, (24, 64)).astype("int8")
    w[0] = -128
    xv = Var("x", TensorType(x.shape, "uint8"))
    y = call("qnn.dense", xv, Constant(w), C(zd, "int32"), C(0, "int32"), C(0.1, "float32"),
             C(0.1, "float32"))
    got = _run_everywhere(IRModule.from_expr(Function([xv], y)), x)
    np.testing.assert_array_equal(got, (x.astype(np.int64) - zd) @ w.T.astype(np.int64))
