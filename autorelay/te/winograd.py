"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (Lavin & Gray, 2016) as one three-stage compute.

A stride-1 3x3 convolution computes each m x m output tile from an (m+2) x (m+2) input tile with
(m+2)^2 multiplications per channel pair instead of 9 m^2, so the multiply-add work falls 2.25x
for m = 2 and 4x for m = 4:

    V = Bt d B      (input transform, per channel and tile: adds and small constant multiplies)
    M = sum_c U[c] * V[c]   for each of the (m+2)^2 positions (independent GEMMs)
    Y = At M A      (output transform)

with U = G g Gt the transformed weight, folded once at build time (`weight_transform`). The tile
edge m is not an attribute anywhere: it is read from U's first axis (16 or 36 positions).

F(4x4) also cuts the transforms' traffic per output (36 values per 16 outputs against 16 per 4),
but it is numerically rougher — its points 0, +-1, +-2 give coefficients up to 8 and fractions
of 1/24 — and its transformed weight is 4x the direct one (F(2x2): 1.8x), which a deep layer
with a small map and many channels streams from memory. Which tile a layer uses is therefore a
per-layer choice (`WinogradConv(tiles=…)`, a layout plan), not a fixed rule.

For m = 2 the last rows of Bt and G are negated: every row of Bt is then `d[q] - d[partner(q)]`
(or `+` for q = 1), two loads and one add, and the sign flips cancel in U * V. The template
unrolls the positions and the output tile, so the per-row selects below fold to straight-line
arithmetic.

Layouts keep every transform's inner loop contiguous: in NCHW (`conv2d_winograd_nchw`) V and M
are [P, C or K, T] with T = N * TH * TW tiles in row-major order, so the GEMM's column vectors are
tiles along a row (read by strided loads) and the output transform reads M's columns as vectors.
In channel blocks (`conv2d_winograd_nchwc`, data NCHW[x]c) a block of channels is innermost in
every stage instead, so every load and store of the transforms is a whole vector, and the layers
around the convolution keep their blocked layout: no layout transform on either side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.nn import _pad4, pad
from autorelay.te.tensor import Tensor


@dataclass(frozen=True)
class Transforms:
    """The matrices of F(m x m, 3x3): Bt (alpha x alpha), G (alpha x 3), At (m x alpha)."""

    m: int
    bt: np.ndarray
    g: np.ndarray
    at: np.ndarray

    @property
    def alpha(self) -> int:
        return self.m + 2

    @property
    def positions(self) -> int:
        return self.alpha * self.alpha


_F2 = Transforms(
    2,
    bt=np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]], np.float64),
    g=np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, -1.0]]),
    at=np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64),
)
_F4 = Transforms(
    4,
    bt=np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                 [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
    g=np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
    at=np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                np.float64),
)
TILE_SIZES = (2, 4)
_BY_TILE = {2: _F2, 4: _F4}
_BY_POSITIONS = {t.positions: t for t in _BY_TILE.values()}


def transforms(tile: int) -> Transforms:
    """The matrices of F(tile x tile, 3x3); tile is 2 or 4."""
    if tile not in _BY_TILE:
        raise ValueError(f"winograd: output tile {tile} is not supported (choose from {TILE_SIZES})")
    return _BY_TILE[tile]


def transforms_for_positions(positions: int) -> Transforms:
    """The transforms whose transformed weight has `positions` rows (16: F(2x2), 36: F(4x4))."""
    if positions not in _BY_POSITIONS:
        raise ValueError(f"winograd: a transformed weight has 16 or 36 positions, not {positions}")
    return _BY_POSITIONS[positions]


