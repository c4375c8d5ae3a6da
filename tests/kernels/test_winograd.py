"""Winograd F(2x2, 3x3) and F(4x4, 3x3): the compute under its default and under sampled configs,
the NumPy reference of the op, the WinogradConv pass (its rule and per-conv tiles), and a built
model — each against a direct convolution (NumPy) or the reference interpreter on the un-rewritten
program."""

from __future__ import annotations

import random

import kernel_oracles as H
import numpy as np
import pytest

import autorelay
from autorelay.codegen.llvm.host import host_target
from autorelay.errors import TypeCheckError
from autorelay.ir import Call, Function, IRModule, TensorType, Var, const, post_order
from autorelay.ir.attrs import Attrs
from autorelay.kernel import compile_kernel
from autorelay.op.registry import call
from autorelay.op.winograd import conv_reference
from autorelay.schedule.templates import template_for
from autorelay.te import tensor as te
from autorelay.te import winograd as W
from autorelay.transform import FoldConstant, Pipeline
from autorelay.transform.winograd_conv import WinogradConv
from autorelay.typing import infer_types

pytestmark = pytest.mark.cpu


def _padded_conv(x: np.ndarray, w: np.ndarray, pad: tuple[int, int, int, int]) -> np.ndarray:
    pt, pl, pb, pr = pad
    return H.conv_nchw(np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))), w, 1, 0)


# (N, C, K, H, W, padding): even and odd outputs, a row of tiles narrower than a vector,
# asymmetric and no padding, batch 2
SHAPES = [
    (1, 8, 12, 10, 10, (1, 1, 1, 1)),
    (1, 5, 9, 7, 13, (1, 1, 1, 1)),
    (2, 16, 7, 6, 17, (0, 2, 1, 0)),
    (1, 3, 4, 9, 5, (0, 0, 0, 0)),
]


@pytest.mark.parametrize("tile", W.TILE_SIZES)
@pytest.mark.parametrize(("n", "c", "k", "h", "w", "pad"), SHAPES)
def test_numpy_reference_is_a_convolution(n, c, k, h, w, pad, tile):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((k, c, 3, 3), dtype=np.float32)
    got = conv_reference(Attrs({"padding": pad}), x, W.weight_transform_np(wt, tile))
    np.testing.assert_allclose(got, _padded_conv(x, wt, pad), rtol=1e-4, atol=1e-4)


# F(4x4) kernels take seconds to compile (36 unrolled positions): two shapes, fewer configs
TILED_SHAPES = [(*shape, 2, 3) for shape in SHAPES] + [(*SHAPES[i], 4, 1) for i in (1, 2)]


@pytest.mark.parametrize(("n", "c", "k", "h", "w", "pad", "tile", "sampled"), TILED_SHAPES)
def test_kernel_matches_a_direct_convolution_under_sampled_configs(n, c, k, h, w, pad, tile, sampled):
    positions = (tile + 2) ** 2
    xd, ud = te.placeholder((n, c, h, w), name="X"), te.placeholder((positions, k, c), name="U")
    cdef = te.make_def([xd, ud], W.conv2d_winograd_nchw(xd, ud, pad), "winograd")
    target = host_target(threads=2)
    tmpl = template_for(cdef)
    assert tmpl.name == "conv2d_winograd"
    space = tmpl.space(cdef, target)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((k, c, 3, 3), dtype=np.float32)
    expect = _padded_conv(x, wt, pad)
    u = W.weight_transform_np(wt, tile)
    pick = random.Random(f"{n}{c}{k}{h}{w}")
    configs = [tmpl.default(cdef, target)] + [space.get(pick.randrange(len(space))) for _ in range(sampled)]
    for cfg in configs:
        got = compile_kernel(cdef, cfg, target).run(x, u)
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4, err_msg=str(cfg.as_dict()))


@pytest.mark.parametrize("tile", W.TILE_SIZES)
def test_weight_transform_compute_matches_numpy(tile):
    wd = te.placeholder((6, 5, 3, 3), name="Wt")
    cdef = te.make_def([wd], W.weight_transform(wd, tile), "wt")
    wt = np.random.default_rng(3).standard_normal((6, 5, 3, 3), dtype=np.float32)
    got = compile_kernel(cdef, None, host_target()).run(wt)
    np.testing.assert_allclose(got, W.weight_transform_np(wt, tile), rtol=1e-6, atol=1e-6)


