"""The int32 form of the fixed-point rescale (`qnn_fixed.rescale32_expr`) equals the int64 rule bit
for bit: the arithmetic itself over the whole int32 range, and compiled `qnn.requantize` kernels
(per tensor, per channel) against the reference interpreter. Both vector widths compile on every
host; each runs where this host has its CPU's features, and is skipped, naming the ones it lacks,
elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
from host_widths import run_here_or_skip

import autorelay
from autorelay.op import qnn_fixed as F

pytestmark = pytest.mark.cpu

EDGES = np.array([-2**31, -2**31 + 1, -1, 0, 1, 2**31 - 1, 2**31 - 2, -2**30, 2**30], np.int64)


def _int32_rule(x: np.ndarray, m: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """rescale32_expr in NumPy: the high word of the product, then the short rounding shift."""
    mm, add, rs = F.int32_operands(m, shift)
    hi = (x.astype(np.int64) * mm.astype(np.int64)) >> 32
    return (hi + add) >> rs


def test_high_word_rule_equals_the_int64_rule():
    rng = np.random.default_rng(0)
    ratios = np.exp(rng.uniform(np.log(2.0**-31), np.log(0.2499), 400))
    x = np.concatenate([EDGES, rng.integers(-2**31, 2**31, 20000)])
    for r in ratios:
        m, shift = F.multiplier_shift(r)
        assert F.int32_exact(shift, "UPWARD")
        np.testing.assert_array_equal(_int32_rule(x, m, shift), F.rescale(x, m, shift))


def test_the_int32_form_is_only_used_where_exact():
    assert not F.int32_exact(F.multiplier_shift(0.3)[1], "UPWARD")  # shift 32: the low word counts
    assert not F.int32_exact(F.multiplier_shift(0.01)[1], "TONEAREST")
    assert F.int32_exact(F.multiplier_shift(0.2)[1], "UPWARD")


def _requantize(shape, in_scale, out_scale, out_zp, axis=-1) -> autorelay.IRModule:
    args = f"%x: Tensor[{shape}, int32], %s: Tensor[{np.shape(in_scale)}, float32]"
    body = f'qnn.requantize(%x, %s, 0, {out_scale}f, {out_zp}, axis={axis}, out_dtype="uint8")'
    text = f'#[version = "0.0.5"]\ndef @main({args}) {{ {body} }}'
    return autorelay.parse(text)


@pytest.mark.parametrize("target", ["llvm -mcpu=znver3", "llvm -mcpu=znver5"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_compiled_requantize_is_bit_exact(target, per_channel):
    rng = np.random.default_rng(1)
    shape = (4, 37)
    in_scale = (rng.uniform(1e-6, 2e-3, shape[-1]) if per_channel else np.float64(4e-4)).astype("float32")
    mod = _requantize(shape, in_scale, 0.05, 7)
    x = np.concatenate([np.resize(EDGES, shape[-1])[None], rng.integers(-2**31, 2**31, (3, shape[-1]))])
    x = x.astype("int32")
    exe = autorelay.build(mod, target=target, threads=1, params={"s": in_scale})
    run_here_or_skip(target)
    want = np.asarray(autorelay.evaluate(mod, x, in_scale))
    np.testing.assert_array_equal(exe(x), want)
