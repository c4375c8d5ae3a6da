"""Max and average pooling over windows of channel-blocked NCHW[x]c data (`op.pool_compute`).

A pooling window is a depthwise convolution without weights: each output pixel of a channel
block reduces its window's pixels, each one contiguous vector of the block. So it takes the
depthwise NCHW[x]c template's schedule (`depthwise.DepthwiseNCHWcTemplate`): a register tile of
`tile_oh` rows x `tile_ow` pixels of one block, the taps unrolled over it so that, at stride 1,
one loaded input pixel serves every window of the tile that holds it, and the padding inline
(bounds tests) or as its own pass (`pad`). The generic reduction template vectorized the block but
computed one output vector at a time, loading every tap afresh: a 3x3 stride-1 max pooling of 64
channels at 32x32 (Inception's pool branch) ran 63-82 us, the 3x3 stride-2 pooling of ResNet's
stem (64 channels, 112 -> 56) 175 us.

A pooling that is a convolution's epilogue (`conv_and_pool`) belongs to the fused templates, integer
max pooling (quantized models) to the generic reduction template.
"""

from __future__ import annotations

from autorelay.schedule.templates.base import POOL_TAG, blocked_window_pool, register
from autorelay.schedule.templates.depthwise import DepthwiseNCHWcTemplate
from autorelay.te.tensor import ComputeDef


class Pool2dNCHWcTemplate(DepthwiseNCHWcTemplate):
    """Windowed pooling of NCHW[x]c data, scheduled as a depthwise convolution (module docstring).
    Knobs: the register tile's width and rows, unrolling the window's rows, and padding."""

    name = "pool2d_nchwc"
    tags = (POOL_TAG,)

    def claims(self, cdef: ComputeDef) -> bool:
        return blocked_window_pool(cdef)


register(Pool2dNCHWcTemplate())
