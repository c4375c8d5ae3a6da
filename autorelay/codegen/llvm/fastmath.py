"""Vectorised float32 `exp`, `erf` and `tanh` for the LLVM backend, in plain LLVM IR.

Why: no vector math library is linked into the JIT, so `llvm.exp.v16f32` and a libm `erff` were
split into one scalar call per lane. That made `softmax` and GELU (`erf`) the slowest kernels of a
transformer layer, slower than its GEMMs. These approximations are a handful of vector
multiply-adds each, and stay as accurate as float32 math libraries are:

* `exp`: x = n·ln2 + r with n = round(x·log2 e) and |r| ≤ ln2/2 (ln2 split in two parts so n·ln2
  is exact); e^r = 1 + r + r²·P(r); then 2^n is applied as two exponent-field scalings, so the
  whole float32 range is exact at its ends, subnormal results included. At most 1 ulp.
* `erf`, `tanh`: odd rationals x·P(x²)/Q(x²) on [0, 4] and [0, 9], clamped to ±1 beyond (where the
  float32 result is ±1). At most ~5 ulp; the rounding of the float32 evaluation dominates.

The coefficients were fitted here (near-minimax relative error on Chebyshev nodes, iteratively
re-weighted least squares: `python -m autorelay.codegen.llvm.fastmath_fit` prints them again).
float64 keeps the libm and intrinsic calls. NaN in gives NaN out; ±inf gives the limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autorelay.codegen.llvm.values import Val, float_hex, splat

if TYPE_CHECKING:
    from autorelay.codegen.llvm.exprs import ExprEmitter

FAST_FUNCS = ("exp", "erf", "tanh")

LOG2E = 1.4426950408889634
LN2_HI = 0.693115234375  # ln 2 to 12 significant bits: n·LN2_HI is exact for |n| < 2^12
LN2_LO = 3.194618329871446e-05  # ln 2 - LN2_HI
EXP_LO, EXP_HI = -104.0, 88.72283935546875  # e^x below EXP_LO rounds to 0; above EXP_HI overflows
# (e^r - 1 - r) / r² on [-ln2/2, ln2/2], increasing powers of r
EXP_POLY = (0.5000000012722577, 0.16666666079261222, 0.04166646993676206, 0.008333513112966451,
            0.0013933229575806916, 0.00019755793494787753)
# erf(x) ≈ x·P(x²)/Q(x²) on [0, 4]; tanh(x) on [0, 9]; increasing powers of x²
ERF_CLAMP = 4.0
ERF_P = (1.128379139504446, 0.19354103498456837, 0.05310120641526828, 0.0038831682335029667,
         0.00028456141716692537, 1.9868071011975505e-06)
ERF_Q = (1.0, 0.5048538336507642, 0.11534832806962954, 0.015206901496707807,
         0.0011855274224684994, 3.7420195192757144e-05)
TANH_CLAMP = 9.0
TANH_P = (0.9999999795954244, 0.1338104387971617, 0.0034956091533635447, 2.0609403655748335e-05,
          1.3355061526823916e-08)
TANH_Q = (1.0, 0.46714359510523296, 0.025877063822776453, 0.0003285668131572039,
          7.776731539844338e-07)


class _Vec:
    """Float32 IR helpers for one value shape (`lanes` 0 is scalar)."""

    def __init__(self, em: ExprEmitter, lanes: int) -> None:
        self.em, self.lanes = em, lanes
        self.f, self.i = em.ty("float32", lanes), em.ty("int32", lanes)

    def c(self, value: float) -> str:
        return splat(float_hex(value, "float32"), "float", self.lanes)

    def ci(self, value: int) -> str:
        return splat(str(value), "i32", self.lanes)

    def f_op(self, text: str) -> str:
        return self.em.op(text, "float32", self.lanes).ref

    def i_op(self, text: str) -> str:
        return self.em.op(text, "int32", self.lanes).ref

    def mul(self, a: str, b: str) -> str:
        return self.f_op(f"fmul contract {self.f} {a}, {b}")

    def add(self, a: str, b: str) -> str:
        return self.f_op(f"fadd contract {self.f} {a}, {b}")

    def sub(self, a: str, b: str) -> str:
        return self.f_op(f"fsub contract {self.f} {a}, {b}")

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.em.op(f"fcmp {pred} {self.f} {a}, {b}", "bool", self.lanes).ref

    def select(self, cond: str, a: str, b: str) -> str:
        cond_t = self.em.ty("bool", self.lanes)
        return self.f_op(f"select {cond_t} {cond}, {self.f} {a}, {self.f} {b}")

    def clamp(self, x: str, lo: float, hi: float) -> str:
        """min(max(x, lo), hi) by ordered compares, so a NaN passes through unchanged."""
        x = self.select(self.cmp("olt", x, self.c(lo)), self.c(lo), x)
        return self.select(self.cmp("ogt", x, self.c(hi)), self.c(hi), x)

    def horner(self, t: str, coefs: tuple[float, ...]) -> str:
        acc = self.c(coefs[-1])
        for k in coefs[-2::-1]:
            acc = self.add(self.mul(acc, t), self.c(k))
        return acc

    def intrinsic(self, name: str, x: str) -> str:
        return self.em.intrinsic(name, [Val(x, "float32", self.lanes)], "float32", self.lanes).ref

    def pow2(self, n: str) -> str:
        """2^n as a float from int32 `n` in [-126, 127]: n + 127 in the exponent field."""
        biased = self.i_op(f"add {self.i} {n}, {self.ci(127)}")
        bits = self.i_op(f"shl {self.i} {biased}, {self.ci(23)}")
        return self.f_op(f"bitcast {self.i} {bits} to {self.f}")


def fast_exp(em: ExprEmitter, x: Val) -> Val:
    v = _Vec(em, x.lanes)
    xc = v.clamp(x.ref, EXP_LO, EXP_HI)
    n = v.intrinsic("roundeven", v.mul(xc, v.c(LOG2E)))
    r = v.sub(v.sub(xc, v.mul(n, v.c(LN2_HI))), v.mul(n, v.c(LN2_LO)))
    p = v.add(v.add(v.mul(v.mul(r, r), v.horner(r, EXP_POLY)), r), v.c(1.0))
    # 2^n in two factors: n ranges over [-150, 128], beyond one exponent field's normal range
    ni = v.i_op(f"fptosi {v.f} {n} to {v.i}")
    half = v.i_op(f"ashr {v.i} {ni}, {v.ci(1)}")
    rest = v.i_op(f"sub {v.i} {ni}, {half}")
    y = v.mul(v.mul(p, v.pow2(half)), v.pow2(rest))
    y = v.select(v.cmp("ogt", x.ref, v.c(EXP_HI)), v.c(float("inf")), y)
    y = v.select(v.cmp("olt", x.ref, v.c(EXP_LO)), v.c(0.0), y)
    return Val(v.select(v.cmp("uno", x.ref, x.ref), x.ref, y), "float32", x.lanes)


def _odd_rational(em: ExprEmitter, x: Val, clamp: float, p: tuple[float, ...], q: tuple[float, ...]) -> Val:
    """x·P(x²)/Q(x²) with x clamped to ±`clamp` and the result to [-1, 1]."""
    v = _Vec(em, x.lanes)
    xc = v.clamp(x.ref, -clamp, clamp)
    t = v.mul(xc, xc)
    y = v.f_op(f"fdiv {v.f} {v.mul(xc, v.horner(t, p))}, {v.horner(t, q)}")
    return Val(v.clamp(y, -1.0, 1.0), "float32", x.lanes)


def emit_fast(em: ExprEmitter, name: str, x: Val) -> Val:
    """`name` (one of FAST_FUNCS) of a float32 value, scalar or vector."""
    if name == "exp":
        return fast_exp(em, x)
    if name == "erf":
        return _odd_rational(em, x, ERF_CLAMP, ERF_P, ERF_Q)
    return _odd_rational(em, x, TANH_CLAMP, TANH_P, TANH_Q)
