"""Signal processing: DFT, STFT, the windows (HannWindow, HammingWindow, BlackmanWindow) and the mel
filter bank (MelWeightMatrix, a constant computed at import).

A discrete Fourier transform of static length is a matrix product: the signal, its real and
imaginary parts interleaved along the last axis as ONNX stores them ([.., n, 2] read as [.., 2n]),
times a constant [2n, 2k] matrix of cosines and sines gives the interleaved spectrum. So a DFT is
one `nn.matmul`, which the compiler already tunes and fuses, instead of a kernel of its own. It
costs O(n k) per signal where an FFT costs O(n log n); at the lengths audio front ends use
(n_fft of 400-1024) that is a GEMM the tuned dense kernels run well.

The matrix is built in float64 and rounded once. The inverse transform divides by the DFT length.
The inverse of a one-sided spectrum is the real inverse (NumPy's `irfft`, as ONNX's reference
computes it): each bin other than the first and, for even lengths, the middle one stands for
itself and its conjugate mirror, so it is counted twice.

STFT frames the signal with one `take` of [frames, frame_length] positions, weights each frame by
the window and transforms the frames.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import (
    ONNX_DTYPES,
    GraphBuilder,
    NodeView,
    normalize_axis,
    registrar,
    required_input,
)
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _dft_matrix(n_in: int, parts: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """[n_in * parts, k * out_parts]: interleaved input (real[, imag]) per position, interleaved
    output per bin (real, imag), or real positions alone for the real inverse."""
    if inverse and onesided:  # real inverse: bins k < n_in, each but 0 and length / 2 twice
        k = np.arange(n_in)[:, None]
        n = np.arange(length)[None, :]
        twice = np.where((k == 0) | (2 * k == length), 1.0, 2.0)
        theta = 2 * np.pi * k * n / length
        rows = [twice * np.cos(theta), -twice * np.sin(theta)][:parts]
        w = np.stack(rows, axis=1).reshape(n_in * parts, length) / length
        return w.astype("float32")
    bins = length // 2 + 1 if onesided else length
    n = np.arange(n_in)[:, None]
    k = np.arange(bins)[None, :]
    theta = 2 * np.pi * n * k / length
    sign = 1.0 if inverse else -1.0  # exp(sign * i * theta)
    cos, sin = np.cos(theta), np.sin(theta)
    real_in = np.stack([cos, sign * sin], axis=-1)  # (xr) -> (real, imag) of each bin
    imag_in = np.stack([-sign * sin, cos], axis=-1)
    w = np.stack([real_in, imag_in][:parts], axis=1).reshape(n_in * parts, bins * 2)
    return (w / length if inverse else w).astype("float32")


def _fit_length(g: GraphBuilder, x: Expr, axis: int, length: int) -> Expr:
    """x cut or zero-padded along `axis` to `length`, as NumPy's fft(n=length) reads its input."""
    n = g.static_shape(x)[axis]
    if n > length:
        return g.call("strided_slice", x, begin=[0], end=[length], axes=[axis])
    if n < length:
        widths = [(0, 0)] * g.ndim(x)
        widths[axis] = (0, length - n)
        return g.call("nn.pad", x, g.scalar(0, x), pad_width=tuple(widths))
    return x


def transform_last_axis(g: GraphBuilder, x: Expr, length: int, inverse: bool, onesided: bool) -> Expr:
    """The DFT of x [.., n, parts] along its signal axis n (the second last): [.., bins, 2], or
    [.., length, 1] for the real inverse."""
    shape = g.static_shape(x)
    parts = shape[-1]
    n_in = length // 2 + 1 if inverse and onesided else length
    x = _fit_length(g, x, len(shape) - 2, n_in)
    flat = g.call("reshape", x, newshape=(*shape[:-2], n_in * parts))
    w = _dft_matrix(n_in, parts, length, inverse, onesided)
    y = g.call("nn.matmul", flat, g.const(w))
    out_parts = 1 if inverse and onesided else 2
    return g.call("reshape", y, newshape=(*shape[:-2], w.shape[1] // out_parts, out_parts))


@_reg("DFT")
def _dft(g: GraphBuilder, node: NodeView) -> Expr:
    x = _x(node)
    shape = g.static_shape(x)
    if g.dtype(x) != "float32":
        raise node.fail(f"a DFT of {g.dtype(x)} is not supported (float32)")
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise node.fail(f"the input must end in an axis of 1 (real) or 2 (complex) parts, got shape {shape}")
    if node.opset >= 20:
        axis_input = node.input(2)
        axis = -2 if axis_input is None else int(np.asarray(g.value(axis_input, "axis")).reshape(()))
    else:
        axis = int(node.attr("axis", 1))
    axis = normalize_axis(g, axis, len(shape))
    if axis == len(shape) - 1:
        raise node.fail("the DFT axis cannot be the last axis (it holds the real and imaginary parts)")
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if node.input(1) is not None:
        length = int(np.asarray(g.value(node.input(1), "dft_length")).reshape(()))
    else:
        length = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    if length < 1:
        raise node.fail(f"the DFT length must be positive, got {length}")
    last = len(shape) - 2
    order = [d for d in range(len(shape) - 1) if d != axis] + [axis, len(shape) - 1]
    moved = x if axis == last else g.call("transpose", x, axes=order)
    y = transform_last_axis(g, moved, length, inverse, onesided)
    if axis == last:
        return y
    return g.call("transpose", y, axes=[int(i) for i in np.argsort(order)])


@_reg("STFT")
def _stft(g: GraphBuilder, node: NodeView) -> Expr:
    """signal [batch, length, parts] -> [batch, frames, bins, 2]; frames = 1 + (length - frame) // step."""
    x = _x(node)
    shape = g.static_shape(x)
    if len(shape) != 3 or shape[-1] not in (1, 2) or g.dtype(x) != "float32":
        raise node.fail(f"the signal must be float32 [batch, length, 1 or 2], got {g.dtype(x)} {shape}")
    step = int(np.asarray(g.value(_x(node, 1), "frame_step")).reshape(()))
    window = node.input(2)
    window_length = g.static_shape(window)[0] if window is not None else None
    if node.input(3) is not None:
        frame = int(np.asarray(g.value(node.input(3), "frame_length")).reshape(()))
    else:
        frame = window_length if window_length is not None else shape[1]
    if window_length is not None and window_length != frame:
        raise node.fail(f"the window holds {window_length} values for frames of {frame}")
    if step < 1 or not 1 <= frame <= shape[1]:
        raise node.fail(f"frame_step {step} and frame_length {frame} do not frame a signal of {shape[1]}")
    frames = 1 + (shape[1] - frame) // step
    positions = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]
    framed = g.call("take", x, g.const(positions.astype("int64")), axis=1)  # [batch, frames, frame, parts]
    if window is not None:
        framed = g.call("multiply", framed, g.call("reshape", window, newshape=(frame, 1)))
    return transform_last_axis(g, framed, frame, inverse=False, onesided=bool(node.attr("onesided", 1)))


# ONNX's window coefficients: a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic)
# or the size - 1 (symmetric); Hamming's are 25/46 and 21/46 exactly, as ONNX defines them
_WINDOWS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
            "BlackmanWindow": (0.42, 0.5, 0.08)}


