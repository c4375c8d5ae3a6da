"""BlockGroupedConvs: the `default` pipeline's grouped convolutions in channel blocks.

The `default` pipeline keeps convolutions in NCHW, where a grouped convolution (groups of
several channels each, as RegNet's and ResNeXt's 3x3 layers have; depthwise ones are not
grouped here) has no template of its own: it ran on the generic reduction schedule, 11-23x
slower than ONNX Runtime (RegNet-X's 32 channels in 2 groups at 64x64: 8.0 ms against 0.34 ms).
The channel-blocked template runs grouped convolutions with a register tile (each output block
reading only its group's input blocks, narrow groups packed several to a block), so this pass
moves just those convolutions into blocks (`ConvertLayout` with `conv_blocks`), with a layout
transform at each end of a run of them; every other layer stays as `default` builds it.
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


def is_grouped(c: Call) -> bool:
    """An NCHW `nn.conv2d` of several groups that is not depthwise (channel multipliers count as
    grouped), its shapes static."""
    if op_name(c) != "nn.conv2d" or c.attrs["groups"] == 1:
        return False
    a = c.attrs
    if (a["data_layout"], a["kernel_layout"], a["out_layout"] or "NCHW") != ("NCHW", "OIHW", "NCHW"):
        return False
    data, out = static_shape(c.args[0]), static_shape(c)
    return data is not None and out is not None and not is_depthwise(a["groups"], data[1], out[1])


@dataclass(frozen=True)
class BlockGroupedConvs(FunctionPass):
    """Pack the grouped convolutions (`is_grouped`) in channel blocks of `block`; run FoldConstant
    and SimplifyExpr after it (the packed weights, back-to-back transforms)."""

    name: ClassVar[str] = "BlockGroupedConvs"
    requires_types: ClassVar[bool] = True
    block: int = 8

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        blocks = tuple((self.block, self.block) if is_grouped(c) else (0, 0) for c in addressable_convs(fn))
        if not any(b for b, _ in blocks):
            return fn
        return ConvertLayout(dst="NCHWc", block=0, conv_blocks=blocks).transform_function(fn, mod, gv)


__all__ = ["BlockGroupedConvs", "is_grouped"]
