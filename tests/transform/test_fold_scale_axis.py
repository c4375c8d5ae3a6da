"""FoldScaleAxis: per-channel scales folded into conv2d/dense weights (forward and backward)."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

from autorelay.ir import Function, IRModule, TensorType, Tuple, Var, const
from autorelay.op.registry import call
from autorelay.transform import FoldConstant, FoldScaleAxis, Pipeline, SimplifyInference

rng = np.random.default_rng(0)


def _w(*shape):
    return const(rng.standard_normal(shape).astype("float32"))


def _conv(x, cout=6, cin=4):
    return call("nn.conv2d", x, _w(cout, cin, 3, 3), padding=[1, 1], channels=cout, kernel_size=[3, 3])


def _fold(body_fn, shape=(1, 4, 6, 6)):
    x = Var("x", TensorType(shape))
    mod = IRModule.from_expr(Function((x,), body_fn(x)))
    out = FoldScaleAxis()(typed(mod))
    assert_same_outputs(mod, out)
    return ops(out)


def test_backward_scale_after_conv_goes_into_the_weights():
    assert _fold(lambda x: call("multiply", _conv(x), _w(6, 1, 1))) == {"nn.conv2d": 1}
    assert _fold(lambda x: call("multiply", _w(1, 6, 1, 1), _conv(x))) == {"nn.conv2d": 1}
    # through a bias_add / a per-channel add: the bias is scaled too
    assert _fold(lambda x: call("multiply", call("nn.bias_add", _conv(x), _w(6)), _w(6, 1, 1))) \
        == {"nn.conv2d": 1, "nn.bias_add": 1}
    assert _fold(lambda x: call("multiply", call("add", _conv(x), _w(6, 1, 1)), _w(6, 1, 1))) \
        == {"nn.conv2d": 1, "add": 1}


def test_forward_scale_before_conv_and_dense():
    assert _fold(lambda x: _conv(call("multiply", x, _w(4, 1, 1)))) == {"nn.conv2d": 1}
    assert _fold(lambda x: call("nn.dense", call("multiply", x, _w(8)), _w(5, 8)), shape=(3, 8)) \
        == {"nn.dense": 1}
    assert _fold(lambda x: call("multiply", call("nn.dense", x, _w(5, 8)), _w(5)), shape=(3, 8)) \
        == {"nn.dense": 1}


def test_scales_that_are_not_per_channel_or_shared_are_kept():
    # varies along H: not a per-output-channel scale
    assert _fold(lambda x: call("multiply", _conv(x), _w(6, 6, 1))) == {"nn.conv2d": 1, "multiply": 1}
    # a 1-d constant added to the conv broadcasts along W, not along channels: kept
    assert _fold(lambda x: call("multiply", call("add", _conv(x), _w(6)), _w(6, 1, 1))) \
        == {"nn.conv2d": 1, "add": 1, "multiply": 1}
    # a non-constant scale
    assert _fold(lambda x: call("multiply", _conv(x), call("exp", _w(6, 1, 1)))) \
        == {"nn.conv2d": 1, "multiply": 1, "exp": 1}

    def shared(x):  # the conv result is used twice: folding would change the other use
        c = _conv(x)
        return Tuple((call("multiply", c, _w(6, 1, 1)), c))
    assert _fold(shared) == {"nn.conv2d": 1, "multiply": 1}
    # grouped conv: a scale before it is not folded (input channels are split across groups)
    grouped = lambda x: call("nn.conv2d", call("multiply", x, _w(4, 1, 1)), _w(4, 2, 3, 3), padding=[1, 1],
                             groups=2, channels=4, kernel_size=[3, 3])
    assert _fold(grouped) == {"nn.conv2d": 1, "multiply": 1}


@pytest.mark.parametrize("net", sorted(NETS))
def test_batch_norms_disappear_from_whole_networks(net):
    mod = typed(NETS[net]())
    pipe = Pipeline([SimplifyInference(), FoldConstant(), FoldScaleAxis(), FoldConstant()])
    out = pipe(mod)
    counts = ops(out)
    assert "nn.batch_norm" not in counts
    if net == "resnet":  # each bn left a per-channel add only; every multiply went into a conv
        assert "multiply" not in counts and counts["nn.conv2d"] == ops(mod)["nn.conv2d"]
        assert counts["add"] == ops(mod)["nn.batch_norm"] + ops(mod)["add"]
    assert_same_outputs(mod, out)
