"""bf16 storage, conversion and the bf16 dense / conv kernels (float32 accumulation), on a forced
AVX2 target (znver3: the fp32-convert path) and a forced AVX512-BF16 target (znver5: `vdpbf16ps`),
run where this host has the features, else checked in the assembly only."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_supports
from autorelay.codegen.llvm.jit import assembly
from autorelay.kernel import emit_kernel, load_kernel
from autorelay.op.bf16 import from_bf16, to_bf16
from autorelay.schedule.templates import template_for
from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.nn_bf16 import conv2d_nchw_bf16, dense_bf16

pytestmark = pytest.mark.cpu
TARGETS = {"avx2": "llvm -mcpu=znver3", "bf16": "llvm -mcpu=znver5"}
EPS32 = np.finfo(np.float32).eps


def _word_value(words: np.ndarray) -> np.ndarray:
    """The real value of bf16 words in float64, decoded from sign, exponent and mantissa; the
    exponent 255 reads as 2**128 (the overflow point rounding compares against)."""
    w = words.astype(np.int64)
    sign = np.where(w & 0x8000, -1.0, 1.0)
    exp, mant = (w >> 7) & 0xFF, w & 0x7F
    normal = np.ldexp(1.0 + mant / 128.0, exp - 127)
    return sign * np.where(exp == 0, np.ldexp(mant / 128.0, -126), normal)


def _nearest_even_oracle(x: np.ndarray) -> np.ndarray:
    """Independent of `to_bf16`: of the two bf16 words around x (truncation and one ulp away from
    zero), the nearer in float64, ties to the even word."""
    lo = (np.ascontiguousarray(x, np.float32).view(np.uint32) >> 16).astype(np.int64)
    hi = lo + 1
    xf = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        dlo, dhi = np.abs(xf - _word_value(lo)), np.abs(xf - _word_value(hi))
    finite = np.isfinite(xf)
    pick_hi = finite & ((dhi < dlo) | ((dhi == dlo) & (lo % 2 == 1)))
    return np.where(pick_hi, hi, lo).astype(np.uint16)


def _samples(rng: np.random.Generator) -> np.ndarray:
    """Ordinary values, exact ties (low half 0x8000, odd and even), denormals, huge values that
    round to infinity, signed zeros and infinities."""
    words = rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2 ** 16, 200, dtype=np.uint32) << 16) | 0x8000
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001,
                        0x807FFFFF, 0x7F7F8000, 0x3F808000, 0x3F818000], np.uint32)
    out = np.concatenate([words, ties, special]).view(np.float32)
    return out[~np.isnan(out)]


def test_to_bf16_rounds_to_nearest_even_and_from_bf16_is_exact():
    x = _samples(np.random.default_rng(0))
    np.testing.assert_array_equal(to_bf16(x), _nearest_even_oracle(x))
    words = np.arange(2 ** 16, dtype=np.uint16)
    back = from_bf16(words)
    assert np.array_equal(back.view(np.uint32) >> 16, words.astype(np.uint32))
    finite = np.isfinite(back)
    np.testing.assert_array_equal(to_bf16(back[finite]), words[finite])  # bf16 values are fixed points


def test_to_bf16_keeps_nan_a_nan():
    nans = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FFFFFFF, 0xFF80FFFF], np.uint32).view(np.float32)
    out = from_bf16(to_bf16(nans))
    assert np.isnan(out).all()
    assert np.array_equal(np.signbit(out), np.signbit(nans))


@pytest.mark.parametrize("width", TARGETS)
def test_conversion_kernels_bit_exact(width):
    target = resolve_target(TARGETS[width])
    x = _samples(np.random.default_rng(1))[:4096].reshape(64, 64)
    x = np.concatenate([x, np.full((1, 64), np.nan, np.float32)])
    f = te.placeholder(x.shape, "float32", name="F")
    down = te.compute(x.shape, lambda i, j: E.call("f32_to_bf16", f[i, j]), name="down")
    up = te.compute(x.shape, lambda i, j: E.call("bf16_to_f32", down[i, j]), name="up")
    cdef = te.make_def([f], [down, up], "convert")
    code = emit_kernel(cdef, None, target)
    if not host_supports(target):
        pytest.skip(f"this host cannot run {TARGETS[width]}")
    words, back = load_kernel(code).run(x)
    np.testing.assert_array_equal(words, to_bf16(x))
    np.testing.assert_array_equal(back.view(np.uint32), from_bf16(to_bf16(x)).view(np.uint32))


def _tolerance(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """float32 accumulation of k exact products in any order: |error| <= k * eps32 * sum |a||b|
    (the first-order bound of recursive summation), elementwise."""
    return k * EPS32 * (np.abs(a) @ np.abs(b).T)


def _run_or_assemble(cdef, target, configs, arrays, check):
    """Run every config where this host has the target's features; else compile each one to
    assembly (the instructions must still be emitted) and skip the run, saying why."""
    runs = host_supports(target)
    for cfg in configs:
        code = emit_kernel(cdef, cfg, target)
        if runs:
            check(load_kernel(code).run(*arrays), cfg)
        else:
            assembly(code.code.text, target)
    if not runs:
        pytest.skip(f"compiled only: this host lacks features of {target} (e.g. avx512bf16)")


@pytest.mark.parametrize("width", TARGETS)
@pytest.mark.parametrize("shape", [(5, 37, 29), (16, 64, 48), (1, 256, 100)])
def test_dense_bf16_matches_float64_reference(shape, width):
    m, k, n = shape
    target = resolve_target(TARGETS[width])
    a, b = te.placeholder((m, k), "uint16", name="A"), te.placeholder((n, k), "uint16", name="B")
    cdef = te.make_def([a, b], dense_bf16(a, b), "bdense")
    rng = np.random.default_rng(m + k)
    aw, bw = to_bf16(rng.standard_normal((m, k))), to_bf16(rng.standard_normal((n, k)))
    af, bf = from_bf16(aw).astype(np.float64), from_bf16(bw).astype(np.float64)
    expect, tol = af @ bf.T, _tolerance(af, bf, k)
    space = template_for(cdef, target=target).space(cdef, target)
    configs = [None, space.get(space.size // 3), space.get(space.size - 1)]

    def check(got, cfg):
        assert got.dtype == np.float32
        assert (np.abs(got - expect) <= tol).all(), f"config {cfg}: max err {np.abs(got - expect).max()}"

    _run_or_assemble(cdef, target, configs, [aw, bw], check)


def test_dense_bf16_assembly_uses_vdpbf16ps_only_where_the_target_has_it():
    a, b = te.placeholder((8, 64), "uint16", name="A"), te.placeholder((64, 64), "uint16", name="B")
    cdef = te.make_def([a, b], dense_bf16(a, b), "bdense")
    bf16_t, avx2_t = resolve_target(TARGETS["bf16"]), resolve_target(TARGETS["avx2"])
    assert bf16_t.has("avx512bf16") and not avx2_t.has("avx512bf16")
    assert "vdpbf16ps" in assembly(emit_kernel(cdef, None, bf16_t).code.text, bf16_t)
    avx2 = assembly(emit_kernel(cdef, None, avx2_t).code.text, avx2_t)
    assert "vdpbf16ps" not in avx2 and "zmm" not in avx2 and "vfmadd" in avx2


def conv_oracle(x: np.ndarray, w: np.ndarray, s: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 cross-correlation on the bf16 values, and the same of the magnitudes (for the bound)."""
    def corr(xv, wv):
        n, _, h, wd = xv.shape
        o, kh, kw = wv.shape[0], wv.shape[2], wv.shape[3]
        xp = np.pad(xv, ((0, 0), (0, 0), (p, p), (p, p)))
        oh, ow = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
        out = np.zeros((n, o, oh, ow))
        for i in range(kh):
            for j in range(kw):
                out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + s * oh:s, j:j + s * ow:s], wv[:, :, i, j])
        return out
    return corr(x, w), corr(np.abs(x), np.abs(w))


