"""Winograd in channel blocks (`conv2d_winograd_nchwc`): the kernel under its default and sampled
configs on both vector widths against a direct convolution (NumPy), the op's blocked reference and
type errors, and `ConvertLayout` blocking a Winograd convolution among blocked layers — a built
model checked against the reference interpreter on the un-rewritten program."""

from __future__ import annotations

import random

import kernel_oracles as H
import numpy as np
import pytest
from test_winograd import resnet_block

import autorelay
from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_target
from autorelay.errors import TypeCheckError
from autorelay.ir import Call, Function, IRModule, TensorType, Var, post_order
from autorelay.ir.attrs import Attrs
from autorelay.kernel import compile_kernel, emit_kernel
from autorelay.op.registry import call
from autorelay.op.winograd import conv_reference
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from autorelay.schedule.templates.winograd_nchwc import STAGED
from autorelay.te import tensor as te
from autorelay.te import winograd as W
from autorelay.transform import FoldConstant, Pipeline
from autorelay.transform.convert_layout import ConvertLayout
from autorelay.transform.pipelines import BLOCKED_WINOGRAD_MIN_SIZE
from autorelay.transform.winograd_conv import WinogradConv
from autorelay.typing import infer_types

pytestmark = pytest.mark.cpu

AVX2 = resolve_target("llvm -mcpu=haswell -threads=2")


def _blocked(x: np.ndarray, b: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _case(n, c, k, h, w, pad, ic, oc, tile, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((k, c, 3, 3), dtype=np.float32)
    pt, pl, pb, pr = pad
    want = H.conv_nchw(np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))), wt, 1, 0)
    u = W.block_weight_np(W.weight_transform_np(wt, tile), oc)
    xd, ud = te.placeholder((n, c // ic, h, w, ic), name="X"), te.placeholder(u.shape, name="U")
    cdef = te.make_def([xd, ud], W.conv2d_winograd_nchwc(xd, ud, pad), "winograd")
    return cdef, [_blocked(x, ic), u], _blocked(want, oc)


# (N, C, K, H, W, padding, input block, output block): tiles that overhang the output, asymmetric
# and no padding, batch 2, input and output blocks that differ, a block wider than an AVX2 vector
SHAPES = [
    (1, 8, 16, 10, 10, (1, 1, 1, 1), 8, 16),
    (2, 16, 8, 7, 13, (0, 2, 1, 0), 4, 8),
    (1, 32, 32, 9, 9, (0, 0, 0, 0), 16, 16),
]


@pytest.mark.parametrize("tile", W.TILE_SIZES)
@pytest.mark.parametrize("target", [host_target(threads=2), AVX2], ids=["host", "avx2"])
@pytest.mark.parametrize(("n", "c", "k", "h", "w", "pad", "ic", "oc"), SHAPES)
def test_kernel_matches_a_direct_convolution_under_sampled_configs(n, c, k, h, w, pad, ic, oc, target, tile):
    cdef, args, want = _case(n, c, k, h, w, pad, ic, oc, tile)
    tmpl = template_for(cdef)
    assert tmpl.name == "conv2d_winograd_nchwc"
    space = tmpl.space(cdef, target)
    pick = random.Random(f"{n}{c}{k}{h}{w}{tile}")
    configs = [tmpl.default(cdef, target)] + [space.get(pick.randrange(len(space))) for _ in range(2)]
    for cfg in configs:
        got = compile_kernel(cdef, cfg, target).run(*args)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4 * np.abs(want).max(),
                                   err_msg=str(cfg.as_dict()))


@pytest.mark.parametrize("target", [host_target(threads=2), AVX2], ids=["host", "avx2"])
@pytest.mark.parametrize(("n", "c", "k", "h", "w", "pad", "ic", "oc"), SHAPES)
def test_every_fused_unit_matches_a_direct_convolution(n, c, k, h, w, pad, ic, oc, target):
    """The fused form (V and M per unit of tile rows x output blocks) under every unit, with
    either GEMM loop order outer: units that overhang the last tile row, span a whole image, or
    split the output blocks (each computing the same V)."""
    cdef, args, want = _case(n, c, k, h, w, pad, ic, oc, 4)
    tmpl = template_for(cdef)
    base = tmpl.default(cdef, target).as_dict()
    units = [u for u in tmpl.space(cdef, target).knob("unit").values if u != STAGED]
    assert len({r for r, _ in units}) > 1
    for i, unit in enumerate(units):
        cfg = Config(tmpl.name, tuple({**base, "unit": unit, "outer": "kp"[i % 2]}.items()))
        got = compile_kernel(cdef, cfg, target).run(*args)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4 * np.abs(want).max(),
                                   err_msg=str(cfg.as_dict()))


