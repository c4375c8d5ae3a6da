"""ONNX Resize as one interpolation matrix per axis, for the variants `image.resize2d` cannot express.

`image.resize2d` derives its scale from the extents (in / out). ONNX uses the `scales` input as
given, so a scale such as 0.6 on an extent of 2 (output 1) samples a different point; ONNX also has
cubic interpolation (`cubic_coeff_a`, `exclude_outside`), antialiased downsampling,
`half_pixel_symmetric` and `tf_crop_and_resize`. All of these are linear and separable per axis, so
the importer builds the weight matrix of each resized axis here (NumPy, at import time) and applies
it with `nn.matmul`: `y = A_h @ x @ A_w.T` (plus a constant for crop-and-resize extrapolation).

Conventions follow the ONNX specification: the source coordinate `x` of output index `o` comes from
the coordinate transformation; interpolation taps sit at `base + k` with `base = ceil(x) - 1`
(so the fraction `x - base` lies in (0, 1]); taps outside the input read the edge pixel, or are
dropped and the weights renormalised with `exclude_outside`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autorelay.op.image import cubic_weight


@dataclass(frozen=True)
class AxisResize:
    """How one axis is resized; `scale` is ONNX's scale (not necessarily out / in)."""

    in_size: int
    out_size: int
    scale: float
    mode: str  # coordinate_transformation_mode
    method: str  # nearest | linear | cubic
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    roi: tuple[float, float] = (0.0, 1.0)  # tf_crop_and_resize only


def source_coords(r: AxisResize) -> np.ndarray:
    """The input coordinate each output index samples (ONNX's coordinate_transformation_mode)."""
    o = np.arange(r.out_size, dtype=np.float64)
    out_f = r.scale * r.in_size  # ONNX uses the unrounded output length
    if r.mode == "half_pixel":
        return (o + 0.5) / r.scale - 0.5
    if r.mode == "half_pixel_symmetric":
        offset = r.in_size / 2 * (1 - r.out_size / out_f)
        return offset + (o + 0.5) / r.scale - 0.5
    if r.mode == "pytorch_half_pixel":
        return (o + 0.5) / r.scale - 0.5 if out_f != 1 else np.zeros_like(o)  # as the spec and ORT
    if r.mode == "align_corners":
        return o * (r.in_size - 1) / (out_f - 1) if out_f != 1 else np.zeros_like(o)
    if r.mode == "asymmetric":
        return o / r.scale
    if r.mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / r.scale
    if r.mode == "tf_crop_and_resize":
        lo, hi = r.roi
        if out_f == 1:
            return np.full_like(o, (hi - lo) * (r.in_size - 1) / 2 + lo * (r.in_size - 1))
        return o * (hi - lo) * (r.in_size - 1) / (out_f - 1) + lo * (r.in_size - 1)
    raise ValueError(f"coordinate_transformation_mode={r.mode!r} is not supported")


def _nearest_index(x: np.ndarray, rule: str) -> np.ndarray:
    if rule == "round_prefer_floor":
        return np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    if rule == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if rule == "floor":
        return np.floor(x)
    if rule == "ceil":
        return np.ceil(x)
    raise ValueError(f"nearest_mode={rule!r} is not supported")


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter `a` (`image.resize2d`'s), zero from 2 on."""
    t = np.abs(t)
    near, far = cubic_weight(t, a)
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _taps(r: AxisResize, frac: np.ndarray) -> tuple[range, np.ndarray]:
    """Tap offsets from `base` and their weights (one row per output index)."""
    s = min(r.scale, 1.0) if r.antialias else 1.0  # antialias widens the kernel when downsampling
    if r.method == "linear":
        start = int(np.floor(-1 / s) + 1)
        offs = range(start, 2 - start)
        w = np.clip(1 - np.abs((np.array(offs)[None, :] - frac[:, None]) * s), 0, 1)
    elif r.method == "cubic":
        start = int(np.floor(-2 / s) + 1)
        offs = range(start, 2 - start)
        w = _cubic((np.array(offs)[None, :] - frac[:, None]) * s, r.cubic_a)
    else:
        raise ValueError(f"mode={r.method!r} is not supported (nearest, linear, cubic)")
    if r.antialias:
        w = w / w.sum(axis=1, keepdims=True)
    return offs, w


def weight_matrix(r: AxisResize) -> tuple[np.ndarray, np.ndarray]:
    """`(A, valid)`: A is `(out, in)`, row `o` the weights output `o` gives each input; `valid[o]` is
    False where crop-and-resize samples outside the image (the row is zero; extrapolation applies)."""
    x = source_coords(r)
    valid = (x >= 0) & (x <= r.in_size - 1) if r.mode == "tf_crop_and_resize" else np.ones(len(x), bool)
    m = np.zeros((r.out_size, r.in_size), dtype=np.float64)
    rows = np.arange(r.out_size)
    if r.method == "nearest":
        idx = np.clip(_nearest_index(x, r.nearest).astype(np.int64), 0, r.in_size - 1)
        m[rows, idx] = 1.0
    else:
        base = np.ceil(x).astype(np.int64) - 1
        offs, w = _taps(r, x - base)
        for k, off in enumerate(offs):
            pos = base + off
            wk = w[:, k]
            if r.exclude_outside:
                wk = np.where((pos >= 0) & (pos < r.in_size), wk, 0.0)
            np.add.at(m, (rows, np.clip(pos, 0, r.in_size - 1)), wk)
        if r.exclude_outside:
            m /= m.sum(axis=1, keepdims=True)
    m[~valid] = 0.0
    return m, valid
