"""Int8 conv (NCHWc) and dense kernels: bit-exact against an integer NumPy oracle, on a forced AVX2
and a forced AVX-512 VNNI target (run where this host has the features, else assembly only)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_supports
from autorelay.codegen.llvm.jit import assembly
from autorelay.kernel import emit_kernel, load_kernel
from autorelay.schedule.templates import template_for
from autorelay.te import tensor as te
from autorelay.te.nn_int8 import conv2d_nchwc_int8, dense_int8

pytestmark = pytest.mark.cpu
TARGETS = {"avx2": "llvm -mcpu=znver3", "vnni": "llvm -mcpu=znver5"}


def conv_oracle(x, w, s, p, pv):
    n, cb, h, wd, icb = x.shape
    ob, _, kh, kw, _, ocb, _ = w.shape
    xd = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * icb, h, wd).astype(np.int64)
    wt = w.transpose(0, 5, 1, 4, 6, 2, 3).reshape(ob * ocb, cb * icb, kh, kw).astype(np.int64)
    xp = np.pad(xd, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=pv)
    oh, ow = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
    out = np.zeros((n, ob * ocb, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + s * oh:s, j:j + s * ow:s], wt[:, :, i, j])
    return out.reshape(n, ob, ocb, oh, ow).transpose(0, 1, 3, 4, 2).astype(np.int32)


def _arrays(rng, shape, dtype, extreme):
    info = np.iinfo(dtype)
    if extreme:
        return rng.choice([info.min, info.max], shape).astype(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _check(cdef, target, arrays, expect, configs):
    runs = host_supports(target)
    for cfg in configs:
        code = emit_kernel(cdef, cfg, target)
        if runs:
            got = load_kernel(code).run(*arrays)
            np.testing.assert_array_equal(got, expect, err_msg=f"config {cfg}")
        else:
            assembly(code.code.text, target)


CONVS = [  # (data dtype, C blocks, H, W, icb, OC blocks, ocb, k, stride, pad, pad value, extreme)
    ("uint8", 2, 9, 11, 16, 2, 16, 3, 1, 1, 3, False),
    ("uint8", 1, 10, 7, 8, 3, 16, 3, 2, 1, 0, True),
    ("int8", 2, 6, 9, 8, 2, 16, 1, 1, 0, 0, True),
    ("uint8", 2, 7, 7, 16, 2, 16, 1, 2, 0, 0, False),
]


@pytest.mark.parametrize("width", TARGETS)
@pytest.mark.parametrize("case", CONVS, ids=[f"conv{i}" for i in range(len(CONVS))])
def test_conv_int8_bit_exact(case, width):
    dt, cb, h, w, icb, ob, ocb, k, s, p, pv, extreme = case
    target = resolve_target(TARGETS[width])
    x = te.placeholder((1, cb, h, w, icb), dt, name="X")
    wt = te.placeholder((ob, cb, k, k, icb // 4, ocb, 4), "int8", name="W")
    cdef = te.make_def([x, wt], conv2d_nchwc_int8(x, wt, s, p, pad_value=pv), "qconv")
    rng = np.random.default_rng(len(dt) + h)
    xa, wa = _arrays(rng, x.shape, dt, extreme), _arrays(rng, wt.shape, "int8", extreme)
    space = template_for(cdef, target=target).space(cdef, target)
    pick = random.Random(f"{case}-{width}")
    configs = [None, *(space.get(i) for i in pick.sample(range(space.size), min(2, space.size)))]
    _check(cdef, target, [xa, wa], conv_oracle(xa, wa, s, p, pv), configs)


@pytest.mark.parametrize("width", TARGETS)
@pytest.mark.parametrize("shape", [(5, 37, 29), (16, 64, 48)])
def test_dense_int8_bit_exact(shape, width):
    m, k, n = shape
    target = resolve_target(TARGETS[width])
    a, b = te.placeholder((m, k), "uint8", name="A"), te.placeholder((n, k), "int8", name="B")
    cdef = te.make_def([a, b], dense_int8(a, b), "qdense")
    rng = np.random.default_rng(m)
    aa, ba = _arrays(rng, a.shape, "uint8", False), _arrays(rng, b.shape, "int8", False)
    expect = (aa.astype(np.int64) @ ba.astype(np.int64).T).astype(np.int32)
    _check(cdef, target, [aa, ba], expect, [None])


def test_assembly_uses_the_targets_dot_instruction():
    x = te.placeholder((1, 2, 8, 8, 16), "uint8", name="X")
    wt = te.placeholder((2, 2, 3, 3, 4, 16, 4), "int8", name="W")
    cdef = te.make_def([x, wt], conv2d_nchwc_int8(x, wt, 1, 1), "qconv")
    vnni = assembly(emit_kernel(cdef, None, resolve_target(TARGETS["vnni"])).code.text,
                    resolve_target(TARGETS["vnni"]))
    assert "vpdpbusd" in vnni
    avx2_t = resolve_target(TARGETS["avx2"])
    avx2 = assembly(emit_kernel(cdef, None, avx2_t).code.text, avx2_t)
    assert "vpmaddwd" in avx2 and "zmm" not in avx2 and "vpmaddubsw" not in avx2


@pytest.mark.parametrize("width", TARGETS)
def test_conv_int8_with_fused_requantize_epilogue(width):
    """An injective int32 -> uint8 epilogue (bias, fixed-point rescale, clip, cast) fused after the
    reduction reads the accumulator, as the fp32 templates' bias/relu does."""
    from autorelay.te import expr as E

    target = resolve_target(TARGETS[width])
    x = te.placeholder((1, 2, 7, 9, 16), "uint8", name="X")
    wt = te.placeholder((2, 2, 3, 3, 4, 16, 4), "int8", name="W")
    acc = conv2d_nchwc_int8(x, wt, 1, 1, pad_value=5)

    def body(*i):
        v = E.cast(acc[i] + E.const(1000, "int32"), "int64") * E.const(1518500250, "int64")
        v = (v + E.const(1 << 38, "int64")) // E.const(1 << 39, "int64") + E.const(7, "int64")
        return E.cast(E.minimum(E.maximum(v, E.const(0, "int64")), E.const(255, "int64")), "uint8")

    out = te.compute(acc.shape, body, name="requant")
    cdef = te.make_def([x, wt], out, "qconv_rq")
    rng = np.random.default_rng(3)
    xa, wa = _arrays(rng, x.shape, "uint8", False), _arrays(rng, wt.shape, "int8", False)
    r = conv_oracle(xa, wa, 1, 1, 5).astype(np.int64) + 1000
    expect = np.clip(((r * 1518500250 + (1 << 38)) >> 39) + 7, 0, 255).astype(np.uint8)
    _check(cdef, target, [xa, wa], expect, [None])


