"""Which pairs of anchors may share one kernel: the exceptions to FuseOps' one-anchor rule.

A fused group normally holds one anchor (a convolution, a pooling, a reduction), because each
anchor's template schedules one reduction. Some templates schedule a pair (or a triple):

* a max pooling as a blocked convolution's epilogue (`FusionPlan.pool_epilogues`;
  `conv2d_nchwc_pool`, `conv2d_winograd_nchwc_pool`): `pool_epilogue_fits`;
* a depthwise convolution computed per band of rows inside the 1x1 convolution that reads it
  (`FusionPlan.depthwise_bands`; `conv2d_nchwc_dwpw`): `depthwise_band_fits`; and the convolution
  producing that depthwise convolution's input, computed per band too (`FusionPlan.expansions`):
  `expansion_fits`.

The rules here say exactly what those templates can schedule, so FuseOps never makes a kernel that
only a generic template would take.
"""

from __future__ import annotations

import math

from autorelay.ir.expr import Call, Expr
from autorelay.op.conv_compute import direct_nchwc, packed_groups
from autorelay.op.pool import windows_inside, windows_tile
from autorelay.op.registry import OpPattern
from autorelay.op.winograd import CONV as WINOGRAD_CONV
from autorelay.op.winograd import data_block
from autorelay.transform.fusion_graph import op_pattern
from autorelay.transform.util import op_name, tensor_type

EPILOGUE_PATTERNS = (OpPattern.ELEMWISE, OpPattern.BROADCAST)  # a convolution's tail: bias, ReLU


def fusable_pooling(pool: Expr) -> bool:
    """Whether `pool` is a max pooling that may run as a convolution's epilogue: its shapes static
    and its windows inside its input (`windows_inside`), so a tile of pooled rows needs only a
    band of the convolution's rows, never a border."""
    if op_name(pool) != "nn.max_pool2d":
        return False
    assert isinstance(pool, Call)
    data, out = tensor_type(pool.args[0]), tensor_type(pool)
    if data is None or out is None:
        return False
    in_hw, out_hw = tuple(data.shape[2:4]), tuple(out.shape[2:4])
    static = all(isinstance(d, int) for d in (*in_hw, *out_hw))
    return static and windows_inside(pool.attrs, in_hw, out_hw)  # type: ignore[arg-type]


def pools_an_activation(pool: Expr) -> bool:
    """Whether `pool` is a `fusable_pooling` that reads an elementwise or broadcast op (a
    convolution's tail: bias, ReLU), the only pooling a convolution's group may take."""
    return fusable_pooling(pool) and op_pattern(pool.args[0]) in EPILOGUE_PATTERNS  # type: ignore[attr-defined]


def pool_epilogue_fits(conv: Expr, pool: Call) -> bool:
    """Whether `pool` may run in the kernel of `conv` (`FusionPlan.pool_epilogues`), a float32
    convolution in a channel-blocked layout and a `fusable_pooling` in its output layout:

    * a direct NCHW[x]c convolution (the `conv2d_nchwc_pool` template computes the band of rows
      each tile of pooled rows reads and pools it from the cache);
    * a blocked Winograd convolution whose pooling windows equal their strides and divide its
      output tile (`conv2d_winograd_nchwc_pool` pools each unit's tile rows as it transforms them).
    """
    ct = tensor_type(conv)
    if not fusable_pooling(pool) or ct is None or ct.dtype != "float32":
        return False
    assert isinstance(conv, Call)
    if op_name(conv) == "nn.conv2d" and direct_nchwc(conv.attrs):
        layout = conv.attrs["out_layout"] or conv.attrs["data_layout"]
    elif op_name(conv) == WINOGRAD_CONV and data_block(conv.attrs["data_layout"]):
        u = tensor_type(conv.args[1])
        if u is None or not isinstance(u.shape[0], int):
            return False
        tile = math.isqrt(u.shape[0]) - 2  # U is [(tile + 2)^2, K/y, C, y]
        if not windows_tile(pool.attrs["pool_size"], pool.attrs["strides"], tile):
            return False
        layout = f"NCHW{u.shape[-1]}c"
    else:
        return False
    return pool.attrs["layout"] == layout and (pool.attrs["out_layout"] or layout) == layout


def _static_float32(e: Expr) -> bool:
    t = tensor_type(e)
    return t is not None and t.dtype == "float32" and all(isinstance(d, int) for d in t.shape)


def _layout(c: Call) -> str:
    return c.attrs["out_layout"] or c.attrs["data_layout"]


def _activation_of(conv: Call, tail: Expr) -> bool:
    """Whether `tail` is `conv` or the end of an elementwise tail of it of the same shape (the
    stage a fused kernel stores, activated), both float32 and static."""
    if not all(_static_float32(e) for e in (conv, tail)):
        return False
    if tuple(tensor_type(conv).shape) != tuple(tensor_type(tail).shape):  # type: ignore[union-attr]
        return False
    return tail is conv or op_pattern(tail) in EPILOGUE_PATTERNS


def depthwise_band_fits(depthwise: Expr, band: Expr, pointwise: Call) -> bool:
    """Whether `depthwise`, whose elementwise tail ends in `band` (or `band` itself), may run per
    band of rows in the kernel of `pointwise`, which reads `band` (`FusionPlan.depthwise_bands`):

    * `depthwise` a float32 depthwise convolution in NCHW[b]c (`packed_groups` 1: the
      `depthwise_nchwc` compute), any kernel, stride, padding or dilation;
    * `pointwise` a float32 direct 1x1 NCHW[b]c convolution (no groups) on the same layout,
      unstrided and unpadded, so each of its output rows reads exactly one row of the band;
    * `band` of the depthwise output's shape, so the band buffer is the depthwise output's rows.
    """
    if op_name(depthwise) != "nn.conv2d" or op_name(pointwise) != "nn.conv2d":
        return False
    assert isinstance(depthwise, Call)
    static = all(_static_float32(e) for e in (depthwise.args[0], pointwise))
    if not static or not _activation_of(depthwise, band):
        return False
    if packed_groups(depthwise.attrs, tuple(tensor_type(depthwise.args[0]).shape)) != 1:  # type: ignore[union-attr]
        return False
    pa = pointwise.attrs
    weight = tensor_type(pointwise.args[1])
    if weight is None or pa["groups"] != 1 or not direct_nchwc(pa):
        return False
    one_by_one = tuple(weight.shape[2:4]) == (1, 1)
    plain = all(s == 1 for s in pa["strides"]) and all(p == 0 for p in pa["padding"])
    return one_by_one and plain and pa["data_layout"] == _layout(depthwise)


def expansion_fits(expansion: Expr, tail: Expr, depthwise: Call) -> bool:
    """Whether `expansion`, whose elementwise tail ends in `tail` (or `tail` itself), may run inside
    the kernel of a depthwise band whose depthwise convolution `depthwise` reads `tail`
    (`FusionPlan.expansions`): `expansion` a float32 static direct NCHW[b]c convolution without
    groups whose output layout is `depthwise`'s input layout (MobileNet-v2's 1x1 expansions; a
    network's first 3x3 convolution before its first depthwise one), and `tail` of its shape."""
    if op_name(expansion) != "nn.conv2d":
        return False
    assert isinstance(expansion, Call)
    if not _activation_of(expansion, tail):
        return False
    ea = expansion.attrs
    return ea["groups"] == 1 and direct_nchwc(ea) and _layout(expansion) == depthwise.attrs["data_layout"]
