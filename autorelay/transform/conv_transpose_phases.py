"""ConvTransposePhases: a strided transposed convolution as one stride-1 convolution per output phase.

Output row `y = s * q + py` of `nn.conv2d_transpose` (stride `s`, top padding `p`, kernel height
`K`) sums the input rows `q + c - t` through the kernel rows `r + s * t`, where `r = (py + p) % s`,
`c = (py + p) // s` and `t < T = ceil((K - r) / s)`. So the rows of one phase `py` are a plain
stride-1 correlation of the input with the phase's `T` kernel rows in reverse order, padded
`T - 1 - c` rows before (a negative padding crops) and as many after as the phase's
`ceil((OH - py) / s)` rows need; the same holds for columns. The pass writes each of the `s_h * s_w`
phases as an `nn.conv2d` (its weight sliced, reversed and transposed from the IOHW kernel, folded
at build time by the FoldConstant after it) and interleaves their outputs with stack, transpose,
reshape (and a crop when the phases have unequal extents).

Why: the gather compute of `nn.conv2d_transpose` (`autorelay.op.conv_transpose`) already skips the
zero taps, but it indexes input and kernel by each output pixel's phase, which the direct conv
template cannot tile well; the phase convolutions are ordinary convolutions, so they take the conv
templates (packed in channel blocks by the blocked pipelines, tuned like any other layer). On the
zoo's DCGAN generator (Zen 5, 2 threads, default schedules) its first three layers ran 2.2x, 2.3x
and 1.2x faster in NCHW and 2.4x, 2.5x and 2.7x in blocks of 16, the 3-channel output layer even
(0.92x, 1.08x), the whole model 2.5x (`benchmarks/conv_transpose.py`).

Left as they are: dilated, 1-d, non-NCHW/IOHW and dynamic-shape transposed convolutions, and
any with a phase that no kernel tap reaches (a kernel smaller than its stride).

It runs after the graph optimisations and, in a layout plan, after the plan's `ConvertLayout`:
plans address convolutions by their position, and the phases must not shift those positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import op_name, static_shape, tensor_type


@dataclass(frozen=True)
class Phase:
    """One output phase along one axis: kernel taps `first, first + stride, ...` (`taps` of them),
    the input padding before and after (negative: cropped), and the phase's output extent."""

    first: int
    taps: int
    before: int
    after: int
    extent: int


