"""The bf16 ops (`autorelay.op.bf16`) lowered through their registered computes and compiled for
this host, under the default config and a random one from the template's space, against the ops'
NumPy references: the conversions bit for bit, dense and conv within float32 accumulation's bound."""

from __future__ import annotations

import random

import numpy as np
import pytest
from lower_helpers import op_function, reference_outputs, run_lowered, tensor

from autorelay.lower.lower import lower
from autorelay.op.bf16 import from_bf16, to_bf16
from autorelay.schedule.templates import template_for

pytestmark = pytest.mark.cpu
EPS32 = float(np.finfo(np.float32).eps)


def _words(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return to_bf16(rng.standard_normal(shape))


def _both(fn, inputs: list[np.ndarray], seed: str) -> list[np.ndarray]:
    return [run_lowered(fn, inputs)[0], run_lowered(fn, inputs, sample=random.Random(seed))[0]]


def test_quantize_and_dequantize_computes_are_bit_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 37)).astype("float32") * np.float32(1e3)
    x[0, :4] = [np.nan, np.inf, -np.inf, 1e-40]
    fn = op_function("bf16.quantize", [tensor(x.shape)], {})
    (want,) = reference_outputs(fn, [x])
    assert want.dtype == np.uint16
    for got in _both(fn, [x], "q"):
        np.testing.assert_array_equal(got, want)
    w = np.arange(0, 2 ** 16, 7, dtype=np.uint16).reshape(-1, 1)
    fn = op_function("bf16.dequantize", [tensor(w.shape, "uint16")], {})
    (want,) = reference_outputs(fn, [w])
    for got in _both(fn, [w], "d"):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # NaN payloads too


def test_dense_compute():
    rng = np.random.default_rng(1)
    a, b = _words(rng, (7, 45)), _words(rng, (33, 45))
    fn = op_function("bf16.dense", [tensor(a.shape, "uint16"), tensor(b.shape, "uint16")], {})
    (want,) = reference_outputs(fn, [a, b])
    bound = 45 * EPS32 * (np.abs(from_bf16(a)).astype(np.float64) @ np.abs(from_bf16(b)).T)
    for got in _both(fn, [a, b], "dense"):
        assert got.dtype == np.float32 and (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize(("channels", "const_weight"), [(6, False), (3, True), (3, False)],
                         ids=["pairs", "odd-constant-weight", "odd-run-time-weight"])
def test_conv2d_compute(channels: int, const_weight: bool):
    """Even channels and an odd count with a constant weight take the pair template; an odd count
    with a run-time weight the fp32 one."""
    rng = np.random.default_rng(channels)
    x, w = _words(rng, (1, channels, 9, 10)), _words(rng, (20, channels, 3, 3))
    attrs = {"strides": [2, 1], "padding": [1, 1]}
    wt = w if const_weight else tensor(w.shape, "uint16")
    fn = op_function("bf16.conv2d", [tensor(x.shape, "uint16"), wt], attrs)
    inputs = [x] if const_weight else [x, w]
    pairs = channels % 2 == 0 or const_weight
    assert template_for(lower(fn).cdef).name == ("conv2d_nchw_bf16" if pairs else "conv2d_nchw")
    (want,) = reference_outputs(fn, inputs)
    mag = op_function("bf16.conv2d", [tensor(x.shape, "uint16"), tensor(w.shape, "uint16")], attrs)
    (bound,) = reference_outputs(mag, [to_bf16(np.abs(from_bf16(x))), to_bf16(np.abs(from_bf16(w)))])
    for got in _both(fn, inputs, f"conv{channels}{const_weight}"):
        assert got.shape == want.shape == (1, 20, 5, 10)
        assert (np.abs(got - want) <= channels * 9 * EPS32 * bound.astype(np.float64) * 1.01).all()
