"""BlockGroupedConvs: the `default` pipeline's grouped and dilated convolutions in channel blocks.

The `default` pipeline keeps convolutions in NCHW, where two kinds run far below the blocked
template:

* a grouped convolution (groups of several channels each, as RegNet's and ResNeXt's 3x3 layers
  have; depthwise ones are not grouped here) has no NCHW template of its own: it ran on the
  generic reduction schedule, 11-23x slower than ONNX Runtime (RegNet-X's 32 channels in 2 groups
  at 64x64: 8.0 ms against 0.34 ms). The blocked template reads each output block's group only,
  narrow groups packed several to a block;
* a dilated convolution (the atrous layers of DeepLab's and FCN's backbones and pyramids) is not
  Winograd's and ran on the NCHW direct template at a half to a third of the blocked one's speed
  (3x3 at dilation 2: 2048 → 256 channels on 16x16, 60 against 28 ms; 960 → 256 on 8x8, 10.8
  against 3.1 ms), and only in blocks can `SplitConvBands` skip the taps that read padding.

This pass moves just those convolutions into blocks (`ConvertLayout` with `conv_blocks`), with a
layout transform at each end of a run of them; every other layer stays as `default` builds it.
A layout plan's pipeline runs it too, on the convolutions the plan leaves in NCHW
(`layout_plan.plan_passes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Function, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.op.conv import is_depthwise
from autorelay.transform.convert_layout import ConvertLayout, addressable_convs
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import op_name, static_shape


def needs_blocks(c: Call) -> bool:
    """An NCHW `nn.conv2d`, its shapes static and not depthwise (the NCHW depthwise template is
    the faster), that is grouped (channel multipliers count as grouped) or dilated."""
    if op_name(c) != "nn.conv2d":
        return False
    a = c.attrs
    if (a["data_layout"], a["kernel_layout"], a["out_layout"] or "NCHW") != ("NCHW", "OIHW", "NCHW"):
        return False
    data, out = static_shape(c.args[0]), static_shape(c)
    if data is None or out is None or is_depthwise(a["groups"], data[1], out[1]):
        return False
    return a["groups"] > 1 or tuple(a["dilation"]) != (1, 1)


@dataclass(frozen=True)
class BlockGroupedConvs(FunctionPass):
    """Pack the grouped and dilated convolutions (`needs_blocks`) in channel blocks of `block`;
    run FoldConstant, SimplifyExpr and SplitConvBands after it (the packed weights, back-to-back
    transforms, the dilated taps that read padding)."""

    name: ClassVar[str] = "BlockGroupedConvs"
    requires_types: ClassVar[bool] = True
    block: int = 8

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        blocks = tuple((self.block, self.block) if needs_blocks(c) else (0, 0) for c in addressable_convs(fn))
        if not any(b for b, _ in blocks):
            return fn
        return ConvertLayout(dst="NCHWc", block=0, conv_blocks=blocks).transform_function(fn, mod, gv)


__all__ = ["BlockGroupedConvs", "needs_blocks"]