def phases(size: int, kernel: int, stride: int, pad: int, out: int) -> list[Phase]:
    """The output phases of one spatial axis (see the module docstring)."""
    found = []
    for phase in range(stride):
        first, lead = (phase + pad) % stride, (phase + pad) // stride
        taps = -(-(kernel - first) // stride) if kernel > first else 0
        extent = -(-(out - phase) // stride)
        found.append(Phase(first, taps, taps - 1 - lead, extent - 1 + lead - (size - 1), extent))
    return found


def _phase_weight(w: Expr, rows: Phase, cols: Phase, strides: tuple[int, int], shape: tuple,
                  groups: int) -> Expr:
    """The OIHW weight of one phase: the IOHW kernel's taps of the phase, reversed."""
    ci, og, kh, kw = shape
    taps = call("strided_slice", w, begin=(rows.first, cols.first), end=(kh, kw), strides=strides,
                axes=(2, 3))
    taps = call("reverse", call("reverse", taps, axis=2), axis=3)
    if groups == 1:
        return call("transpose", taps, axes=(1, 0, 2, 3))
    split = call("reshape", taps, newshape=(groups, ci // groups, og, rows.taps, cols.taps))
    swapped = call("transpose", split, axes=(0, 2, 1, 3, 4))
    return call("reshape", swapped, newshape=(groups * og, ci // groups, rows.taps, cols.taps))


def _phase_conv(x: Expr, w: Expr, rows: Phase, cols: Phase, c: Call, in_hw: tuple[int, int],
                extents: tuple[int, int]) -> Expr:
    a = c.attrs
    shape = static_shape(c.args[1])
    assert shape is not None
    top, left = max(0, -rows.before), max(0, -cols.before)  # a negative padding crops the input
    bottom, right = max(0, -rows.after), max(0, -cols.after)
    if top or left or bottom or right:
        x = call("strided_slice", x, begin=(top, left), end=(in_hw[0] - bottom, in_hw[1] - right),
                 strides=(1, 1), axes=(2, 3))
    weight = _phase_weight(w, rows, cols, tuple(a["strides"]), shape, a["groups"])
    y = call("nn.conv2d", x, weight, strides=(1, 1),
             padding=(max(0, rows.before), max(0, cols.before), max(0, rows.after), max(0, cols.after)),
             groups=a["groups"], channels=shape[1] * a["groups"], kernel_size=(rows.taps, cols.taps),
             out_dtype=a["out_dtype"])
    short = (extents[0] - rows.extent, extents[1] - cols.extent)
    if any(short):  # pad to the longest phase's extent so the phases stack; cropped after interleaving
        zero = Constant(np.zeros((), tensor_type(c).dtype))
        y = call("nn.pad", y, zero, pad_width=((0, 0), (0, 0), (0, short[0]), (0, short[1])))
    return y


def phase_form(c: Call, x: Expr, w: Expr) -> Expr | None:
    """The phase rewrite of transposed convolution `c` with (rewritten) operands `x`, `w`, or None
    where it does not apply (see the module docstring)."""
    if op_name(c) != "nn.conv2d_transpose":
        return None
    a = c.attrs
    layouts = (a["data_layout"], a["kernel_layout"], a["out_layout"] or a["data_layout"])
    xs, ws, out = static_shape(c.args[0]), static_shape(c.args[1]), static_shape(c)
    if layouts != ("NCHW", "IOHW", "NCHW") or tuple(a["dilation"]) != (1, 1) or None in (xs, ws, out):
        return None
    assert xs is not None and ws is not None and out is not None
    pads = a["padding"]
    rows = phases(xs[2], ws[2], a["strides"][0], pads[0], out[2])
    cols = phases(xs[3], ws[3], a["strides"][1], pads[1], out[3])
    if any(p.taps == 0 for p in (*rows, *cols)):
        return None
    extents = (max(p.extent for p in rows), max(p.extent for p in cols))
    convs = [[_phase_conv(x, w, r, q, c, (xs[2], xs[3]), extents) for q in cols] for r in rows]
    if len(convs) == 1 and len(convs[0]) == 1:
        return convs[0][0]  # stride 1: one phase, nothing to interleave
    sh, sw = len(rows), len(cols)
    stacked = call("stack", Tuple(tuple(y for row in convs for y in row)), axis=0)  # one stack: one kernel
    grid = call("reshape", stacked, newshape=(sh, sw, out[0], out[1], *extents))
    # (sh, sw, N, O, H', W') -> (N, O, H', sh, W', sw) -> (N, O, H' * sh, W' * sw)
    woven = call("reshape", call("transpose", grid, axes=(2, 3, 4, 0, 5, 1)),
                 newshape=(out[0], out[1], extents[0] * sh, extents[1] * sw))
    if (extents[0] * sh, extents[1] * sw) != tuple(out[2:]):
        woven = call("strided_slice", woven, begin=(0, 0), end=tuple(out[2:]), strides=(1, 1), axes=(2, 3))
    return woven


class _Rewrite(ExprMutator):
    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if not isinstance(new, Call) or len(new.args) != 2:
            return new
        out = phase_form(c, new.args[0], new.args[1])
        return new if out is None else out


@dataclass(frozen=True)
class ConvTransposePhases(FunctionPass):
    """Rewrite each strided transposed convolution as per-phase convolutions (module docstring);
    run FoldConstant after it."""

    name: ClassVar[str] = "ConvTransposePhases"
    requires_types: ClassVar[bool] = True

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Rewrite().visit(fn)
        assert isinstance(out, Function)
        return out


__all__ = ["ConvTransposePhases", "Phase", "phase_form", "phases"]