@pytest.mark.parametrize(("channels", "size"),
                         [(64, 56), (128, 28), (256, 14), (512, 7), (64, 224), (256, 56)])
def test_default_unit_fits_and_gives_every_thread_work(channels, size):
    """Every offered unit fits the local-buffer budget when built; the default is one of them
    (or staged), and a fused default leaves no thread without a unit. Staged where neither one
    image's tiles nor a cached U allow fusing (VGG's 256-channel 56-pixel layer)."""
    target = host_target(threads=2)
    x = te.placeholder((1, channels // 16, size, size, 16), name="X")
    u = te.placeholder((36, channels // 16, channels, 16), name="U")
    cdef = te.make_def([x, u], W.conv2d_winograd_nchwc(x, u, 1), "winograd")
    tmpl = template_for(cdef)
    units = tmpl.space(cdef, target).knob("unit").values
    rows, blocks = unit = tmpl.default(cdef, target)["unit"]
    assert unit in units
    if unit != STAGED:
        tiles_h = -(-size // 4)
        assert -(-tiles_h // rows) * (channels // 16 // blocks) >= target.threads
    assert (unit == STAGED) == ((channels, size) == (256, 56))
    biggest = max((u for u in units if u != STAGED), key=lambda u: u[0] * (channels + u[1] * 16))
    cfg = Config(tmpl.name, tuple({**tmpl.default(cdef, target).as_dict(), "unit": biggest}.items()))
    emit_kernel(cdef, cfg, target)  # raises ScheduleError past the budget


@pytest.mark.parametrize("cpu", ["znver3", "znver5"])
def test_default_register_tile_fits(cpu):
    """Tiles x blocks x vectors of accumulators plus the weight vectors (and, on AVX2, the
    broadcast) fit the registers, and the tile uses most of them."""
    target = resolve_target(f"llvm -mcpu={cpu}", 1)
    lanes = target.vector_lanes()
    cdef, _, _ = _case(1, 64, 64, 28, 28, (1, 1, 1, 1), lanes, 16, 4)
    cfg = template_for(cdef).default(cdef, target)
    vectors = cfg["tile_k_blocks"] * (16 // min(16, lanes))
    used = (cfg["tile_p"] + 1) * vectors + (0 if target.has("avx512f") else 1)
    assert used <= target.vector_registers, cfg
    assert used >= target.vector_registers // 2, cfg


def test_blocked_reference_is_the_nchw_algorithm():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 6, 7), dtype=np.float32)
    u = W.weight_transform_np(rng.standard_normal((16, 8, 3, 3), dtype=np.float32), 2)
    pad = (1, 1, 1, 1)
    flat = conv_reference(Attrs({"padding": pad}), x, u)
    blocked = conv_reference(Attrs({"padding": pad, "data_layout": "NCHW4c"}), _blocked(x, 4),
                             W.block_weight_np(u, 8))
    np.testing.assert_array_equal(blocked, _blocked(flat, 8))


def test_type_errors_name_the_op_and_the_shapes():
    def infer(x_shape, u_shape, layout):
        x, u = Var("x", TensorType(x_shape)), Var("u", TensorType(u_shape))
        body = call("nn.conv2d_winograd", x, u, data_layout=layout)
        return infer_types(IRModule.from_expr(Function((x, u), body)))

    ok = infer((1, 2, 6, 6, 4), (16, 3, 8, 4), "NCHW4c")
    assert tuple(ok["main"].body.checked_type.shape) == (1, 3, 6, 6, 4)
    with pytest.raises(TypeCheckError, match=r"nn.conv2d_winograd: data_layout must be NCHW or NCHW<x>c"):
        infer((1, 2, 6, 6, 4), (16, 3, 8, 4), "NHWC")
    with pytest.raises(TypeCheckError, match=r"data of shape \(1, 2, 6, 6, 4\) is not NCHW8c"):
        infer((1, 2, 6, 6, 4), (16, 3, 8, 4), "NCHW8c")
    with pytest.raises(TypeCheckError, match=r"weight of shape \(16, 12, 8\) is not \[16 or 36, K/y"):
        infer((1, 2, 6, 6, 4), (16, 12, 8), "NCHW4c")
    with pytest.raises(TypeCheckError, match=r"mismatch.*\(1, 2, 6, 6, 4\) has 8 channels.*expects 12"):
        infer((1, 2, 6, 6, 4), (16, 3, 12, 4), "NCHW4c")


def _op_names(mod: IRModule) -> list[str]:
    return [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call) and hasattr(n.op, "name")]


@pytest.mark.parametrize("tile", W.TILE_SIZES)
def test_convert_layout_blocks_winograd_between_blocked_layers(tile):
    """A Winograd conv takes the block of the layers around it: the only layout transforms left are
    the model's input and output, and the result matches the interpreter's."""
    mod = infer_types(resnet_block(32, 20))
    passes = [WinogradConv(tile=tile), FoldConstant(), ConvertLayout(dst="NCHWc", block=16), FoldConstant()]
    out = Pipeline(passes)(mod)
    names = _op_names(out)
    layouts = [n.attrs["data_layout"] for n in post_order(out["main"])
               if isinstance(n, Call) and getattr(n.op, "name", "") == "nn.conv2d_winograd"]
    assert layouts == ["NCHW16c", "NCHW16c"] and names.count("layout_transform") == 2, names
    x = np.random.default_rng(5).standard_normal((1, 32, 20, 20)).astype("float32")
    np.testing.assert_allclose(autorelay.evaluate(out, x), autorelay.evaluate(mod, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("size", "winograd"), [(2 * BLOCKED_WINOGRAD_MIN_SIZE, 2), (20, 0)])
def test_the_nchwc16_pipeline_builds_blocked_winograd_kernels_on_large_maps(size, winograd):
    mod = resnet_block(32, size)
    exe = autorelay.build(mod, threads=2, pipeline="nchwc16")
    templates = [r.detail.split(" ", 1)[0] for r in exe.report.rows if r.kind == "kernel"]
    assert templates.count("conv2d_winograd_nchwc") == winograd, templates
    assert templates.count("conv2d_nchwc") == 3 - winograd, templates
    x = np.random.default_rng(5).standard_normal((1, 32, size, size)).astype("float32")
    np.testing.assert_allclose(exe(x), autorelay.evaluate(infer_types(mod), x), rtol=1e-4, atol=1e-4)


def test_an_nchw_plan_keeps_winograd_in_nchw():
    """`ConvertLayout(block=0)` (a layout plan's unnamed layers) leaves a Winograd conv in NCHW."""
    mod = infer_types(resnet_block(32, 20))
    out = Pipeline([WinogradConv(), FoldConstant(), ConvertLayout(dst="NCHWc", block=0)])(mod)
    layouts = {n.attrs["data_layout"] for n in post_order(out["main"])
               if isinstance(n, Call) and getattr(n.op, "name", "") == "nn.conv2d_winograd"}
    assert layouts == {"NCHW"}
