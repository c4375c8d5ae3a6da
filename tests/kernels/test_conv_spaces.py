"""The conv templates' spaces. NCHW: every cache block of input channels, with ragged
register tiles in every direction and every reduction order, computes the convolution; depthwise:
every row tile, unrolled or not, with either padding."""

from __future__ import annotations

import itertools

import kernel_oracles as H
import numpy as np
import pytest

from autorelay.codegen.llvm.host import host_target
from autorelay.kernel import compile_kernel
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from autorelay.te import nn, nn_depthwise
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu


def _conv(stride: int):
    x, w = te.placeholder((1, 32, 9, 11), name="X"), te.placeholder((20, 32, 3, 3), name="W")
    return te.make_def([x, w], nn.conv2d_nchw(x, w, stride, 1), "conv")


def test_channel_blocks_are_in_the_space():
    cdef = _conv(1)
    space = template_for(cdef).space(cdef, host_target())
    assert space.knob("tile_ic").values == (8, 16, 0)  # 0: all channels, no cache blocking
    assert len(space) > 10_000


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("tile_ic", [8, 16, 0])
def test_blocked_channels_with_ragged_tiles_match_numpy(stride, tile_ic):
    cdef = _conv(stride)
    target = host_target(threads=2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 9, 11), dtype=np.float32)
    w = rng.standard_normal((20, 32, 3, 3), dtype=np.float32)
    expect = H.conv_nchw(x, w, stride, 1)
    orders = ("c_h_w", "h_w_c", "co_h_w_ci")
    # 20 channels = 2 vectors + a ragged half; widths 3 and 4 leave ragged tails of 11 / 6
    for order, (tv, tow, toh), uc, pad in zip(
        itertools.cycle(orders), [(1, 4, 3), (2, 3, 2), (3, 4, 1)], (1, 2, 4), ("root", "inline", "root")
    ):
        cfg = Config("conv2d_nchw", (
            ("tile_oc_vectors", tv), ("tile_ow", tow), ("tile_oh", toh), ("tile_ic", tile_ic),
            ("reduce_order", order), ("unroll_c", uc), ("unroll_kw", 1), ("outer", "oh"), ("pad", pad),
        ))
        got = compile_kernel(cdef, cfg, target).run(x, w)
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg.as_dict()))


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_row_tiles_match_numpy(stride):
    """Every row tile (ragged against 9 or 5 output rows), unrolled or not, either padding."""
    x = te.placeholder((1, 6, 9, 19), name="X")
    w = te.placeholder((6, 1, 3, 3), name="W")
    cdef = te.make_def([x, w], nn_depthwise.depthwise_conv2d_nchw(x, w, stride, 1), "dw")
    target = host_target(threads=2)
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((1, 6, 9, 19), dtype=np.float32)
    ws = rng.standard_normal((6, 1, 3, 3), dtype=np.float32)
    expect = H.conv_nchw(xs, ws, stride, 1, groups=6)
    for toh, unroll_kh, pad in itertools.product((1, 2, 3, 4), (0, 1), ("root", "inline")):
        knobs = (("tile_ow_vectors", 2), ("tile_oh", toh), ("unroll_kh", unroll_kh), ("unroll_kw", 1),
                 ("pad", pad))
        cfg = Config("depthwise_conv2d_nchw", knobs)
        got = compile_kernel(cdef, cfg, target).run(xs, ws)
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg.as_dict()))


def test_pointwise_register_tiles_match_numpy():
    """Every register tile of the 1x1 GEMM template against 13 output channels and 63 pixels (7
    rows of 9: tiles span rows, the last pixel tile is shifted back), in both block orders."""
    x = te.placeholder((1, 12, 7, 9), name="X")
    w = te.placeholder((13, 12, 1, 1), name="W")
    cdef = te.make_def([x, w], nn.conv2d_1x1_nchw(x, w), "pointwise")
    target = host_target(threads=2)
    space = template_for(cdef).space(cdef, target)
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((1, 12, 7, 9), dtype=np.float32)
    ws = rng.standard_normal((13, 12, 1, 1), dtype=np.float32)
    expect = H.conv_nchw(xs, ws, 1, 0)
    tiles = itertools.product(space.knob("tile_k").values, space.knob("tile_p_vectors").values)
    for n, (tk, pv) in enumerate(tiles):
        knobs = (("tile_k", tk), ("tile_p_vectors", pv), ("outer", ("k", "p")[n % 2]), ("unroll_c", 4))
        cfg = Config("conv2d_1x1_nchw", knobs)
        got = compile_kernel(cdef, cfg, target).run(xs, ws)
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg.as_dict()))


@pytest.mark.parametrize("cpu", ["znver3", "znver5"])
def test_pointwise_default_pixel_tile_fits_the_map(cpu):
    """On either vector width the default 1x1 tile spans no more pixels than the map has (one
    vector where the map is narrower than that): its last tile then shifts back to end with the
    map; a wider one had every pixel guarded, 10-30x slower on a 3x3 map."""
    from autorelay.codegen import resolve_target

    target = resolve_target(f"llvm -mcpu={cpu}", 1)
    lanes = target.vector_lanes()
    for height, width in ((1, 1), (2, 2), (3, 3), (1, 15), (1, lanes + 1), (5, 5), (7, 7), (14, 14)):
        x = te.placeholder((1, 16, height, width), name="X")
        w = te.placeholder((24, 16, 1, 1), name="W")
        cdef = te.make_def([x, w], nn.conv2d_1x1_nchw(x, w), "pointwise")
        pixels = template_for(cdef).default(cdef, target)["tile_p_vectors"] * lanes
        assert pixels <= max(height * width, lanes), (cpu, height, width, pixels)


