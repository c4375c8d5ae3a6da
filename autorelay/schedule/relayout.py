"""What a kernel input's recorded re-layouts mean for data: the schedule's Pack and Pad steps record
`("pack", axis, f, pos)` / `("pad", d, n)` per input, and the runtime applies them to constants
once at build time (`relayout`, NumPy) or, for non-constant inputs, with a compiled packing kernel
(`autorelay.lower.relayout.relayout_compute`, same meaning).

`("pad", d, n)` zero-extends axis d to n; `("pack", axis, f, pos)` zero-pads the axis to a multiple
of f, splits it into (outer, f) and moves the f-axis to position `pos`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def packed_shape(shape: Sequence[int], ops: Sequence[Any]) -> tuple[int, ...]:
    out = list(shape)
    for op in ops:
        if op[0] == "pad":
            _, d, n = op
            out[d] = max(out[d], n)
        else:
            _, axis, f, pos = op
            outer = -(-out[axis] // f)
            rest = out[:axis] + [outer] + out[axis + 1 :]
            out = rest[:pos] + [f] + rest[pos:]
    return tuple(out)


def relayout(arr: np.ndarray, ops: list) -> np.ndarray:
    """Apply an input's recorded Pack/Pad re-layouts to a NumPy array (zero padding)."""
    for op in ops:
        if op[0] == "pad":
            _, d, n = op
            if arr.shape[d] < n:
                width = [(0, 0)] * arr.ndim
                width[d] = (0, n - arr.shape[d])
                arr = np.pad(arr, width)
        else:
            _, axis, f, pos = op
            n = arr.shape[axis]
            padded = -(-n // f) * f
            if padded != n:
                width = [(0, 0)] * arr.ndim
                width[axis] = (0, padded - n)
                arr = np.pad(arr, width)
            shape = list(arr.shape)
            shape[axis : axis + 1] = [padded // f, f]
            arr = arr.reshape(shape)
            arr = np.moveaxis(arr, axis + 1, pos)
    return np.ascontiguousarray(arr)
