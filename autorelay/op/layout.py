"""Data layouts and window (convolution / pooling) shape arithmetic for the nn op families.

A layout string names tensor axes by letter: upper case for a *primal* axis (`N`, `C`, `H`, `W`,
`O`, `I`, `D`), lower case preceded by a factor for a *blocked* sub-axis of the primal with the same
letter (`NCHW8c` splits `C` into `C/8` outer and `8` inner). Convolution and pooling compute in a
canonical primal order (`NCHW`, `OIHW`, …); every other layout is converted to that order and back,
so the arithmetic is written once.

Shape helpers work on symbolic dims too: an extent that depends on a symbolic dim becomes `?`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.ir.types import AnyDim, Dim
from autorelay.op.registry import rel_error
from autorelay.op.shape_utils import fmt_shape

ANY = AnyDim()
_TOKEN = re.compile(r"(\d*)([A-Za-z])")


@dataclass(frozen=True)
class Layout:
    """A parsed layout: `axes[i]` is the letter of axis i; `factors[letter]` the block of a sub-axis."""

    text: str
    axes: tuple[str, ...]
    factors: dict[str, int]

    def index(self, letter: str) -> int:
        return self.axes.index(letter)

    def factor(self, primal: str) -> int | None:
        return self.factors.get(primal.lower())


def parse_layout(op: str, text: str, primal: str, arg: str = "layout") -> Layout:
    """Parse `text`, which must hold each letter of `primal` exactly once (plus optional blocks)."""
    if not isinstance(text, str) or not text:
        raise rel_error(op, f"{arg} must be a layout string such as {primal!r}, got {text!r}")
    pos, axes, factors = 0, [], {}
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise rel_error(op, f"{arg}={text!r} is not a layout string (like {primal!r} or {primal}8c)")
        digits, letter = m.groups()
        if letter.isupper():
            if digits or letter not in primal:
                raise rel_error(op, f"{arg}={text!r}: unexpected axis {digits}{letter} (expected {primal})")
        else:
            if not digits or int(digits) <= 0 or letter.upper() not in primal:
                raise rel_error(
                    op, f"{arg}={text!r}: a blocked axis needs a positive factor and a primal axis, "
                    f"got {digits}{letter}"
                )
            factors[letter] = int(digits)
        if letter in axes:
            raise rel_error(op, f"{arg}={text!r} names axis {letter} twice")
        axes.append(letter)
        pos = m.end()
    missing = [c for c in primal if c not in axes]
    if missing:
        raise rel_error(op, f"{arg}={text!r} lacks axis {''.join(missing)} (expected {primal})")
    return Layout(text, tuple(axes), factors)


def to_canonical_shape(op: str, shape: Sequence[Dim], layout: Layout, primal: str, arg: str) -> tuple:
    """The extents of `shape` (in `layout`) in primal order, merging blocked sub-axes."""
    if len(shape) != len(layout.axes):
        raise rel_error(
            op, f"{arg} of shape {fmt_shape(shape)} has rank {len(shape)}, but layout "
            f"{layout.text} needs rank {len(layout.axes)}"
        )
    out: list[Dim] = []
    for letter in primal:
        outer = shape[layout.index(letter)]
        f = layout.factor(letter)
        if f is not None:
            inner = shape[layout.index(letter.lower())]
            if isinstance(inner, int) and inner != f:
                raise rel_error(
                    op, f"{arg} of shape {fmt_shape(shape)}: blocked axis {letter.lower()} has extent "
                    f"{inner}, but layout {layout.text} says {f}"
                )
            outer = outer * f if isinstance(outer, int) else ANY
        out.append(outer)
    return tuple(out)


def from_canonical_shape(op: str, canon: Sequence[Dim], layout: Layout, primal: str, arg: str) -> tuple:
    """The inverse of `to_canonical_shape`; a blocked extent must divide its primal extent."""
    out: list[Dim] = []
    for letter in layout.axes:
        if letter.isupper():
            d = canon[primal.index(letter)]
            f = layout.factor(letter)
            if f is not None and isinstance(d, int):
                if d % f:
                    raise rel_error(
                        op, f"{arg}: extent {d} of axis {letter} is not divisible by the block {f} "
                        f"of layout {layout.text}"
                    )
                d //= f
            elif f is not None:
                d = ANY
            out.append(d)
        else:
            out.append(layout.factors[letter])
    return tuple(out)


def to_canonical_array(x: np.ndarray, layout: Layout, primal: str) -> np.ndarray:
    """`x` (in `layout`) as an array in primal order with blocked axes merged back."""
    order: list[int] = []
    shape: list[int] = []
    for letter in primal:
        i = layout.index(letter)
        order.append(i)
        size = x.shape[i]
        if layout.factor(letter) is not None:
            j = layout.index(letter.lower())
            order.append(j)
            size *= x.shape[j]
        shape.append(size)
    return np.transpose(x, order).reshape(shape)


def from_canonical_array(x: np.ndarray, layout: Layout, primal: str) -> np.ndarray:
    """A primal-order array laid out as `layout` (the inverse of `to_canonical_array`)."""
    split_shape: list[int] = []
    split_names: list[str] = []
    for letter, size in zip(primal, x.shape):
        f = layout.factor(letter)
        if f is None:
            split_shape.append(size)
            split_names.append(letter)
        else:
            split_shape += [size // f, f]
            split_names += [letter, letter.lower()]
    y = x.reshape(split_shape)
    return np.transpose(y, [split_names.index(a) for a in layout.axes])


def swap_io(layout_text: str) -> str:
    """A kernel layout with its O and I roles exchanged (how a transposed conv reads a conv's kernel)."""
    table = str.maketrans({"O": "I", "I": "O", "o": "i", "i": "o"})
    return layout_text.translate(table)


# ---------------------------------------------------------------------------------------------
# attribute normalisation


def int_tuple(op: str, name: str, value: Any, n: int) -> tuple[int, ...]:
    """An int or a list of `n` ints (a list of 1 is repeated) as a tuple of `n` ints."""
    vals = (value,) if isinstance(value, int) and not isinstance(value, bool) else tuple(value)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise rel_error(op, f"{name} must be {n} integer(s), got {value!r}")
    return tuple(int(v) for v in vals)


def pad_tuple(op: str, padding: Any, nspatial: int, name: str = "padding") -> tuple[int, ...]:
    """Relay's padding forms as `(before_0, …, before_k, after_0, …, after_k)`.

    One value pads every side; `nspatial` values pad both sides of each axis; `2 * nspatial`
    values are already in before/after form (conv2d's `(top, left, bottom, right)`).
    """
    vals = (padding,) if isinstance(padding, int) and not isinstance(padding, bool) else tuple(padding)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals) or any(v < 0 for v in vals):
        raise rel_error(op, f"{name} must be non-negative integers, got {padding!r}")
    if len(vals) == 1:
        return vals * (2 * nspatial)
    if len(vals) == nspatial:
        return vals + vals
    if len(vals) == 2 * nspatial:
        return vals
    raise rel_error(op, f"{name} takes 1, {nspatial} or {2 * nspatial} values, got {len(vals)}: {padding!r}")


def check_positive(op: str, name: str, values: Sequence[int]) -> None:
    if any(v <= 0 for v in values):
        raise rel_error(op, f"{name} must be positive, got {tuple(values)}")


def window_out(op: str, size: Dim, k: int, stride: int, dilation: int, before: int, after: int,
               ceil_mode: bool = False, what: str = "input") -> Dim:
    """Output extent of a sliding window over one spatial axis (`?` when `size` is symbolic)."""
    if not isinstance(size, int):
        return ANY
    span = dilation * (k - 1) + 1
    padded = size + before + after
    if padded < span:
        raise rel_error(
            op, f"the window (extent {span} with dilation {dilation}) is larger than the padded {what} "
            f"extent {padded}"
        )
    if ceil_mode:
        out = (padded - span + stride - 1) // stride + 1
        # a last window that would start past the input and its leading padding is dropped
        return out - 1 if (out - 1) * stride >= size + before else out
    return (padded - span) // stride + 1
