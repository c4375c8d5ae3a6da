"""WinogradConv: stride-1 3x3 convolutions with constant weights by Winograd F(2x2, 3x3) or F(4x4, 3x3).

`nn.conv2d(x, W)` becomes `nn.conv2d_winograd(x, nn.winograd_weight_transform(W, tile=m))`; the
following FoldConstant computes the transformed weight once. The rewrite applies to NCHW/OIHW
float32 convolutions with groups 1, dilation 1, stride 1 and a 3x3 kernel whose weight is a
constant, and only when both channel counts reach `min_channels`: Winograd trades 2.25x fewer
multiply-adds for two memory-bound transforms, which a convolution with few channels (an RGB
stem) cannot pay back. On the stride-1 shapes of ResNet-18 and VGG-16 (64 to 512 channels) the
rewritten kernel's default schedule ran at 0.87-2.05x the direct kernel's default
(`benchmarks/kernels.py --only winograd --sweep 0`, noisy host) and, tuned, at 1.15-1.66x
PyTorch's conv2d on ResNet-18's four shapes (`benchmarks/tune_kernels.py --only resnet`). The
threshold of 32 channels sits below every shape measured and above RGB stems; it is not a
measured crossover. The output must also be at least `min_size` (7) pixels high and wide: a map of
a few 2x2 tiles pays the transforms for almost no saved work. Measured on single conv + relu layers
(default schedules, one thread, an Intel AVX-512 host), direct / Winograd time: 0.23-0.54x at
outputs of 1-4 pixels (64-512 channels), 0.69-0.83x at 5-6, 1.00-1.34x at 7-28 (ResNet-18 at 32x32
ran 3x slower with Winograd than without, its deep layers having 1-4 pixel maps).

Which tile: `tile` (default 2) for every eligible convolution, unless `tiles` names one for it:
pairs (i, tile) for the i-th `nn.conv2d` in post order, as `ConvertLayout.conv_blocks` counts
them; tile 0 leaves it direct. A per-layer layout plan fills `tiles` with what it measured
fastest: on an AVX-512 host with 2 threads F(4x4) ran 1.2-1.5x faster than F(2x2) on ResNet-18's
56, 28 and 14 pixel maps and 2x slower on its 7 pixel map, whose 36-position weight (4x the direct
one) is streamed from memory for 4 tiles. A convolution that `tiles` names is rewritten whatever
its channel count and size (the plan measured it), but only if it has the form the op computes.

F(2x2, 3x3) changes the rounding, not the result: errors stay at a few float32 ulps of the
output's magnitude (the transforms' coefficients are 0, +-1/2 and +-1). F(4x4, 3x3) is rougher
(coefficients up to 8 and 1/24): the bound accepted and tested is a maximum error of 1e-4 of the
output's largest magnitude for channels up to 512 (measured: about 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator, post_order
from autorelay.op.registry import call
from autorelay.op.winograd import CONV, TILE_SIZES, WEIGHT_TRANSFORM
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import op_name, tensor_type


def eligible(c: Call, min_channels: int, min_size: int = 7) -> bool:
    """Whether `c` is a convolution the rewrite applies to (see the module docstring); with
    `min_channels = min_size = 0`, whether the op can compute it at all."""
    if op_name(c) != "nn.conv2d" or not isinstance(c.args[1], Constant):
        return False
    a = c.attrs
    data, weight = tensor_type(c.args[0]), tensor_type(c.args[1])
    if data is None or weight is None or data.dtype != "float32" or weight.dtype != "float32":
        return False
    layouts = (a["data_layout"], a["kernel_layout"], a["out_layout"] or a["data_layout"])
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return False
    if a["out_dtype"] not in ("", None, "float32") or a["groups"] != 1:
        return False
    if tuple(a["strides"]) != (1, 1) or tuple(a["dilation"]) != (1, 1):
        return False
    shape = weight.shape
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape) or tuple(shape[2:]) != (3, 3):
        return False
    pt, pl, pb, pr = a["padding"]  # normalised to (top, left, bottom, right)
    h, w = data.shape[2], data.shape[3]
    if not (isinstance(h, int) and isinstance(w, int)) or min(h + pt + pb - 2, w + pl + pr - 2) < min_size:
        return False
    return shape[0] >= min_channels and shape[1] >= min_channels


class _Rewrite(ExprMutator):
    def __init__(self, pass_: WinogradConv, index: dict[int, int]) -> None:
        super().__init__()
        self.p, self.index, self.named = pass_, index, dict(pass_.tiles)

    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def _tile(self, c: Call) -> int:
        named = self.named.get(self.index.get(id(c), -1))
        if named is not None:
            return named if eligible(c, 0, 0) else 0
        return self.p.tile if eligible(c, self.p.min_channels, self.p.min_size) else 0

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        tile = self._tile(c) if op_name(c) == "nn.conv2d" else 0
        if not (isinstance(new, Call) and tile):
            return new
        u = call(WEIGHT_TRANSFORM, new.args[1], tile=tile)
        return call(CONV, new.args[0], u, padding=tuple(c.attrs["padding"]))


@dataclass(frozen=True)
class WinogradConv(FunctionPass):
    """Rewrite eligible 3x3 stride-1 convolutions to Winograd F(tile x tile, 3x3), or each to the
    tile `tiles` names for it (0: direct); run FoldConstant after."""

    min_channels: int = 32
    min_size: int = 7  # output height and width
    tile: int = 2
    tiles: tuple[tuple[int, int], ...] = ()  # (conv index, tile or 0)
    name: ClassVar[str] = "WinogradConv"
    requires_types: ClassVar[bool] = True

    def __post_init__(self) -> None:
        bad = [t for t in (self.tile, *(t for _, t in self.tiles)) if t not in (0, *TILE_SIZES)]
        if bad or self.tile == 0:
            raise ValueError(f"WinogradConv: tiles must be one of {TILE_SIZES} (or 0 in `tiles`: direct), "
                             f"got tile={self.tile}, tiles={self.tiles}")

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        convs = [n for n in post_order(fn) if op_name(n) == "nn.conv2d"]
        out = _Rewrite(self, {id(n): i for i, n in enumerate(convs)}).visit(fn)
        assert isinstance(out, Function)
        return out