# C H W O k s p: an odd C (the fp32 template's form), even Cs (channel pairs as the bf16 dot)
CONVS = [(3, 9, 11, 16, 3, 1, 1), (8, 10, 7, 32, 3, 2, 1), (16, 6, 9, 16, 1, 1, 0), (6, 5, 12, 40, 3, 1, 1)]


@pytest.mark.parametrize("width", TARGETS)
@pytest.mark.parametrize("case", CONVS, ids=[f"conv{i}" for i in range(len(CONVS))])
def test_conv_bf16_matches_float64_reference(case, width):
    c, h, w, o, k, s, p = case
    target = resolve_target(TARGETS[width])
    x, wt = te.placeholder((1, c, h, w), "uint16", name="X"), te.placeholder((o, c, k, k), "uint16", name="W")
    cdef = te.make_def([x, wt], conv2d_nchw_bf16(x, wt, s, p), "bconv")
    rng = np.random.default_rng(c + h)
    xw, ww = to_bf16(rng.standard_normal(x.shape)), to_bf16(rng.standard_normal(wt.shape))
    expect, mag = conv_oracle(from_bf16(xw).astype(np.float64), from_bf16(ww).astype(np.float64), s, p)
    tol = c * k * k * EPS32 * mag

    def check(got, cfg):
        assert (np.abs(got - expect) <= tol).all(), f"config {cfg}: max err {np.abs(got - expect).max()}"

    space = template_for(cdef, target=target).space(cdef, target)
    configs = [None, space.get(space.size // 2), space.get(space.size - 1)]
    _run_or_assemble(cdef, target, configs, [xw, ww], check)


@pytest.mark.parametrize("width", TARGETS)
def test_conv_bf16_odd_channels_with_a_constant_weight_take_pairs(width):
    """3 input channels (an RGB stem): the constant weight gains a zero channel, the pair template
    runs; the result is the 3-channel convolution's."""
    target = resolve_target(TARGETS[width])
    rng = np.random.default_rng(5)
    xw, ww = to_bf16(rng.standard_normal((1, 3, 12, 12))), to_bf16(rng.standard_normal((16, 3, 7, 7)))
    x = te.placeholder(xw.shape, "uint16", name="X")
    out = conv2d_nchw_bf16(x, te.constant(ww, "uint16", "W"), 2, 3)
    (weight,) = [t for t in te.topo_order([out]) if t.is_placeholder and t is not x]  # W with a zero channel
    np.testing.assert_array_equal(weight.value[:, :3], ww)
    assert weight.shape == (16, 4, 7, 7) and not weight.value[:, 3].any()
    cdef = te.make_def([x, weight], out, "stem")
    assert template_for(cdef, target=target).name == "conv2d_nchw_bf16"
    expect, mag = conv_oracle(from_bf16(xw).astype(np.float64), from_bf16(ww).astype(np.float64), 2, 3)
    tol = 3 * 7 * 7 * EPS32 * mag

    def check(got, cfg):
        assert (np.abs(got - expect) <= tol).all(), f"config {cfg}: max err {np.abs(got - expect).max()}"

    space = template_for(cdef, target=target).space(cdef, target)
    _run_or_assemble(cdef, target, [None, space.get(space.size - 1)], [xw, weight.value], check)


def test_conv_bf16_assembly_uses_vdpbf16ps_on_channel_pairs():
    x = te.placeholder((1, 16, 8, 8), "uint16", name="X")
    wt = te.placeholder((32, 16, 3, 3), "uint16", name="W")
    cdef = te.make_def([x, wt], conv2d_nchw_bf16(x, wt, 1, 1), "bconv")
    bf16_t, avx2_t = resolve_target(TARGETS["bf16"]), resolve_target(TARGETS["avx2"])
    assert template_for(cdef, target=bf16_t).name == "conv2d_nchw_bf16"
    assert "vdpbf16ps" in assembly(emit_kernel(cdef, None, bf16_t).code.text, bf16_t)
    avx2 = assembly(emit_kernel(cdef, None, avx2_t).code.text, avx2_t)
    assert "vdpbf16ps" not in avx2 and "zmm" not in avx2 and "vfmadd" in avx2
