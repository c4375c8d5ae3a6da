"""Winograd F(2x2, 3x3) convolution (Lavin & Gray, 2016) as one three-stage compute.

A stride-1 3x3 convolution computes each 2x2 output tile from a 4x4 input tile with 16
multiplications per channel pair instead of 36, so the multiply-add work falls 2.25x:

    V = Bt d B      (input transform, per channel and tile: adds only)
    M = sum_c U[c] * V[c]   for each of the 16 positions (16 independent GEMMs)
    Y = At M A      (output transform: adds only)

with U = G g Gt the transformed weight, folded once at build time (`weight_transform`).

The transform matrices are the usual ones except that the last row of Bt and of G is negated:
every row of Bt is then `d[q] +- d[partner(q)]` (partner = 2, 2, 1, 1; `+` only for q = 1), so the
input transform is two loads and one add per row with the row index as the only parameter; the
sign flips cancel in U * V. Once the template unrolls the 16 positions, the selects below fold to
straight-line adds.

Layouts keep every transform's inner loop contiguous over tiles along a row: V and M are
[16, C or K, P] with P = N * TH * TW tiles in row-major order, so the GEMM's column vectors are
tiles and the output transform reads M's columns as vectors.
"""

from __future__ import annotations

import numpy as np

from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.nn import _pad4, pad
from autorelay.te.tensor import Tensor

TILE = 2  # output tile edge (m); input tile edge is m + 2 = 4
ALPHA = 4  # transformed tile edge
POSITIONS = ALPHA * ALPHA

# G with its last row negated (see the module docstring): U = G g Gt.
G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, -1.0]])


def tiles(oh: int, ow: int) -> tuple[int, int]:
    """Tile rows and columns covering an oh x ow output."""
    return -(-oh // TILE), -(-ow // TILE)


def weight_transform_np(w: np.ndarray) -> np.ndarray:
    """[K, C, 3, 3] -> U [16, K, C] (position-major, so each GEMM's weight is one contiguous block)."""
    u = np.einsum("ar,kcrs,bs->abkc", G, w.astype(np.float64), G)
    return u.reshape(POSITIONS, w.shape[0], w.shape[1]).astype(w.dtype)


def _partner(q: E.Expr) -> E.Expr:
    return 2 - q // 2


def _pm(q: E.Expr, a: E.Expr, b: E.Expr) -> E.Expr:
    """a + b for row 1 of Bt, a - b for the others."""
    return E.select(E.compare("eq", q, 1), a + b, a - b)


def conv2d_winograd_nchw(
    data: Tensor, u: Tensor, padding=1, name: str = "conv2d_winograd"
) -> Tensor:
    """data [N, C, H, W], transformed weight U [16, K, C] -> [N, K, OH, OW] (stride 1, 3x3)."""
    n, c, h, w = data.shape
    positions, k, cu = u.shape
    if positions != POSITIONS or cu != c:
        raise ValueError(f"conv2d_winograd: data {data.shape} and transformed weight {u.shape} disagree")
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = tiles(oh, ow)
    p_total = n * th * tw
    # pad so that every 4x4 input tile lies inside (the last tile may overhang an odd output)
    xp = pad(data, (0, 0, pt, pl), (0, 0, TILE * th + 2 - h - pt, TILE * tw + 2 - w - pl),
             name=f"{name}_pad")

    def input_tile(z: E.Expr, ch: E.Expr, p: E.Expr) -> E.Expr:
        xi, nu = z // ALPHA, z % ALPHA
        tx, rest = p % tw, p // tw
        ty, b = rest % th, rest // th
        r0, c0 = ty * TILE, tx * TILE

        def row(a: E.Expr) -> E.Expr:  # (d B)[a, nu]
            return _pm(nu, xp[b, ch, r0 + a, c0 + nu], xp[b, ch, r0 + a, c0 + _partner(nu)])

        return _pm(xi, row(xi), row(_partner(xi)))

    v = te.compute((POSITIONS, c, p_total), input_tile, name=f"{name}_V", tag="winograd_input")
    rc = te.reduce_axis(c, "rc")
    m = te.compute(
        (POSITIONS, k, p_total),
        lambda z, kk, p: te.sum(u[z, kk, rc] * v[z, rc, p], rc),
        name=f"{name}_M",
        tag="conv2d_winograd",
        attrs={"tiles_h": th, "tiles_w": tw},
    )

    def output(b: E.Expr, kk: E.Expr, y: E.Expr, x: E.Expr) -> E.Expr:
        i, j = y % TILE, x % TILE
        p = (b * th + y // TILE) * tw + x // TILE

        def col(a: int) -> E.Expr:  # (M A)[a, j]
            t = [m[a * ALPHA + q, kk, p] for q in range(ALPHA)]
            return E.select(E.compare("eq", j, 0), t[0] + t[1] + t[2], t[1] - t[2] - t[3])

        return E.select(E.compare("eq", i, 0), col(0) + col(1) + col(2), col(1) - col(2) - col(3))

    return te.compute((n, k, oh, ow), output, name=name, tag="winograd_output")


def weight_transform(weight: Tensor, name: str = "winograd_weight") -> Tensor:
    """[K, C, 3, 3] -> U [16, K, C] as a compute (for weights that are not constants)."""
    kk, c, kh, kw = weight.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"winograd weight transform: kernel {kh}x{kw}, expected 3x3")

    def dot(coeffs, f) -> E.Expr:  # sum_r coeffs[r] * f(r) over the non-zero coefficients
        terms = [f(r) if g == 1 else -f(r) if g == -1 else E.as_expr(float(g), weight.dtype) * f(r)
                 for r, g in enumerate(coeffs) if g != 0]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out

    def g_row(q: E.Expr, f) -> E.Expr:  # (G f)[q] for a 3-vector f, rows taken from G
        out = dot(G[-1], f)
        for r in range(ALPHA - 2, -1, -1):
            out = E.select(E.compare("eq", q, r), dot(G[r], f), out)
        return out

    def body(z: E.Expr, o: E.Expr, ch: E.Expr) -> E.Expr:
        xi, nu = z // ALPHA, z % ALPHA
        return g_row(xi, lambda r: g_row(nu, lambda s: weight[o, ch, r, s]))

    return te.compute((POSITIONS, kk, c), body, name=name, tag="injective")
