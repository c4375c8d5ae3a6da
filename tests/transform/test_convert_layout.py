"""ConvertLayout: NCHW <-> NHWC and NCHW -> NCHW[x]c with per-conv blocks; transforms only at the
boundaries of layout-agnostic regions; back-to-back transforms cancel."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

from autorelay.ir import Call, Function, IRModule, TensorType, Var, const, post_order
from autorelay.op.registry import call
from autorelay.transform import ConvertLayout, FoldConstant, Pipeline, SimplifyInference

rng = np.random.default_rng(0)


def _w(*shape):
    return const(rng.standard_normal(shape).astype("float32") * 0.3)


def _convs(mod):
    return [n for n in post_order(mod["main"])
            if isinstance(n, Call) and getattr(n.op, "name", "") == "nn.conv2d"]


def _block(x, cin, cout):
    y = call("nn.conv2d", x, _w(cout, cin, 3, 3), padding=[1, 1], channels=cout, kernel_size=[3, 3])
    y = call("nn.relu", call("nn.bias_add", y, _w(cout)))
    return call("multiply", call("add", y, _w(cout, 1, 1)), const(0.5))


def _chain_mod():
    x = Var("x", TensorType((1, 8, 6, 6)))
    y = _block(_block(x, 8, 16), 16, 16)
    y = call("add", call("nn.max_pool2d", y, pool_size=[2, 2], strides=[2, 2]), call("exp", _w(1, 16, 3, 3)))
    return IRModule.from_expr(Function((x,), call("nn.batch_flatten", y)))


@pytest.mark.parametrize("dst", ["NHWC", "NCHWc"])
def test_layout_propagates_between_convs_with_transforms_only_at_the_boundaries(dst):
    mod = _chain_mod()
    out = ConvertLayout(dst=dst, block=4)(typed(mod))
    counts = ops(out)
    # into the region: the input and the non-constant operand of the last add; out of it: before
    # batch_flatten. None between the convs, relus, bias adds, constant adds and the pooling.
    assert counts["layout_transform"] == 3
    assert {c.attrs["data_layout"] for c in _convs(out)} == ({"NHWC"} if dst == "NHWC" else {"NCHW4c"})
    assert_same_outputs(mod, out)


def test_nchwc_blocks_per_conv_and_weight_packing():
    mod = _chain_mod()
    out = ConvertLayout(dst="NCHWc", conv_blocks=((8, 4), (2, 16)))(typed(mod))
    layouts = {(c.attrs["data_layout"], c.attrs["kernel_layout"],
                c.attrs["out_layout"] or c.attrs["data_layout"]) for c in _convs(out)}
    assert layouts == {("NCHW8c", "OIHW8i4o", "NCHW4c"), ("NCHW2c", "OIHW2i16o", "NCHW16c")}
    # weights were packed at compile time (constants in the blocked layout)
    shapes = {tuple(c.args[1].data.shape) for c in _convs(out)}
    assert shapes == {(4, 1, 3, 3, 8, 4), (1, 8, 3, 3, 2, 16)}
    # a block that does not divide the channels shrinks to a divisor
    odd = ConvertLayout(dst="NCHWc", conv_blocks=((3, 5), (16, 16)))(typed(mod))
    assert {c.attrs["data_layout"] for c in _convs(odd)} == {"NCHW2c", "NCHW16c"}
    for o in (out, odd):
        assert_same_outputs(mod, o)


def test_nhwc_back_to_nchw_and_cancellation():
    x = Var("x", TensorType((1, 5, 5, 4)))
    y = call("nn.conv2d", x, _w(3, 3, 4, 6), padding=[1, 1], channels=6, kernel_size=[3, 3],
             data_layout="NHWC", kernel_layout="HWIO")
    y = call("nn.conv2d", call("nn.relu", y), _w(3, 3, 6, 6), padding=[1, 1], channels=6, kernel_size=[3, 3],
             data_layout="NHWC", kernel_layout="HWIO")
    mod = IRModule.from_expr(Function((x,), y))
    out = ConvertLayout(src="NHWC", dst="NCHW")(typed(mod))
    assert {c.attrs["data_layout"] for c in _convs(out)} == {"NCHW"}
    assert ops(out)["layout_transform"] == 2
    assert_same_outputs(mod, out)
    # converting back cancels the inner pair: the result has just the two boundary transforms
    again = Pipeline([ConvertLayout(src="NHWC", dst="NCHW"), ConvertLayout(src="NCHW", dst="NHWC")])(mod)
    assert {c.attrs["data_layout"] for c in _convs(again)} == {"NHWC"}
    assert_same_outputs(mod, again)


@pytest.mark.parametrize("dst", ["NHWC", "NCHWc"])
def test_channel_concatenation_stays_in_the_converted_layout(dst):
    from autorelay.ir import Tuple

    x = Var("x", TensorType((1, 4, 5, 5)))
    squeeze = call("nn.relu", call("nn.conv2d", x, _w(8, 4, 1, 1), channels=8, kernel_size=[1, 1]))
    left = call("nn.conv2d", squeeze, _w(8, 8, 1, 1), channels=8, kernel_size=[1, 1])
    right = call("nn.conv2d", squeeze, _w(8, 8, 3, 3), padding=[1, 1], channels=8, kernel_size=[3, 3])
    y = call("nn.relu", call("concatenate", Tuple((left, right)), axis=1))
    y = call("nn.conv2d", y, _w(4, 16, 1, 1), channels=4, kernel_size=[1, 1])
    mod = IRModule.from_expr(Function((x,), y))
    out = ConvertLayout(dst=dst, block=4)(typed(mod))
    assert ops(out)["layout_transform"] == 2  # the input and the output only
    assert_same_outputs(mod, out)


def _gated_mod():
    """Attention gates multiplied into a conv's output: a one-channel spatial map from a conv, one
    from a channel mean (not converted), and a per-channel gate from a global pooling."""
    x = Var("x", TensorType((1, 16, 6, 7)))
    y = call("nn.conv2d", x, _w(16, 16, 3, 3), padding=[1, 1], channels=16, kernel_size=[3, 3])
    spatial = call("sigmoid", call("nn.conv2d", y, _w(1, 16, 1, 1), channels=1, kernel_size=[1, 1]))
    channel = call("sigmoid", call("nn.conv2d", call("nn.global_avg_pool2d", y), _w(16, 16, 1, 1),
                                   channels=16, kernel_size=[1, 1]))
    z = call("multiply", call("multiply", spatial, y), channel)
    z = call("add", z, call("mean", z, axis=[1], keepdims=True))
    z = call("nn.conv2d", z, _w(8, 16, 3, 3), padding=[1, 1], channels=8, kernel_size=[3, 3])
    return IRModule.from_expr(Function((x,), z))


@pytest.mark.parametrize("dst,block", [("NCHWc", 8), ("NCHWc", 16), ("NHWC", 0)])
def test_one_channel_and_per_channel_gates_broadcast_in_the_converted_layout(dst, block):
    mod = _gated_mod()
    out = typed(ConvertLayout(dst=dst, block=block or 16)(typed(mod)))
    products = [n for n in post_order(out["main"]) if isinstance(n, Call)
                and getattr(n.op, "name", "") in ("multiply", "add")]
    rank = 5 if dst == "NCHWc" else 4
    assert len(products) == 3 and all(len(n.checked_type.shape) == rank for n in products)
    if dst == "NHWC":
        assert all(n.checked_type.shape[-1] == 16 for n in products)
    assert_same_outputs(mod, out)


def test_depthwise_conv_is_packed_with_one_block():
    x = Var("x", TensorType((1, 8, 5, 5)))
    y = call("nn.conv2d", x, _w(8, 1, 3, 3), padding=[1, 1], groups=8, channels=8, kernel_size=[3, 3])
    y = call("nn.conv2d", call("nn.relu", y), _w(16, 8, 1, 1), channels=16, kernel_size=[1, 1])
    mod = IRModule.from_expr(Function((x,), y))
    out = ConvertLayout(dst="NCHWc", block=4)(typed(mod))
    layouts = sorted((c.attrs["data_layout"], c.attrs["kernel_layout"]) for c in _convs(out))
    assert layouts == [("NCHW4c", "OIHW1i4o"), ("NCHW4c", "OIHW4i4o")]
    assert ops(out)["layout_transform"] == 2
    assert_same_outputs(mod, out)


@pytest.mark.parametrize("block, per_group, expect", [
    (16, 4, ("NCHW16c", "OIHW4i16o")),  # four 4-channel groups in each block
    (8, 2, ("NCHW8c", "OIHW2i8o")),
    (16, 8, ("NCHW16c", "OIHW8i16o")),
    (4, 8, ("NCHW4c", "OIHW4i4o")),  # a group spans blocks: blocks of the group, as before
    (16, 12, ("NCHW12c", "OIHW12i12o")),  # 16 is no multiple of 12: the group as its block
])
def test_grouped_conv_packs_small_groups_whole_into_a_block(block, per_group, expect):
    channels = 48 if per_group == 12 else 32
    groups = channels // per_group
    x = Var("x", TensorType((1, channels, 6, 7)))
    y = call("nn.conv2d", x, _w(channels, per_group, 3, 3), padding=[1, 1], groups=groups,
             channels=channels, kernel_size=[3, 3])
    y = call("nn.conv2d", call("nn.relu", y), _w(16, channels, 1, 1), channels=16, kernel_size=[1, 1])
    mod = IRModule.from_expr(Function((x,), y))
    out = ConvertLayout(dst="NCHWc", block=block)(typed(mod))
    grouped = [c for c in _convs(out) if c.attrs["groups"] > 1]
    assert [(c.attrs["data_layout"], c.attrs["kernel_layout"]) for c in grouped] == [expect]
    assert_same_outputs(mod, out)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="dst"):
        ConvertLayout(dst="HWCN")
    with pytest.raises(ValueError, match="NCHWc packing starts from NCHW"):
        ConvertLayout(src="NHWC", dst="NCHWc")


@pytest.mark.parametrize("dst", ["NHWC", "NCHWc"])
@pytest.mark.parametrize("net", sorted(NETS))
def test_whole_networks(net, dst):
    mod = typed(NETS[net]())
    passes = [SimplifyInference(), FoldConstant(), ConvertLayout(dst=dst, block=8), FoldConstant()]
    out = Pipeline(passes)(mod)
    if net == "resnet":
        assert all(c.attrs["data_layout"] != "NCHW" for c in _convs(out))
        assert ops(out)["layout_transform"] <= 2  # into the first conv, out before batch_flatten
    else:  # no convolutions: nothing to convert
        assert "layout_transform" not in ops(out)
    assert_same_outputs(mod, out)