def _narrow_weight(rng, shape):
    """7-bit weights with the extremes present: every adjacent pair sums to at most 128."""
    w = rng.integers(-64, 64, shape).astype(np.int8)
    w.reshape(-1)[:2] = -64  # |-64| + |-64| = 128, the largest sum the promise allows
    return w


@pytest.mark.parametrize("width", TARGETS)
@pytest.mark.parametrize("case", CONVS[:2], ids=["conv0", "conv1"])
def test_narrow_weights_take_vpmaddubsw_on_avx2_bit_exact(case, width):
    """With a 7-bit weight, AVX2 takes the group of 4 in vpmaddubsw + vpmaddwd; extreme unsigned
    data (255) times the extreme weights must not saturate. VNNI keeps vpdpbusd."""
    from autorelay.te.nn_int8 import narrow_pairs

    dt, cb, h, w, icb, ob, ocb, k, s, p, pv, _ = case
    target = resolve_target(TARGETS[width])
    rng = np.random.default_rng(7)
    x = te.placeholder((1, cb, h, w, icb), dt, name="X")
    wt = te.placeholder((ob, cb, k, k, icb // 4, ocb, 4), "int8", name="W")
    wa = _narrow_weight(rng, wt.shape)
    assert narrow_pairs(wa)
    cdef = te.make_def([x, wt], conv2d_nchwc_int8(x, wt, s, p, pad_value=pv, narrow=True), "qconv")
    xa = np.full(x.shape, 255, np.uint8)
    xa.reshape(-1)[1::3] = rng.integers(0, 256, xa.size)[1::3].astype(np.uint8)
    space = template_for(cdef, target=target).space(cdef, target)
    assert "pairs" not in [k.name for k in space.knobs]  # a narrow weight needs no re-pack
    configs = [None, *(space.get(i) for i in random.Random(width).sample(range(space.size), 2))]
    _check(cdef, target, [xa, wa], conv_oracle(xa, wa, s, p, pv), configs)
    asm = assembly(emit_kernel(cdef, None, target).code.text, target)
    if width == "avx2":
        assert "vpmaddubsw" in asm and "zmm" not in asm
    else:
        assert "vpdpbusd" in asm and "vpmaddubsw" not in asm


def test_narrow_pairs_is_the_saturation_bound() -> None:
    from autorelay.te.nn_int8 import narrow_pairs

    assert narrow_pairs(np.array([[-64, -64, 63, 63]], np.int8))
    assert not narrow_pairs(np.array([[-64, -65, 0, 0]], np.int8))  # 255 * 129 > 32767
    assert narrow_pairs(np.array([[-128, 0, 0, 0]], np.int8))  # 255 * -128 still fits int16
    assert not narrow_pairs(np.array([[-128, -1, 0, 0]], np.int8))  # int8 abs must not wrap
    assert not narrow_pairs(np.zeros((2, 3), np.int8))  # an odd group has no pairs


@pytest.mark.parametrize("width", TARGETS)
@pytest.mark.parametrize("shape", [(5, 37, 29), (16, 64, 48)])
def test_narrow_dense_takes_vpmaddubsw_on_avx2_bit_exact(shape, width):
    """A 7-bit dense weight (odd K padded with zeros) with saturating-edge data: bit-exact, and the
    byte multiply-add on AVX2 only."""
    m, k, n = shape
    target = resolve_target(TARGETS[width])
    a, b = te.placeholder((m, k), "uint8", name="A"), te.placeholder((n, k), "int8", name="B")
    cdef = te.make_def([a, b], dense_int8(a, b, narrow=True), "qdense")
    rng = np.random.default_rng(k)
    aa = np.full(a.shape, 255, np.uint8)
    aa[:, 1::2] = rng.integers(0, 256, aa[:, 1::2].shape).astype(np.uint8)
    ba = _narrow_weight(rng, b.shape)
    expect = (aa.astype(np.int64) @ ba.astype(np.int64).T).astype(np.int32)
    _check(cdef, target, [aa, ba], expect, [None])
    asm = assembly(emit_kernel(cdef, None, target).code.text, target)
    assert ("vpmaddubsw" in asm) == (width == "avx2")
