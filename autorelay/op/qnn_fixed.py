"""The one rounding rule of the quantized ops: fixed-point rescaling, then saturation.

Changing a quantized value's scale multiplies it by a real ratio (`input_scale / output_scale`;
`input_scale * kernel_scale / output_scale` after a convolution). Every qnn reference and every
qnn kernel computes that product the same way, in integers, so compiled kernels equal the
references bit for bit (hardware accelerators and gemmlowp-style libraries do the same):

* the ratio (float64 of float32 scales) becomes `m * 2**-shift`, `m` an integer in [2**30, 2**31)
  (31 significant bits, the ratio's float64 mantissa rounded to nearest) and `1 <= shift <= 62`;
* `rescale(x) = (x * m + 2**(shift - 1)) >> shift` in int64 (`x` is an int32 value, so the
  product fits): the real product rounded half toward +infinity ("UPWARD", Relay's default), or
  with "TONEAREST" the magnitude rounded so halves go away from zero;
* `saturate` clips to the output type's range.

A ratio below 2**-31 or at least 2**29 is refused: no sensible pair of scales gives one, and
outside that range `m` and `shift` would not fit the int64 arithmetic above.

Kernels compute the same rule in int32 lanes where it is exact (`rescale32_expr`): for an int32
`x`, UPWARD rounding and `shift >= 33` (ratios below 1/4, as after every convolution), the high
word `hi = (x * m) >> 32` already decides the result, `(hi + 2**(shift - 33)) >> (shift - 32)`:
the low word adds less than one unit of `hi`, which the remaining shift of at least one drops. A
vector of int32 products' high words is one instruction pair (`vpmuldq`), where the int64 form
doubles every vector and emulates the 64-bit multiply.
"""

from __future__ import annotations

import numpy as np

from autorelay.te import expr as E

ROUNDINGS = ("UPWARD", "TONEAREST")
_MIN_RATIO, _MAX_RATIO = 2.0**-31, 2.0**29


class QuantizationError(ValueError):
    """A scale ratio the fixed-point rule cannot represent."""


