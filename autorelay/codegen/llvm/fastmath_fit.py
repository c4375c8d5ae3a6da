"""How the coefficients of `fastmath` were fitted; run it to print them and their float32 error.

    python -m autorelay.codegen.llvm.fastmath_fit

Each fit minimises the relative error on Chebyshev nodes by least squares, re-weighted a few
dozen times towards the largest residuals (a cheap route close to the minimax fit). Rationals are
fitted linearised (Sanathanan-Koerner: divide each row by the previous Q) in the scaled variable
(x/X)², which keeps the system well conditioned, then scaled back.
"""

from __future__ import annotations

import math

import numpy as np


def chebyshev_nodes(a: float, b: float, n: int) -> np.ndarray:
    k = np.arange(n)
    return (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / n)


def fit_exp_poly(degree: int = 5, n: int = 4000, rounds: int = 30) -> np.ndarray:
    """(e^r - 1 - r)/r² on [-ln2/2, ln2/2], weighted by 1/e^r (relative error of e^r)."""
    h = math.log(2) / 2
    r = chebyshev_nodes(-h, h, n)
    y = (np.expm1(r) - r) / (r * r)
    weight = np.exp(-r)
    basis = np.vander(r, degree + 1, increasing=True)
    w = weight.copy()
    for _ in range(rounds):
        c, *_ = np.linalg.lstsq(basis * w[:, None], y * w, rcond=None)
        err = np.abs(basis @ c - y) * weight
        w = weight * np.sqrt(err / err.max() + 1e-3)
    return c


def fit_odd_rational(f, x_max: float, dp: int, dq: int, n: int = 8000,
                     rounds: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """x·P(x²)/Q(x²) ≈ f(x) on (0, x_max], Q(0) = 1; coefficients in increasing powers of x²."""
    x = np.abs(chebyshev_nodes(0.0, x_max, n)) + 1e-9
    y = f(x)
    u = (x / x_max) ** 2
    pu, qu = np.vander(u, dp + 1, increasing=True), np.vander(u, dq + 1, increasing=True)
    system = np.hstack([x[:, None] * pu, -(y[:, None] * qu[:, 1:])])
    weight, q_prev = 1 / np.abs(y), np.ones_like(x)
    w = weight.copy()
    for k in range(rounds):
        scale = w / np.abs(q_prev)
        c, *_ = np.linalg.lstsq(system * scale[:, None], y * scale, rcond=None)
        q_prev = qu @ np.r_[1.0, c[dp + 1:]]
        err = np.abs(x * (pu @ c[:dp + 1]) / q_prev - y) * weight
        if k >= 20:
            w = w * np.sqrt(err / err.max() + 0.05)
            w /= w.max()
    powers_p, powers_q = np.arange(dp + 1), np.arange(dq + 1)
    return c[:dp + 1] / x_max ** (2 * powers_p), np.r_[1.0, c[dp + 1:]] / x_max ** (2 * powers_q)


def main() -> None:
    erf = np.vectorize(math.erf)
    np.set_printoptions(precision=17)
    print("EXP_POLY", tuple(float(v) for v in fit_exp_poly()))
    for name, f, x_max, (dp, dq) in (("ERF", erf, 4.0, (5, 5)), ("TANH", np.tanh, 9.0, (4, 4))):
        p, q = fit_odd_rational(f, x_max, dp, dq)
        print(f"{name}_P", tuple(float(v) for v in p))
        print(f"{name}_Q", tuple(float(v) for v in q))


if __name__ == "__main__":
    main()
