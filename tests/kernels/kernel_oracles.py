"""NumPy oracles shared by the kernel tests (independent of the compute DSL)."""

from __future__ import annotations

import numpy as np


def conv_nchw(x: np.ndarray, w: np.ndarray, s: int, p: int, groups: int = 1) -> np.ndarray:
    n, _c, h, ww = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - kh) // s + 1, (ww + 2 * p - kw) // s + 1
    out = np.zeros((n, oc, oh, ow))
    opg = oc // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg : (g + 1) * cg, i : i + s * oh : s, j : j + s * ow : s]
                out[:, g * opg : (g + 1) * opg] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * opg : (g + 1) * opg, :, i, j]
                )
    return out


def to_nchwc(x: np.ndarray, b: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def from_nchwc(x: np.ndarray) -> np.ndarray:
    n, co, h, w, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, co * b, h, w)


def kernel_to_oihwio(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    oc, ic, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(oc // ob, ob, ic // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def pool(x: np.ndarray, k: int, s: int, p: int, kind: str) -> np.ndarray:
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    _n, _c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    wins = np.stack([xp[:, :, i : i + s * oh : s, j : j + s * ow : s] for i in range(k) for j in range(k)])
    return wins.max(0) if kind == "max" else wins.sum(0) / (k * k)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