def multiplier_shift(ratio: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """(m, shift) int64 arrays with `ratio ~= m * 2**-shift`, `m` in [2**30, 2**31)."""
    r = np.asarray(ratio, dtype=np.float64)
    bad = ~np.isfinite(r) | (r < _MIN_RATIO) | (r >= _MAX_RATIO)
    if np.any(bad):
        raise QuantizationError(
            f"scale ratio {r[bad].ravel()[0]!r} cannot be rescaled in fixed point "
            f"(must lie in [2**-31, 2**29); check the scales for zeros or extreme values)"
        )
    frac, exp = np.frexp(r)  # r = frac * 2**exp, frac in [0.5, 1)
    m = np.round(np.ldexp(frac, 31)).astype(np.int64)  # in [2**30, 2**31]
    shift = (31 - exp).astype(np.int64)
    top = m == 2**31  # the mantissa rounded up to the next power of two
    m = np.where(top, 2**30, m)
    shift = np.where(top, shift - 1, shift)
    return m, shift


def rescale(x: np.ndarray, m: np.ndarray, shift: np.ndarray, rounding: str = "UPWARD") -> np.ndarray:
    """`x * m * 2**-shift` rounded by `rounding`, in int64 (x: any integer array, |x| < 2**32)."""
    x = np.asarray(x, dtype=np.int64)
    m, shift = np.asarray(m, np.int64), np.asarray(shift, np.int64)
    half = np.left_shift(np.int64(1), shift - 1)
    if rounding == "TONEAREST":
        mag = (np.abs(x) * m + half) >> shift
        return np.where(x < 0, -mag, mag)
    if rounding != "UPWARD":
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return (x * m + half) >> shift


def _half_expr(shift: E.Expr) -> E.Expr:
    """2**(shift - 1), the rounding half, for an int64 shift in [1, 62]."""
    return E.shr(E.const(2**62, "int64"), E.const(63, "int64") - shift)


def rescale_expr(x: E.Expr, m: E.Expr, shift: E.Expr, rounding: str = "UPWARD") -> E.Expr:
    """`rescale` as a tensor expression (every operand widened to int64)."""
    x, m, shift = (E.cast(v, "int64") for v in (x, m, shift))
    half = _half_expr(shift)
    if rounding == "TONEAREST":
        mag = E.shr(E.select(x < 0, E.const(0, "int64") - x, x) * m + half, shift)
        return E.select(x < 0, E.const(0, "int64") - mag, mag)
    if rounding != "UPWARD":
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return E.shr(x * m + half, shift)


# A sum of two rescaled 8-bit differences (|q - zp| < 2**8) over one shift: multipliers below
# 2**(31 + 22) keep each product below 2**61, so both and the rounding half fit int64.
SUM_HEADROOM = 22


def common_shift(m_a: np.ndarray, s_a: np.ndarray, m_b: np.ndarray,
                 s_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two ratios `m * 2**-s` over one shift, `(m_a', m_b', s)`, so that a sum of two rescaled
    values rounds once (`rescale_sum`), as a real sum of the two products would, instead of once
    per term. The shift is the larger of the two, or `SUM_HEADROOM` above the smaller where the
    ratios differ by more than that: the smaller ratio's multiplier then loses its low bits
    (rounded), an error below 2**-22 of a unit for every 8-bit input."""
    m_a, s_a, m_b, s_b = (np.asarray(v, np.int64) for v in (m_a, s_a, m_b, s_b))
    s = np.minimum(np.maximum(s_a, s_b), np.minimum(s_a, s_b) + SUM_HEADROOM)

    def over(m: np.ndarray, sh: np.ndarray) -> np.ndarray:
        up = np.left_shift(m, np.maximum(s - sh, 0))
        drop = np.maximum(sh - s, 0)
        down = (m + (np.left_shift(np.int64(1), drop) >> 1)) >> drop
        return np.where(sh <= s, up, down)

    return over(m_a, s_a), over(m_b, s_b), s


def rescale_sum(x_a: np.ndarray, m_a: np.ndarray, x_b: np.ndarray, m_b: np.ndarray,
                shift: np.ndarray) -> np.ndarray:
    """`x_a * m_a + x_b * m_b` times `2**-shift`, rounded once half toward +infinity (UPWARD), in
    int64 (multipliers and shift from `common_shift`)."""
    shift = np.asarray(shift, np.int64)
    half = np.left_shift(np.int64(1), shift - 1)
    return (np.asarray(x_a, np.int64) * m_a + np.asarray(x_b, np.int64) * m_b + half) >> shift


def rescale_sum_expr(x_a: E.Expr, m_a: E.Expr, x_b: E.Expr, m_b: E.Expr, shift: E.Expr) -> E.Expr:
    """`rescale_sum` as a tensor expression (every operand widened to int64)."""
    x_a, m_a, x_b, m_b, shift = (E.cast(v, "int64") for v in (x_a, m_a, x_b, m_b, shift))
    half = _half_expr(shift)
    return E.shr(x_a * m_a + x_b * m_b + half, shift)


INT32_MIN_SHIFT = 33


def int32_exact(shift: np.ndarray, rounding: str) -> bool:
    """Whether `rescale32_expr` equals `rescale` for every int32 input under these shifts."""
    return rounding == "UPWARD" and int(np.min(shift)) >= INT32_MIN_SHIFT


def int32_operands(m: np.ndarray, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The int32 constants of `rescale32_expr`: multiplier, rounding addend 2**(shift - 33) and the
    remaining shift (shift - 32)."""
    s = np.asarray(shift, np.int64)
    return (np.asarray(m, np.int64).astype(np.int32), np.left_shift(1, s - 33).astype(np.int32),
            (s - 32).astype(np.int32))


def rescale32_expr(x: E.Expr, m: E.Expr, addend: E.Expr, rshift: E.Expr) -> E.Expr:
    """`rescale` (UPWARD, shift >= 33) of an int32 `x` in int32 (see the module docstring)."""
    wide = E.cast(x, "int64") * E.cast(m, "int64")
    hi = E.cast(E.shr(wide, E.const(32, "int64")), "int32")  # a multiply-high to LLVM
    return E.shr(hi + addend, rshift)


def saturate(v: np.ndarray, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def saturate_expr(v: E.Expr, dtype: str) -> E.Expr:
    info = np.iinfo(dtype)
    lo, hi = E.const(int(info.min), v.dtype), E.const(int(info.max), v.dtype)
    return E.cast(E.minimum(E.maximum(v, lo), hi), dtype)
