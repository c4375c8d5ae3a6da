"""DepthToSpace and SpaceToDepth: blocks of channels become blocks of pixels and back (a sub-pixel
convolution's pixel shuffle, a space-to-depth stem). Each is a reshape to six axes, one transpose
and a reshape back, so the compiler fuses the move into the kernels around it like any other
layout change instead of running an op of its own.
"""

from __future__ import annotations

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _blocked(g: GraphBuilder, node: NodeView) -> tuple[Expr, tuple[int, int, int, int], int]:
    x = _x(node)
    shape = g.static_shape(x)
    if len(shape) != 4:
        raise node.fail(f"expects a 4-D (N, C, H, W) input, got shape {shape}")
    b = int(node.attr("blocksize", 0))
    if b < 1:
        raise node.fail(f"blocksize must be >= 1, got {b}")
    return x, shape, b  # type: ignore[return-value]


@_reg("DepthToSpace")
def _depth_to_space(g: GraphBuilder, node: NodeView) -> Expr:
    x, (n, c, h, w), b = _blocked(g, node)
    if c % (b * b):
        raise node.fail(f"{c} channels do not divide into blocks of {b}x{b}")
    mode = node.attr("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":  # channel index = (row in block, column in block, output channel)
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":  # channel index = (output channel, row in block, column in block)
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise node.fail(f"mode must be DCR or CRD, got {mode!r}")
    y = g.call("transpose", g.call("reshape", x, newshape=split), axes=perm)
    return g.call("reshape", y, newshape=(n, c // (b * b), h * b, w * b))


@_reg("SpaceToDepth")
def _space_to_depth(g: GraphBuilder, node: NodeView) -> Expr:
    x, (n, c, h, w), b = _blocked(g, node)
    if h % b or w % b:
        raise node.fail(f"a {h}x{w} map does not divide into blocks of {b}x{b}")
    y = g.call("reshape", x, newshape=(n, c, h // b, b, w // b, b))
    y = g.call("transpose", y, axes=(0, 3, 5, 1, 2, 4))
    return g.call("reshape", y, newshape=(n, c * b * b, h // b, w // b))