@_reg(*_WINDOWS)
def _window(g: GraphBuilder, node: NodeView) -> Expr:
    size = g.ints(_x(node), "the window size")
    if len(size) != 1 or size[0] < 0:
        raise node.fail(f"the size must be one non-negative integer, got {size}")
    n = size[0]
    periodic = bool(node.attr("periodic", 1))
    dtype = ONNX_DTYPES.get(int(node.attr("output_datatype", 1)))
    if dtype is None:
        raise node.fail(f"output_datatype {node.attr('output_datatype')} is not a type the IR holds")
    a0, a1, a2 = _WINDOWS[node.op_type]
    denominator = n if periodic else n - 1
    k = np.arange(n, dtype=np.float64) * (2 * np.pi / denominator) if denominator > 0 else np.zeros(n)
    return g.const((a0 - a1 * np.cos(k) + a2 * np.cos(2 * k)).astype(dtype))


@_reg("MelWeightMatrix")
def _mel_weight_matrix(g: GraphBuilder, node: NodeView) -> Expr:
    """A constant [dft_length // 2 + 1, num_mel_bins] matrix of triangular filters, computed at
    import (every input must be static). The band edges are num_mel_bins + 2 points equally spaced
    on the mel scale, mel(f) = 2595 log10(1 + f / 700), from the lower edge frequency in steps of
    (mel range) / (num_mel_bins + 2) (so the last falls short of the upper edge), computed in the
    edges' own float type, each mapped to the spectrogram bin floor((dft_length + 1) f /
    sample_rate): ONNX's reference implementation, which defines the op's numbers, does so;
    filter m rises linearly from 0 at edge m to 1 at edge m + 1 and falls to 0 at edge m + 2 (a
    band whose rising side has no width is a spike of 1 at its centre bin)."""
    bins, length, rate = (int(_scalar(g, node, i)) for i in range(3))
    low, high = (_scalar(g, node, i) for i in (3, 4))
    dtype = ONNX_DTYPES.get(int(node.attr("output_datatype", 1)))
    if dtype is None:
        raise node.fail(f"output_datatype {node.attr('output_datatype')} is not a type the IR holds")
    if bins < 1 or length < 1 or rate <= 0 or not 0 <= low <= high:
        raise node.fail(f"needs num_mel_bins, dft_length, sample_rate > 0 and 0 <= lower <= upper edge, got "
                        f"{bins}, {length}, {rate}, {low}, {high}")
    mel_low, mel_high = (2595 * np.log10(1 + f / 700) for f in (low, high))  # in the edges' own type
    mels = np.arange(bins + 2) * ((mel_high - mel_low) / (bins + 2)) + mel_low
    hertz = 700 * (np.power(10, mels / 2595) - 1)
    edges = (((length + 1) * hertz) // rate).astype(np.int64)
    spectrum = np.arange(length // 2 + 1)[:, None]  # (spectrogram bins, 1)
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    rising = np.where(mid > lo, (spectrum - lo) / np.maximum(mid - lo, 1), (spectrum == mid).astype(float))
    falling = (hi - spectrum) / np.maximum(hi - mid, 1)
    weights = np.where((spectrum >= lo) & (spectrum <= mid), rising, 0.0)
    weights = np.where((spectrum > mid) & (spectrum < hi), falling, weights)
    return g.const(weights.astype(dtype))


def _scalar(g: GraphBuilder, node: NodeView, i: int) -> np.generic:
    """Static scalar input `i`, a NumPy scalar of its own type."""
    value = g.value(_x(node, i), ["num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                                  "upper_edge_hertz"][i])
    if value.size != 1:
        raise node.fail(f"input {i} must be a scalar, got shape {value.shape}")
    return value.reshape(())[()]