def tiles(oh: int, ow: int, tile: int = 2) -> tuple[int, int]:
    """Tile rows and columns covering an oh x ow output."""
    return -(-oh // tile), -(-ow // tile)


def weight_transform_np(w: np.ndarray, tile: int = 2) -> np.ndarray:
    """[K, C, 3, 3] -> U [P, K, C] (position-major, so each GEMM's weight is one contiguous block)."""
    t = transforms(tile)
    u = np.einsum("ar,kcrs,bs->abkc", t.g, w.astype(np.float64), t.g)
    return u.reshape(t.positions, w.shape[0], w.shape[1]).astype(w.dtype)


def _combine(coeffs: np.ndarray, f: Callable[[int], E.Expr], dtype: str) -> E.Expr:
    """sum_r coeffs[r] * f(r) over the non-zero coefficients (+-1 as adds and subtracts; a
    positive term first, so a row like (0, -1, 1, 0) is one subtraction)."""
    out: E.Expr | None = None
    order = [r for r, g in enumerate(coeffs) if g > 0] + [r for r, g in enumerate(coeffs) if g < 0]
    for r in order:
        g = coeffs[r]
        term = f(r)
        if abs(g) != 1:
            term = E.as_expr(float(abs(g)), dtype) * term
        if out is None:
            out = term if g > 0 else E.as_expr(0.0, dtype) - term
        else:
            out = out + term if g > 0 else out - term
    assert out is not None, "a transform row has no non-zero coefficient"
    return out


def _by_row(q: E.Expr, matrix: np.ndarray, f: Callable[[int], E.Expr], dtype: str) -> E.Expr:
    """(matrix @ f)[q] for a symbolic row q: a select chain that folds once q is a constant."""
    out = _combine(matrix[-1], f, dtype)
    for r in range(matrix.shape[0] - 2, -1, -1):
        out = E.select(E.compare("eq", q, r), _combine(matrix[r], f, dtype), out)
    return out


def _input_value(t: Transforms, th: int, tw: int, z: E.Expr, p: E.Expr,
                 load: Callable[[E.Expr, E.Expr, E.Expr], E.Expr], dtype: str) -> E.Expr:
    """V at position z of tile p (tiles in row-major order, image by image): (Bt d B)[z] of the
    tile's window, `load(image, row, column)` reading the padded input."""
    xi, nu = z // t.alpha, z % t.alpha
    tx, rest = p % tw, p // tw
    ty, b = rest % th, rest // th
    r0, c0 = ty * t.m, tx * t.m
    # (d B)[a, nu], built once per row and shared by every select branch that reads it
    rows = [_by_row(nu, t.bt, lambda s, a=a: load(b, r0 + a, c0 + s), dtype) for a in range(t.alpha)]
    return _by_row(xi, t.bt, lambda a: rows[a], dtype)


def _output_value(t: Transforms, th: int, tw: int, b: E.Expr, y: E.Expr, x: E.Expr,
                  load: Callable[[E.Expr, E.Expr], E.Expr], dtype: str) -> E.Expr:
    """Output pixel (y, x) of image b: (At M A) of its tile, `load(position, tile)` reading M."""
    i, j = y % t.m, x % t.m
    p = (b * th + y // t.m) * tw + x // t.m
    # (M A)[a, j], built once per row and shared by every select branch that reads it
    cols = [_by_row(j, t.at, lambda q, a=a: load(a * t.alpha + q, p), dtype) for a in range(t.alpha)]
    return _by_row(i, t.at, lambda a: cols[a], dtype)


def conv2d_winograd_nchw(
    data: Tensor, u: Tensor, padding=1, name: str = "conv2d_winograd"
) -> Tensor:
    """data [N, C, H, W], transformed weight U [P, K, C] -> [N, K, OH, OW] (stride 1, 3x3); the
    output tile is 2 for P = 16 and 4 for P = 36."""
    n, c, h, w = data.shape
    positions, k, cu = u.shape
    t = transforms_for_positions(positions)
    if cu != c:
        raise ValueError(f"conv2d_winograd: data {data.shape} and transformed weight {u.shape} disagree")
    m, dtype = t.m, data.dtype
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = tiles(oh, ow, m)
    p_total = n * th * tw
    # pad so that every input tile lies inside (the last tile may overhang the output)
    xp = pad(data, (0, 0, pt, pl), (0, 0, m * th + 2 - h - pt, m * tw + 2 - w - pl), name=f"{name}_pad")

    def input_tile(z: E.Expr, ch: E.Expr, p: E.Expr) -> E.Expr:
        return _input_value(t, th, tw, z, p, lambda b, r, col: xp[b, ch, r, col], dtype)

    v = te.compute((positions, c, p_total), input_tile, name=f"{name}_V", tag="winograd_input")
    rc = te.reduce_axis(c, "rc")
    mm = te.compute(
        (positions, k, p_total),
        lambda z, kk, p: te.sum(u[z, kk, rc] * v[z, rc, p], rc),
        name=f"{name}_M",
        tag="conv2d_winograd",
        attrs={"tiles_h": th, "tiles_w": tw, "tile": m},
    )

    def output(b: E.Expr, kk: E.Expr, y: E.Expr, x: E.Expr) -> E.Expr:
        return _output_value(t, th, tw, b, y, x, lambda z, p: mm[z, kk, p], dtype)

    return te.compute((n, k, oh, ow), output, name=name, tag="winograd_output")


def conv2d_winograd_nchwc(
    data: Tensor, u: Tensor, padding=1, name: str = "conv2d_winograd"
) -> Tensor:
    """data [N, C/ic, H, W, ic], transformed weight U [P, K/oc, C, oc] -> [N, K/oc, OH, OW, oc]
    (stride 1, 3x3): the same algorithm in channel blocks. Every stage keeps a block of channels
    innermost (V [P, C/ic, T, ic], M [P, K/oc, T, oc]), so both transforms read and write whole
    vectors of channels, contiguous, with no gathers or strided stores, and each GEMM broadcasts
    V and loads U's vectors of output channels, as the direct NCHW[x]c kernel does."""
    n, cb, h, w, ic = data.shape
    positions, kb, cu, oc = u.shape
    t = transforms_for_positions(positions)
    if cu != cb * ic:
        raise ValueError(f"conv2d_winograd: data {data.shape} and transformed weight {u.shape} disagree")
    m, dtype = t.m, data.dtype
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = tiles(oh, ow, m)
    xp = pad(data, (0, 0, pt, pl, 0), (0, 0, m * th + 2 - h - pt, m * tw + 2 - w - pl, 0), name=f"{name}_pad")

    def input_tile(z: E.Expr, cbo: E.Expr, p: E.Expr, ci: E.Expr) -> E.Expr:
        return _input_value(t, th, tw, z, p, lambda b, r, col: xp[b, cbo, r, col, ci], dtype)

    v = te.compute((positions, cb, n * th * tw, ic), input_tile, name=f"{name}_V", tag="winograd_input")
    rc = te.reduce_axis(cu, "rc")
    mm = te.compute(
        (positions, kb, n * th * tw, oc),
        lambda z, kk, p, o: te.sum(v[z, rc // ic, p, rc % ic] * u[z, kk, rc, o], rc),
        name=f"{name}_M",
        tag="conv2d_winograd_nchwc",
        attrs={"tiles_h": th, "tiles_w": tw, "tile": m, "ic_bn": ic, "oc_bn": oc},
    )

    def output(b: E.Expr, kk: E.Expr, y: E.Expr, x: E.Expr, o: E.Expr) -> E.Expr:
        return _output_value(t, th, tw, b, y, x, lambda z, p: mm[z, kk, p, o], dtype)

    return te.compute((n, kb, oh, ow, oc), output, name=name, tag="winograd_output")


def block_weight_np(u: np.ndarray, oc: int) -> np.ndarray:
    """U [P, K, C] -> [P, K/oc, C, oc]: the transformed weight of the blocked kernel."""
    p, k, c = u.shape
    return np.ascontiguousarray(u.reshape(p, k // oc, oc, c).transpose(0, 1, 3, 2))


def weight_transform(weight: Tensor, tile: int = 2, name: str = "winograd_weight") -> Tensor:
    """[K, C, 3, 3] -> U [P, K, C] as a compute (for weights that are not constants)."""
    kk, c, kh, kw = weight.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"winograd weight transform: kernel {kh}x{kw}, expected 3x3")
    t = transforms(tile)

    def body(z: E.Expr, o: E.Expr, ch: E.Expr) -> E.Expr:
        xi, nu = z // t.alpha, z % t.alpha
        return _by_row(xi, t.g, lambda r: _by_row(nu, t.g, lambda s: weight[o, ch, r, s], weight.dtype),
                       weight.dtype)

    return te.compute((t.positions, kk, c), body, name=name, tag="injective")


def conv_reference(data: np.ndarray, u: np.ndarray, padding: tuple[int, int, int, int]) -> np.ndarray:
    """The same algorithm in NumPy (float64 inside): input transform, the GEMMs, output transform."""
    t = transforms_for_positions(u.shape[0])
    m, alpha = t.m, t.alpha
    pt, pl, pb, pr = padding
    n, c, h, w = data.shape
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = tiles(oh, ow, m)
    x = np.zeros((n, c, m * th + 2, m * tw + 2))
    x[:, :, pt : pt + h, pl : pl + w] = data
    win = np.lib.stride_tricks.sliding_window_view(x, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ai,ncyxij,bj->abcnyx", t.bt, win, t.bt).reshape(t.positions, c, n, th, tw)
    mm = np.einsum("zkc,zcnyx->zknyx", u.astype(np.float64), v).reshape(alpha, alpha, -1, n, th, tw)
    y = np.einsum("ia,abknyx,jb->nkyixj", t.at, mm, t.at).reshape(n, -1, m * th, m * tw)
    return np.ascontiguousarray(y[:, :, :oh, :ow]).astype(data.dtype)
