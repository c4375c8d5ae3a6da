"""ConvertLayout: run convolutions in another data layout, transforming only at the boundaries.

`ConvertLayout(src="NCHW", dst="NHWC")` rewrites every `nn.conv2d` in layout `src` (kernel `OIHW`
for NCHW, `HWIO` for NHWC) to `dst`; `dst="NCHWc"` packs channels in blocks: data `NCHW{x}c`,
weights `OIHW{x}i{y}o`, output `NCHW{y}c` (depthwise: `OIHW1i{x}o`, output `NCHW{x}c`), with
the blocks chosen per convolution (`conv_blocks[i] = (x, y)` for the i-th conv in dependency
order, Winograd convs counted among them, else `block`, shrunk to a divisor of the channel count,
in groups of the channels per group, so a group's channels are whole blocks — or, where groups
are smaller than the block asked for, whole groups packed into one block, `OIHW{g}i{x}o`;
a block of 0 — `(0, 0)` there, or `block=0` for every conv `conv_blocks` does not address — leaves
that conv in NCHW, which is how a per-layer `LayoutPlan` keeps layers plain). Quantized
convolutions (`qnn.conv2d`, see `convert_layout_qnn`) are not addressed: they take `qnn_block`
(default `block`; 0 keeps them in NCHW). Dilated convolutions stay.

The new layout then *propagates*: layout-agnostic ops (unary elementwise ops, broadcasting binary
ops whose other operand is a scalar, a same-shaped tensor, a per-channel constant or value — a
squeeze-excite gate — or a one-channel value — a spatial attention map, reshaped to broadcast
inside the blocks), `bias_add`, 2-d and global pooling, channel concatenation of values in one
layout) compute directly in the converted layout. A `layout_transform` is inserted only where a
value enters or leaves such a region (function inputs and outputs, `reshape`, `batch_flatten`,
…); weights are transformed here with NumPy; and a transform that would undo the
one just before it cancels instead of being emitted. A Winograd convolution (`WinogradConv` ran
first) is blocked like a direct one, its transformed weight re-laid out with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op import registry
from autorelay.op.conv import block_channels, is_depthwise, packed_group_block
from autorelay.op.layout import from_canonical_array, parse_layout
from autorelay.op.registry import OpPattern
from autorelay.op.winograd import CONV as WINOGRAD_CONV
from autorelay.te.winograd import block_weight_np
from autorelay.transform.convert_layout_qnn import RULES as QNN_RULES
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import op_name, static_shape, tensor_type

KERNEL = {"NCHW": "OIHW", "NHWC": "HWIO"}
POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")


def _divisor(n: int, limit: int) -> int:
    """The largest divisor of `n` that is at most `limit`."""
    for d in range(min(n, max(limit, 1)), 0, -1):
        if n % d == 0:
            return d
    return 1


def layout_block(lay: str | None, default: int) -> int:
    """The channel block of a value in `NCHW{b}c`, else `default` (plain NCHW, or not tracked)."""
    if lay is not None and lay.startswith("NCHW") and lay.endswith("c") and lay != "NCHW":
        return int(lay[4:-1])
    return default


def channel_block(channels: int, block: int) -> int:
    """The block a conv with `channels` input (or output) channels gets when `block` is asked for:
    the largest divisor of `channels` up to `block`; 0 (stay NCHW) stays 0."""
    return _divisor(channels, block) if block > 0 else 0


def _aligned(shape: tuple, rank: int) -> tuple:
    """`shape` with leading 1s up to `rank` dimensions, as broadcasting reads it."""
    return (1,) * (rank - len(shape)) + tuple(shape)


def _channels(shape: tuple | None, rank: int, ch: int) -> int | None:
    """The channel extent of an operand of `shape` broadcast to `rank` dimensions (None: unknown)."""
    if shape is None or len(shape) > rank:
        return None
    return _aligned(shape, rank)[ch]


def _const(arr: np.ndarray) -> Constant:
    c = Constant(arr)
    c.set_checked_type(c.type)
    return c


class _Converter(ExprMutator):
    def __init__(self, src: str, dst: str, block: int, conv_blocks: tuple, convs: dict[int, int],
                 qnn_block: int) -> None:
        super().__init__()
        self.src, self.dst, self.block, self.qnn_block = src, dst, block, qnn_block
        self.conv_blocks, self.convs = conv_blocks, convs
        self.tracked: dict[int, tuple[Expr, str | None]] = {}
        self.ensured: dict[tuple[int, str | None], Expr] = {}
        self.transforms = 0

    # ---- layouts of values ----------------------------------------------------------------

    def visit(self, expr: Expr) -> Expr:
        """Every generic consumer sees values in their original layout."""
        new, lay = self.track(expr)
        return self.ensure(new, lay, None)

    def track(self, e: Expr) -> tuple[Expr, str | None]:
        hit = self.tracked.get(id(e))
        if hit is not None:
            return hit
        out = self._convert(e) if isinstance(e, Call) else None
        if out is None:
            out = (super().visit(e), None)
        self.tracked[id(e)] = out  # `e` lives in the function being rewritten, so its id is stable
        return out

    def ensure(self, new: Expr, lay: str | None, want: str | None) -> Expr:
        """`new` (in layout `lay`, None = source layout) converted to `want`."""
        lay, want = lay or self.src, want or self.src
        if lay == want:
            return new
        key = (id(new), want)
        if key in self.ensured:
            return self.ensured[key]
        if op_name(new) == "layout_transform" and new.attrs["src_layout"] == want:  # type: ignore[union-attr]
            out = new.args[0]  # type: ignore[union-attr]  # undo the transform just made: cancel
        elif isinstance(new, Constant):
            opdef = registry.get("layout_transform")
            attrs = opdef.make_attrs({"src_layout": lay, "dst_layout": want})
            out = _const(opdef.reference(attrs, new.data))  # weights are packed at compile time
        else:
            out = registry.call("layout_transform", new, src_layout=lay, dst_layout=want)
            self.transforms += 1
        self.ensured[key] = out
        return out

    # ---- per-op rules -----------------------------------------------------------------------

    def _convert(self, c: Call) -> tuple[Expr, str | None] | None:
        name = op_name(c)
        if name is None:
            return None
        if name == "nn.conv2d":
            return self._conv(c)
        if name == WINOGRAD_CONV:
            return self._winograd(c)
        if name in QNN_RULES:
            return QNN_RULES[name](self, c)
        if name == "nn.bias_add":
            return self._bias_add(c)
        if name in POOLS:
            return self._pool(c)
        if name == "concatenate":
            return self._concatenate(c)
        opdef = registry.get(name) if registry.exists(name) else None
        if opdef is None or "axis" in opdef.attrs or "axes" in opdef.attrs:
            return None
        if opdef.pattern == OpPattern.ELEMWISE and len(c.args) == 1:
            x, lay = self.track(c.args[0])
            if lay is None or static_shape(c) != static_shape(c.args[0]):
                return None
            return Call(c.op, (x,), c.attrs), lay
        if opdef.pattern <= OpPattern.BROADCAST and len(c.args) == 2:
            return self._binary(c)
        return None

    def _conv(self, c: Call) -> tuple[Expr, str | None] | None:
        a = c.attrs
        kernel = KERNEL.get(self.src)
        if a["data_layout"] != self.src or a["kernel_layout"] != kernel:
            return None
        if a["out_layout"] not in ("", self.src):
            return None
        xt, wt = tensor_type(c.args[0]), static_shape(c.args[1])
        if xt is None or wt is None:
            return None
        in_c = xt.shape[self.src.index("C")]
        out_c = wt[kernel.index("O")]
        x, lay = self.track(c.args[0])
        if self.dst == "NCHWc":
            if not isinstance(in_c, int):
                return None
            per_group = block_channels(a["groups"], in_c, out_c)
            packed = packed_group_block(a["groups"], in_c, out_c, self._requested(c, lay)[0])
            ic, oc = self._blocks(c, lay, *per_group)
            if ic == 0 or oc == 0:
                return None  # this conv stays in the source layout (its input is converted back)
            if is_depthwise(a["groups"], in_c, out_c):  # one block for input and output channels
                data, kern, out = f"NCHW{ic}c", f"OIHW1i{ic}o", f"NCHW{ic}c"
            elif packed:  # small groups packed whole into one block for input and output
                data, kern, out = f"NCHW{packed}c", f"OIHW{per_group[0]}i{packed}o", f"NCHW{packed}c"
            else:
                data, kern, out = f"NCHW{ic}c", f"OIHW{ic}i{oc}o", f"NCHW{oc}c"
        else:
            data, kern, out = self.dst, KERNEL[self.dst], self.dst
        w = self.ensure(super().visit(c.args[1]), kernel, kern)
        attrs = a.replace(data_layout=data, kernel_layout=kern, out_layout=out if out != data else "")
        return Call(c.op, (self.ensure(x, lay, data), w), attrs), out

    def _winograd(self, c: Call) -> tuple[Expr, str | None] | None:
        """A Winograd conv whose transformed weight is a constant joins the blocked layers around
        it (data NCHW{x}c, weight [P, K/y, C, y], output NCHW{y}c), its blocks chosen as for a
        conv that `conv_blocks` does not address: with `block=0` it stays NCHW."""
        if self.dst != "NCHWc" or c.attrs["data_layout"] != "NCHW" or not isinstance(c.args[1], Constant):
            return None
        u = c.args[1].data
        x, lay = self.track(c.args[0])
        ic, oc = self._blocks(c, lay, u.shape[2], u.shape[1])
        if ic == 0 or oc == 0:
            return None
        data = f"NCHW{ic}c"
        call = Call(c.op, (self.ensure(x, lay, data), _const(block_weight_np(u, oc))),
                    c.attrs.replace(data_layout=data))
        return call, f"NCHW{oc}c"

    def _requested(self, c: Call, lay: str | None) -> tuple[int, int]:
        """The (input, output) blocks asked of this conv: its `conv_blocks` entry, else `block`
        with the input's own block reused; (0, 0) keeps it in NCHW."""
        i = self.convs.get(id(c), -1)
        if 0 <= i < len(self.conv_blocks):
            ic, oc = self.conv_blocks[i]
            return (0, 0) if ic == 0 or oc == 0 else (ic, oc)
        if self.block == 0:
            return 0, 0
        return layout_block(lay, self.block), self.block  # reuse the block the input already has

    def _blocks(self, c: Call, lay: str | None, in_c: int, out_c: int) -> tuple[int, int]:
        """The requested blocks shrunk to divisors of `in_c` and `out_c`."""
        ic, oc = self._requested(c, lay)
        if ic == 0 or oc == 0:
            return 0, 0
        return _divisor(in_c, ic), _divisor(out_c, oc)

    def _bias_add(self, c: Call) -> tuple[Expr, str | None] | None:
        x, lay = self.track(c.args[0])
        t = tensor_type(c.args[0])
        if lay is None or t is None or int(c.attrs["axis"]) % t.ndim != self.src.index("C"):
            return None
        b = super().visit(c.args[1])
        layout = parse_layout("ConvertLayout", lay, self.src)
        if layout.factor("C") is None:
            return Call(c.op, (x, b), c.attrs.replace(axis=layout.index("C"))), lay
        f = layout.factor("C")
        channels = t.shape[self.src.index("C")]
        if not isinstance(channels, int):
            return None
        shape = [channels // f if ax == "C" else f if ax == "c" else 1 for ax in layout.axes]
        return registry.call("add", x, registry.call("reshape", b, newshape=shape)), lay

    def _pool(self, c: Call) -> tuple[Expr, str | None] | None:
        x, lay = self.track(c.args[0])
        if lay is None or c.attrs["layout"] != self.src or c.attrs["out_layout"] not in ("", self.src):
            return None
        return Call(c.op, (x,), c.attrs.replace(layout=lay, out_layout="")), lay

    def _concatenate(self, c: Call) -> tuple[Expr, str | None] | None:
        joined = self.channel_join(c)
        if joined is None:
            return None
        fields, lay, axis = joined
        return Call(c.op, (fields,), c.attrs.replace(axis=axis)), lay

    def channel_join(self, c: Call) -> tuple[Tuple, str, int] | None:
        """A channel concatenation (float or quantized) of values in one layout stays in it (blocks
        are whole channels): (the converted fields, their layout, the new axis), else None."""
        fields = c.args[0]
        t = tensor_type(c)
        if not isinstance(fields, Tuple) or t is None or t.ndim != len(self.src):
            return None
        if int(c.attrs["axis"]) % t.ndim != self.src.index("C"):
            return None
        tracked = [self.track(f) for f in fields.fields]
        lay = tracked[0][1]
        if lay is None or any(fl != lay for _, fl in tracked):
            return None
        axis = parse_layout("ConvertLayout", lay, self.src).index("C")
        return Tuple(tuple(x for x, _ in tracked)), lay, axis

    def _binary(self, c: Call) -> tuple[Expr, str | None] | None:
        """A broadcasting binary op computes in the layout of an operand with the output's channels;
        the other operand comes to that layout, or broadcasts in it: a scalar, a per-channel
        constant, or a value with one channel (a spatial attention map)."""
        pairs = [self.track(a) for a in c.args]
        out_shape = static_shape(c)
        if out_shape is None or len(out_shape) != len(self.src):
            return None
        ch, rank = self.src.index("C"), len(out_shape)
        shapes = [static_shape(a) for a in c.args]
        lay = next((lay for shape, (_, lay) in zip(shapes, pairs)
                    if lay is not None and _channels(shape, rank, ch) == out_shape[ch]), None)
        if lay is None:
            return None
        args = []
        for shape, (new, arg_lay) in zip(shapes, pairs):
            channels = _channels(shape, rank, ch)
            if shape == out_shape:
                args.append(self.ensure(new, arg_lay, lay))
            elif shape is not None and int(np.prod(shape)) == 1 and len(shape) <= len(out_shape):
                args.append(new if len(shape) == 0 else registry.call("reshape", new, newshape=()))
            elif isinstance(new, Constant):
                packed = self._pack_constant(new.data, out_shape, lay)
                if packed is None:
                    return None
                args.append(packed)
            elif channels == out_shape[ch] and len(shape) == rank:  # e.g. a squeeze-excite gate
                args.append(self.ensure(new, arg_lay, lay))
            elif channels == 1:  # in the source layout, then reshaped to broadcast in the blocks
                target = self._one_channel_shape(_aligned(shape, rank), lay)
                args.append(registry.call("reshape", self.ensure(new, arg_lay, None), newshape=target))
            else:
                return None
        return Call(c.op, tuple(args), c.attrs), lay

    def _one_channel_shape(self, aligned: tuple, lay: str) -> tuple[int, ...]:
        """The shape in layout `lay` of a one-channel value of source shape `aligned`: its data order
        does not depend on the layout, so a reshape lays it out, every inner (block) axis of extent 1."""
        layout = parse_layout("ConvertLayout", lay, self.src)
        return tuple(aligned[self.src.index(ax)] if ax.isupper() else 1 for ax in layout.axes)

    def _pack_constant(self, data: np.ndarray, out_shape: tuple, lay: str) -> Constant | None:
        """A per-channel (or channel-independent) constant rearranged to broadcast in layout `lay`."""
        if data.ndim > len(out_shape):
            return None
        aligned = _aligned(data.shape, len(out_shape))
        ch = self.src.index("C")
        if any(d != 1 for i, d in enumerate(aligned) if i != ch):
            return None
        arr = data.reshape(aligned)
        if aligned[ch] == 1:
            return _const(arr.reshape(self._one_channel_shape(aligned, lay)))
        return _const(from_canonical_array(arr, parse_layout("ConvertLayout", lay, self.src), self.src))


@dataclass(frozen=True)
class ConvertLayout(FunctionPass):
    """Convert conv2d data layouts from `src` to `dst` ("NHWC", "NCHW" or "NCHWc")."""

    name: ClassVar[str] = "ConvertLayout"
    requires_types: ClassVar[bool] = True
    dst: str = "NHWC"
    src: str = "NCHW"
    block: int = 16
    conv_blocks: tuple[tuple[int, int], ...] = ()
    qnn_block: int | None = None  # the quantized convolutions' block (0: NCHW); None: `block`

    def __post_init__(self) -> None:
        if self.src not in KERNEL:
            raise ValueError(f"ConvertLayout: src must be one of {sorted(KERNEL)}, got {self.src!r}")
        if self.dst not in (*KERNEL, "NCHWc") or self.dst == self.src:
            raise ValueError(
                f"ConvertLayout: dst must be NCHW, NHWC or NCHWc and differ from src, got {self.dst!r}"
            )
        if self.dst == "NCHWc" and self.src != "NCHW":
            raise ValueError("ConvertLayout: NCHWc packing starts from NCHW")
        blocks = (self.block, self.qnn_block or 0, *(b for pair in self.conv_blocks for b in pair))
        if any(b < 0 for b in blocks):
            raise ValueError(f"ConvertLayout: blocks must be >= 0 (0: keep NCHW), got {self.block}, "
                             f"{self.conv_blocks}, qnn_block {self.qnn_block}")

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        index = {id(n): i for i, n in enumerate(addressable_convs(fn))}
        qnn_block = self.block if self.qnn_block is None else self.qnn_block
        conv = _Converter(self.src, self.dst, self.block, self.conv_blocks, index, qnn_block)
        body = conv.visit(fn.body)
        return fn if body is fn.body else fn.replace(body=body)


def addressable_convs(fn: Function) -> list[Call]:
    """The convolutions `conv_blocks` addresses, in post order: direct and Winograd ones alike, so a
    conv keeps its index whether or not `WinogradConv` rewrote it first (its transformed weight,
    folded to a constant, holds no conv)."""
    return [n for n in post_order(fn) if op_name(n) in ("nn.conv2d", WINOGRAD_CONV)]


def conv_count(fn: Function) -> int:
    """How many convolutions `conv_blocks` may address in `fn` (for a search over block sizes)."""
    return len(addressable_convs(fn))