def test_f4_error_bound_at_resnet_widths():
    """The bound `WinogradConv` states for F(4x4): max error <= 1e-4 of the output's largest
    magnitude, here with 256 channels in the float32 kernel (weights scaled as trained nets are)."""
    c, k, size = 256, 32, 12
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, c, size, size), dtype=np.float32)
    wt = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    xd, ud = te.placeholder(x.shape, name="X"), te.placeholder((36, k, c), name="U")
    cdef = te.make_def([xd, ud], W.conv2d_winograd_nchw(xd, ud, 1), "winograd")
    got = compile_kernel(cdef, None, host_target(threads=2)).run(x, W.weight_transform_np(wt, 4))
    want = H.conv_nchw(x, wt, 1, 1)  # float64 inside
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= 1e-4, err
    assert err > 0  # a different summation order, not the direct kernel by mistake


def test_tiles_are_validated():
    with pytest.raises(ValueError, match="tile 3 is not supported"):
        W.transforms(3)
    with pytest.raises(ValueError, match="16 or 36 positions, not 25"):
        W.transforms_for_positions(25)
    with pytest.raises(ValueError, match="WinogradConv: tiles must be one of"):
        WinogradConv(tiles=((0, 3),))


def resnet_block(channels: int, size: int = 12) -> IRModule:
    rng = np.random.default_rng(4)

    def conv(x, cin, cout, stride=1):
        w = const((rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype("float32"))
        y = call("nn.conv2d", x, w, strides=[stride, stride], padding=[1, 1], channels=cout,
                 kernel_size=[3, 3])
        return call("nn.bias_add", y, const(rng.standard_normal(cout).astype("float32")))

    x = Var("x", TensorType((1, channels, size, size)))
    y = call("nn.relu", conv(x, channels, channels))
    y = call("nn.relu", call("add", conv(y, channels, channels), x))
    y = conv(y, channels, 2 * channels, stride=2)  # stride 2: stays direct
    return IRModule.from_expr(Function((x,), y))


def _ops(mod: IRModule) -> list[str]:
    return [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call) and hasattr(n.op, "name")]


def test_pass_rewrites_only_eligible_convolutions_and_keeps_the_result():
    mod = infer_types(resnet_block(32))
    out = Pipeline([WinogradConv(), FoldConstant()])(mod)
    names = _ops(out)
    assert names.count("nn.conv2d_winograd") == 2 and names.count("nn.conv2d") == 1
    assert "nn.winograd_weight_transform" not in names  # folded into constants
    x = np.random.default_rng(5).standard_normal((1, 32, 12, 12)).astype("float32")
    want = autorelay.evaluate(mod, x)
    np.testing.assert_allclose(autorelay.evaluate(out, x), want, rtol=1e-4, atol=1e-4)


def test_pass_leaves_narrow_and_non_constant_convolutions():
    narrow = infer_types(resnet_block(8))
    assert "nn.conv2d_winograd" not in _ops(WinogradConv()(narrow))
    x, w = Var("x", TensorType((1, 64, 8, 8))), Var("w", TensorType((64, 64, 3, 3)))
    conv = call("nn.conv2d", x, w, padding=[1, 1])
    runtime_weight = infer_types(IRModule.from_expr(Function((x, w), conv)))
    assert "nn.conv2d_winograd" not in _ops(WinogradConv()(runtime_weight))


def _weight_positions(mod: IRModule) -> list[int]:
    return [n.args[1].data.shape[0] for n in post_order(mod["main"])
            if isinstance(n, Call) and getattr(n.op, "name", "") == "nn.conv2d_winograd"]


def test_per_conv_tiles_override_the_rule_and_keep_the_result():
    """`tiles` names convs by post-order index: conv 0 as F(4x4), conv 1 direct, the stride-2 conv 2
    left direct although named (the op cannot compute it); the 8-channel block is below the
    rule's threshold but a named conv is rewritten anyway."""
    mod = infer_types(resnet_block(8))
    out = Pipeline([WinogradConv(tiles=((0, 4), (1, 0), (2, 4))), FoldConstant()])(mod)
    assert _weight_positions(out) == [36]
    assert _ops(out).count("nn.conv2d") == 2
    both = Pipeline([WinogradConv(tiles=((0, 4),)), FoldConstant()])(infer_types(resnet_block(32)))
    assert sorted(_weight_positions(both)) == [16, 36]  # conv 1 follows the rule: F(2x2)
    x = np.random.default_rng(5).standard_normal((1, 8, 12, 12)).astype("float32")
    np.testing.assert_allclose(autorelay.evaluate(out, x), autorelay.evaluate(mod, x), rtol=1e-4, atol=1e-4)


