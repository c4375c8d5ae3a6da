"""ConvertLayout's rules for the quantized ops (see `convert_layout` for the pass itself).

* `qnn.conv2d` with 8-bit data, a constant int8 weight and a zero weight zero point runs in
  `NCHW{x}c` with its weight packed at compile time for the integer dot-product instructions:
  `OIHW{x/g}i{y}o{g}i` = `[OC/y, C/x, KH, KW, x/g, y, g]`, `g` input channels per instruction lane
  (`te.nn_int8.DOT_GROUP`). The input block `x` is a multiple of `g`; a channel count that is not
  (an RGB image's 3) is padded up to one with the input zero point (real zero) and zero weights,
  which adds nothing to the sums. int8 data is shifted to uint8 first (`vpdpbusd` multiplies
  unsigned by signed bytes; `_as_unsigned`). A depthwise one runs in `NCHW{x}c` with an
  `OIHW1i{x}o` weight (int32 lanes per channel block, no dot instruction, any int8 data), and so
  does one whose small groups a block packs whole (`OIHW{g}i{x}o`, ResNeXt's). Anything else
  (per-channel weight zero points, other grouped or dilated convolutions) stays in NCHW.
* quantize / dequantize / requantize follow the layout of their data: per-tensor parameters as
  they are, per-channel constants re-laid-out to broadcast against the blocked data.
* `qnn.add` with per-tensor parameters keeps its operands' common layout; `qnn.concatenate` on
  the channel axis of values in one layout stays in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr
from autorelay.op.conv import packed_group_block
from autorelay.op.layout import parse_layout
from autorelay.te.nn_int8 import DOT_GROUP
from autorelay.transform.util import static_shape, tensor_type

if TYPE_CHECKING:
    from autorelay.transform.convert_layout import _Converter

# The widest group (in blocks asked for) that runs as a block of its own: ResNeXt-50's last stage,
# 32 channels per group, ran 5.3-5.7 ms per layer in NCHW at 7x7 and runs in about 0.4 ms blocked.
MAX_GROUP_BLOCKS = 4


def _scalar(e: Expr) -> bool:
    shape = static_shape(e)
    return shape is not None and int(np.prod(shape, dtype=np.int64)) == 1


def _input_block(channels: int, want: int) -> int | None:
    """The largest multiple of DOT_GROUP dividing `channels` and at most `want` (else None)."""
    for d in range(min(channels, max(want, DOT_GROUP)), 0, -1):
        if channels % d == 0 and d % DOT_GROUP == 0:
            return d
    return None


def pack_weight(w: np.ndarray, icb: int, ocb: int, g: int = DOT_GROUP) -> np.ndarray:
    """OIHW int8 -> [OC/ocb, C/icb, KH, KW, icb/g, ocb, g] (`OIHW{icb/g}i{ocb}o{g}i`)."""
    o, c, kh, kw = w.shape
    blocks = w.reshape(o // ocb, ocb, c // icb, icb // g, g, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 5, 6, 3, 1, 4))


def _pad_channels(x: Expr, w: np.ndarray, zero_point: Constant, channels: int
                  ) -> tuple[Expr, np.ndarray, int]:
    """NCHW data and OIHW weight padded to a multiple of DOT_GROUP input channels: the data with its
    zero point (real zero), the weight with zeros, so every added product is zero."""
    from autorelay.op import registry

    extra = -channels % DOT_GROUP
    fill = Constant(np.asarray(np.asarray(zero_point.data).reshape(()), "uint8"))
    padded = registry.call("nn.pad", x, fill, pad_width=((0, 0), (0, extra), (0, 0), (0, 0)))
    return padded, np.pad(w, ((0, 0), (0, extra), (0, 0), (0, 0))), channels + extra


def _as_unsigned(x: Expr, zero_point: Constant) -> tuple[Expr, Constant]:
    """int8 data as uint8 with the same real values: every byte + 128 (fused into the producer's
    kernel) and the zero point + 128, so `(x + 128) - (zp + 128) = x - zp` exactly. Then int8 data
    takes the unsigned x signed dot-product path (`vpdpbusd`) like uint8 data."""
    from autorelay.op import registry

    wide = registry.call("cast", x, dtype="int32")
    shifted = registry.call("add", wide, Constant(np.asarray(128, np.int32)))
    zp = int(np.asarray(zero_point.data).reshape(())) + 128
    return registry.call("cast", shifted, dtype="uint8"), Constant(np.asarray(zp, np.int32))


def qdepthwise(conv: _Converter, c: Call, block: int) -> tuple[Expr, str | None] | None:
    """A depthwise qnn.conv2d in NCHW{b}c with its weight as `OIHW1i{b}o` (one vector of int32
    lanes per channel block; no dot-product instruction, so int8 data stays int8); or one of small
    groups of g channels in and out, b/g of them packed whole in each block, `OIHW{g}i{b}o`
    (`packed_group_block`), or one group per block (b = g, up to `MAX_GROUP_BLOCKS` times the
    block asked for); a wider group stays in NCHW."""
    from autorelay.transform.convert_layout import _const, _divisor, layout_block

    xt, weight, kzp, zp = tensor_type(c.args[0]), c.args[1], c.args[3], c.args[2]
    if xt is None or xt.dtype not in ("uint8", "int8") or not isinstance(weight, Constant):
        return None
    w = np.asarray(weight.data)
    channels, groups = int(xt.shape[1]), int(c.attrs["groups"])
    g = channels // groups
    if w.dtype != np.int8 or w.shape[:2] != (channels, g) or not isinstance(kzp, Constant) \
            or np.any(np.asarray(kzp.data)) or not (isinstance(zp, Constant) and _scalar(zp)):
        return None
    x, lay = conv.track(c.args[0])
    want = layout_block(lay, block)
    if g == 1:
        b = _divisor(channels, want)
    else:  # no dot-product form takes groups, and NCHW's is slow: a wider group is a block of its own
        b = packed_group_block(groups, channels, channels, want) or (g if g <= MAX_GROUP_BLOCKS * want else 0)
    if b == 0:
        return None
    _, _, kh, kw = w.shape
    packed = w.reshape(channels // b, b, g, kh, kw).transpose(0, 3, 4, 2, 1)[:, None]
    data = f"NCHW{b}c"
    attrs = c.attrs.replace(data_layout=data, kernel_layout=f"OIHW{g}i{b}o", out_layout="")
    args = (conv.ensure(x, lay, data), _const(np.ascontiguousarray(packed)),
            *(conv.visit(e) for e in c.args[2:]))
    return Call(c.op, args, attrs), data


def qconv(conv: _Converter, c: Call) -> tuple[Expr, str | None] | None:
    a = c.attrs
    if conv.dst != "NCHWc" or conv.qnn_block == 0:
        return None
    if (a["data_layout"], a["kernel_layout"]) != ("NCHW", "OIHW"):
        return None
    if a["out_layout"] not in ("", "NCHW") or tuple(a["dilation"]) != (1, 1):
        return None
    xt = tensor_type(c.args[0])
    if a["groups"] != 1:
        ws = static_shape(c.args[1])
        # depthwise or small groups: as many output as input channels (qdepthwise checks the rest)
        in_block = xt is not None and ws is not None and ws[0] == xt.shape[1]
        return qdepthwise(conv, c, conv.qnn_block) if in_block else None
    xt, weight, kzp, zp = tensor_type(c.args[0]), c.args[1], c.args[3], c.args[2]
    if xt is None or xt.dtype not in ("uint8", "int8") or not isinstance(weight, Constant):
        return None
    w = np.asarray(weight.data)
    if w.dtype != np.int8 or not isinstance(kzp, Constant) or np.asarray(kzp.data).size != 1 \
            or int(np.asarray(kzp.data).reshape(())) != 0:
        return None
    if xt.dtype == "int8" and not (isinstance(zp, Constant) and _scalar(zp)):
        return None
    in_c, out_c = int(xt.shape[1]), int(w.shape[0])
    x, lay = conv.track(c.args[0])
    if xt.dtype == "int8":
        x, zp = _as_unsigned(x, zp)  # type: ignore[arg-type]
    if in_c % DOT_GROUP:
        if lay is not None or not isinstance(zp, Constant) or not 0 <= np.asarray(zp.data).ravel()[0] < 256:
            return None
        x, w, in_c = _pad_channels(x, w, zp, in_c)
    from autorelay.transform.convert_layout import _const, _divisor, layout_block

    want = layout_block(lay, conv.qnn_block)  # the block the input already has, if a group divides it
    icb = _input_block(in_c, want) or _input_block(in_c, conv.qnn_block)
    if icb is None:
        return None

    ocb = _divisor(out_c, conv.qnn_block)  # `conv_blocks` addresses float convolutions only
    data, out = f"NCHW{icb}c", f"NCHW{ocb}c"
    kern = f"OIHW{icb // DOT_GROUP}i{ocb}o{DOT_GROUP}i"
    attrs = a.replace(data_layout=data, kernel_layout=kern, out_layout=out if out != data else "")
    args = (conv.ensure(x, lay, data), _const(pack_weight(w, icb, ocb)), zp if zp is not c.args[2]
            else conv.visit(zp), *(conv.visit(e) for e in c.args[3:]))
    return Call(c.op, args, attrs), out


def _blocked_param(conv: _Converter, e: Expr, lay: str, axis: int, ndim: int) -> Expr | None:
    """A qnn parameter for data now in `lay`: scalars as they are, a per-channel constant along
    the source layout's channel axis re-laid-out to broadcast; else None (no conversion)."""
    if _scalar(e):
        return conv.visit(e)
    if not isinstance(e, Constant) or axis != conv.src.index("C") or ndim != len(conv.src):
        return None
    v = np.asarray(e.data).reshape(-1)
    layout = parse_layout("ConvertLayout", lay, conv.src)
    f = layout.factor("C")
    if f is None or v.size % f:
        return None
    from autorelay.transform.convert_layout import _const

    shape = [v.size // f if ax == "C" else f if ax == "c" else 1 for ax in layout.axes]
    return _const(v.reshape(shape))


def qparams(conv: _Converter, c: Call) -> tuple[Expr, str | None] | None:
    """quantize / dequantize / requantize in their data's layout."""
    x, lay = conv.track(c.args[0])
    t = tensor_type(c.args[0])
    if lay is None or t is None:
        return None
    axis = int(c.attrs["axis"]) % max(t.ndim, 1)
    params = [_blocked_param(conv, p, lay, axis, t.ndim) for p in c.args[1:]]
    if any(p is None for p in params):
        return None
    channel = conv.src.index("C")
    new_axis = parse_layout("ConvertLayout", lay, conv.src).index("C") if axis == channel else axis
    return Call(c.op, (x, *params), c.attrs.replace(axis=new_axis)), lay  # type: ignore[arg-type]


def qadd(conv: _Converter, c: Call) -> tuple[Expr, str | None] | None:
    """Same-shaped operands with per-tensor parameters: computed in the layout of the first blocked
    operand (the other is transformed to it, as for a float add)."""
    (lhs, ll), (rhs, rl) = conv.track(c.args[0]), conv.track(c.args[1])
    lay = ll or rl
    if lay is None or static_shape(c.args[0]) != static_shape(c.args[1]):
        return None
    if not all(_scalar(p) for p in c.args[2:]):
        return None
    args = (conv.ensure(lhs, ll, lay), conv.ensure(rhs, rl, lay), *(conv.visit(p) for p in c.args[2:]))
    return Call(c.op, args, c.attrs), lay


def qconcatenate(conv: _Converter, c: Call) -> tuple[Expr, str | None] | None:
    joined = conv.channel_join(c)
    if joined is None:
        return None
    fields, lay, axis = joined
    rest = tuple(conv.visit(p) for p in c.args[1:])
    return Call(c.op, (fields, *rest), c.attrs.replace(axis=axis)), lay


RULES = {"qnn.conv2d": qconv, "qnn.quantize": qparams, "qnn.dequantize": qparams, "qnn.requantize": qparams,
         "qnn.add": qadd, "qnn.concatenate": qconcatenate}