def _conv_nchwc(stride: int, height: int, width: int, block: int):
    x = te.placeholder((1, 32 // block, height, width, block), name="X")
    w = te.placeholder((64 // block, 32 // block, 3, 3, block, block), name="W")
    return te.make_def([x, w], nn.conv2d_nchwc(x, w, stride, 1), "conv_nchwc")


@pytest.mark.parametrize("stride", [1, 2])
def test_nchwc_row_tiles_match_numpy(stride):
    """Every row tile of the NCHW[x]c template, ragged against 9 (stride 1) or 5 output rows and
    with ragged width tiles, in both reduction orders and both paddings."""
    target = host_target(threads=2)
    block = target.vector_lanes()
    cdef = _conv_nchwc(stride, 9, 11, block)
    space = template_for(cdef).space(cdef, target)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((1, 32, 9, 11), dtype=np.float32)
    ws = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    expect = H.to_nchwc(H.conv_nchw(xs, ws, stride, 1), block)
    args = (H.to_nchwc(xs, block), H.kernel_to_oihwio(ws, block, block))
    rows = space.knob("tile_oh").values
    assert len(rows) > 1
    tiles = itertools.cycle([(4, 2), (3, 1), (2, 4)])
    orders, pads = itertools.cycle(("c_hw_ci", "hw_c_ci")), itertools.cycle(("inline", "root"))
    for toh, (tow, tb), order, pad in zip(rows, tiles, orders, pads):
        tb = min(tb, 64 // block)
        cfg = Config("conv2d_nchwc", (("tile_ow", tow), ("tile_oc_blocks", tb), ("reduce_order", order),
                                      ("unroll_kw", 1), ("pad", pad), ("tile_oh", toh), ("pass_rows", 0)))
        got = compile_kernel(cdef, cfg, target).run(*args)
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg.as_dict()))


@pytest.mark.parametrize("cpu", ["znver3", "znver5"])
def test_nchwc_default_tile_fits_the_registers(cpu):
    """On either vector width the default register tile (rows x pixels x channel blocks) and its
    weight vectors fit the registers, less one for the broadcast where multiply-adds cannot take
    it from memory (AVX2); a 7-pixel-wide output, too narrow to fill the registers in one row of
    two blocks, gets more rows or more blocks than one row of two; a small output (its weights
    stream from memory) gets at least as many weight vectors per pixel as a large one."""
    from autorelay.codegen import resolve_target

    target = resolve_target(f"llvm -mcpu={cpu}", 1)
    lanes = target.vector_lanes()
    spare = 0 if target.has("avx512f") else 1
    blocks = {}
    for height in (7, 28):
        cdef = _conv_nchwc(1, height, height, lanes)
        c = template_for(cdef).default(cdef, target)
        vectors = c["tile_oc_blocks"]  # one vector per block: the block is the vector width here
        assert (c["tile_oh"] * c["tile_ow"] + 1) * vectors + spare <= target.vector_registers, c
        if height == 7:  # the weights stream from memory: one pass over them for the whole output
            assert c["tile_oh"] > 1 or vectors > 2, c
            assert c["pass_rows"] == height, c
        else:
            assert c["pass_rows"] == 0, c
        blocks[height] = vectors
    assert blocks[7] >= blocks[28]


@pytest.mark.parametrize("order", ["c_hw_ci", "hw_c_ci"])
def test_nchwc_weight_passes_match_numpy(order):
    """Every number of rows a weight pass may span (ragged against 9 output rows), with ragged row
    and width tiles inside it, in both reduction orders."""
    target = host_target(threads=2)
    block = target.vector_lanes()
    cdef = _conv_nchwc(1, 9, 11, block)
    space = template_for(cdef).space(cdef, target)
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((1, 32, 9, 11), dtype=np.float32)
    ws = rng.standard_normal((64, 32, 3, 3), dtype=np.float32)
    expect = H.to_nchwc(H.conv_nchw(xs, ws, 1, 1), block)
    args = (H.to_nchwc(xs, block), H.kernel_to_oihwio(ws, block, block))
    passes = [r for r in space.knob("pass_rows").values if r]
    assert passes and max(passes) == 9
    for rows, (tow, toh) in zip(passes, itertools.cycle([(4, 2), (3, 1), (11, 3)])):
        cfg = Config("conv2d_nchwc", (("tile_ow", tow), ("tile_oc_blocks", min(2, 64 // block)),
                                      ("reduce_order", order), ("unroll_kw", 1), ("pad", "root"),
                                      ("tile_oh", toh), ("pass_rows", rows)))
        got = compile_kernel(cdef, cfg, target).run(*args)
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg.as_dict()))