def test_small_feature_maps_stay_direct():
    """Outputs under 7x7 pixels (ResNet-18's deep layers on small images) keep the direct conv."""
    for size, rewritten in ((6, False), (7, True)):
        block = infer_types(resnet_block(32, size=size))
        assert ("nn.conv2d_winograd" in _ops(WinogradConv()(block))) == rewritten, size
    assert "nn.conv2d_winograd" in _ops(WinogradConv(min_size=6)(infer_types(resnet_block(32, size=6))))


def test_built_model_matches_the_interpreter_and_runs_winograd_kernels():
    mod = resnet_block(32, size=10)
    exe = autorelay.build(mod, threads=2)
    templates = [r.detail.split(" ", 1)[0] for r in exe.report.rows if r.kind == "kernel"]
    assert templates.count("conv2d_winograd") == 2, templates
    x = np.random.default_rng(6).standard_normal((1, 32, 10, 10)).astype("float32")
    np.testing.assert_allclose(exe(x), autorelay.evaluate(infer_types(mod), x), rtol=1e-4, atol=1e-4)


def test_shape_errors_name_the_op_and_both_shapes():
    x, u = Var("x", TensorType((1, 8, 6, 6))), Var("u", TensorType((16, 4, 5)))
    mismatch = r"nn.conv2d_winograd: channel mismatch.*\(1, 8, 6, 6\).*\(16, 4, 5\)"
    with pytest.raises(TypeCheckError, match=mismatch):
        infer_types(IRModule.from_expr(Function((x, u), call("nn.conv2d_winograd", x, u))))
    w = Var("w", TensorType((4, 8, 5, 5)))
    with pytest.raises(TypeCheckError, match=r"nn.winograd_weight_transform: .*\(4, 8, 5, 5\).*3x3"):
        infer_types(IRModule.from_expr(Function((w,), call("nn.winograd_weight_transform", w))))
    u25 = Var("u", TensorType((25, 4, 8)))
    with pytest.raises(TypeCheckError, match=r"nn.conv2d_winograd: .*\(25, 4, 8\) is not \[16 or 36, K, C\]"):
        infer_types(IRModule.from_expr(Function((x, u25), call("nn.conv2d_winograd", x, u25))))
    w3 = Var("w", TensorType((4, 8, 3, 3)))
    with pytest.raises(TypeCheckError, match=r"nn.winograd_weight_transform: output tile 3 is not supported"):
        infer_types(IRModule.from_expr(Function((w3,), call("nn.winograd_weight_transform", w3, tile=3))))
    f4 = infer_types(IRModule.from_expr(Function((w3,), call("nn.winograd_weight_transform", w3, tile=4))))
    assert tuple(f4["main"].body.checked_type.shape) == (36, 4, 8)


def test_fused_epilogue_reading_another_input():
    """The output transform is inlined into an epilogue (bias, residual, ReLU); the GEMM's
    CacheWrite rewrote what the transform reads, and inlining must see that rewrite."""
    from autorelay.te import expr as E

    xd, ud = te.placeholder((1, 8, 6, 10), name="X"), te.placeholder((16, 16, 8), name="U")
    rd, bd = te.placeholder((1, 16, 6, 10), name="R"), te.placeholder((16, 1, 1), name="B")
    y = W.conv2d_winograd_nchw(xd, ud, 1)
    out = te.compute(y.shape, lambda n, k, h, w: E.maximum(y[n, k, h, w] + bd[k, 0, 0] + rd[n, k, h, w],
                                                          E.as_expr(0.0, "float32")), name="out")
    rng = np.random.default_rng(7)
    x, r, wt, b = (rng.standard_normal(s, dtype=np.float32)
                   for s in ((1, 8, 6, 10), (1, 16, 6, 10), (16, 8, 3, 3), (16, 1, 1)))
    arrays = {"X": x, "U": W.weight_transform_np(wt), "R": r, "B": b}
    cdef = te.make_def([xd, ud, rd, bd], out, "fused")
    got = compile_kernel(cdef, None, host_target(threads=2)).run(*[arrays[t.name] for t in cdef.inputs])
    want = np.maximum(_padded_conv(x, wt, (1, 1, 1, 1)) + b + r, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
