"""SimplifyExpr drops the kernel taps of a convolution that read only padding
(`autorelay.transform.conv_taps`): the rewritten convolution equals the original on the reference
interpreter over random shapes, strides, dilations, paddings, groups and layouts, and compiles."""

from __future__ import annotations

import random

import numpy as np
import pytest
from transform_nets import typed

import autorelay
from autorelay.ir import Function, IRModule, TensorType, Var
from autorelay.ir.expr import Constant
from autorelay.ir.visitor import post_order
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import SimplifyExpr


def _conv(op: str, data: tuple, weight: np.ndarray, **attrs) -> IRModule:
    x = Var("x", TensorType(data))
    return typed(IRModule.from_expr(Function((x,), call(op, x, Constant(weight), **attrs))))


def _kernels(mod: IRModule) -> list[tuple]:
    """The weight shapes of the convolutions in `mod` (after constant folding)."""
    from autorelay.transform import FoldConstant

    folded = FoldConstant()(typed(mod))
    return [tuple(n.args[1].checked_type.shape) for n in post_order(folded["main"].body)
            if getattr(getattr(n, "op", None), "name", "").startswith("nn.conv")]


def test_atrous_pyramid_taps_reduce_to_the_centre():
    """DeepLab's 3x3 at dilation 12 (padding 12) on an 8x8 map reads the input with its centre
    tap only: it becomes a 1x1 convolution, undilated and unpadded."""
    w = np.random.default_rng(0).standard_normal((6, 5, 3, 3)).astype("float32")
    mod = _conv("nn.conv2d", (1, 5, 8, 8), w, padding=(12, 12), dilation=(12, 12))
    out = SimplifyExpr()(mod)
    (conv,) = [n for n in post_order(out["main"].body)
               if getattr(getattr(n, "op", None), "name", "") == "nn.conv2d"]
    assert tuple(conv.attrs["padding"]) == (0, 0, 0, 0) and tuple(conv.attrs["dilation"]) == (1, 1)
    assert _kernels(out) == [(6, 5, 1, 1)]
    x = np.random.default_rng(1).standard_normal((1, 5, 8, 8)).astype("float32")
    np.testing.assert_allclose(np.asarray(evaluate(out, x)), np.asarray(evaluate(mod, x)),
                               rtol=1e-5, atol=1e-5)


def test_a_convolution_whose_taps_all_read_the_input_is_unchanged():
    w = np.ones((4, 3, 3, 3), "float32")
    mod = _conv("nn.conv2d", (1, 3, 9, 9), w, padding=(2, 2), dilation=(2, 2))
    assert _kernels(SimplifyExpr()(mod)) == [(4, 3, 3, 3)]


def _random_case(rng: random.Random) -> tuple[str, tuple, np.ndarray, dict]:
    nsp = rng.choice((1, 2))
    op = {1: "nn.conv1d", 2: "nn.conv2d"}[nsp]
    groups = rng.choice((1, 2))
    cin, cout = 2 * groups, 3 * groups
    sizes = [rng.randint(1, 9) for _ in range(nsp)]
    kernel = [rng.randint(1, 5) for _ in range(nsp)]
    dilation = [rng.choice((1, 2, 5, 9)) for _ in range(nsp)]
    strides = [rng.choice((1, 2, 3)) for _ in range(nsp)]
    pads = [rng.randint(0, (k - 1) * d + 2) for _ in range(2) for k, d in zip(kernel, dilation)]
    attrs = {"padding": tuple(pads), "dilation": tuple(dilation), "strides": tuple(strides), "groups": groups}
    nhwc = nsp == 2 and rng.random() < 0.3
    if nhwc:
        attrs |= {"data_layout": "NHWC", "kernel_layout": "HWIO"}
        data, wshape = (1, *sizes, cin), (*kernel, cin // groups, cout)
    else:
        data, wshape = (1, cin, *sizes), (cout, cin // groups, *kernel)
    if rng.random() < 0.5:
        attrs["kernel_size"] = tuple(kernel)
    weight = np.random.default_rng(rng.randint(0, 99)).standard_normal(wshape).astype("float32")
    return op, data, weight, attrs


def test_dropping_taps_keeps_every_output():
    rng, changed = random.Random(3), 0
    for _ in range(300):
        op, data, w, attrs = _random_case(rng)
        try:
            mod = _conv(op, data, w, **attrs)
        except autorelay.TypeCheckError:
            continue  # a window larger than the padded input
        out = SimplifyExpr()(mod)
        changed += _kernels(out) != _kernels(mod)
        x = np.random.default_rng(5).standard_normal(data).astype("float32")
        np.testing.assert_allclose(np.asarray(evaluate(out, x)), np.asarray(evaluate(mod, x)),
                                   rtol=1e-5, atol=1e-5, err_msg=f"{op} {data} {w.shape} {attrs}")
    assert changed >= 50  # the random cases exercise the rule, cropping included


@pytest.mark.cpu
def test_a_dilated_convolution_on_a_small_map_compiles_to_the_same_values():
    w = np.random.default_rng(0).standard_normal((8, 16, 3, 3)).astype("float32")
    mod = _conv("nn.conv2d", (1, 16, 6, 7), w, padding=(5, 4, 7, 6), dilation=(6, 5))
    x = np.random.default_rng(1).standard_normal((1, 16, 6, 7)).astype("float32")
    want = np.asarray(evaluate(mod, x))
    for pipeline in ("default", "nchwc"):
        exe = autorelay.build(mod, pipeline=pipeline)
        np.testing.assert_allclose(np.asarray(exe(x)), want, rtol=1e-4, atol=1e-4)


def test_a_weight_given_at_run_time_is_sliced_in_the_program():
    x, w = Var("x", TensorType((1, 4, 5, 5))), Var("w", TensorType((2, 4, 3, 3)))
    conv = call("nn.conv2d", x, w, padding=(9, 1), dilation=(9, 1))
    mod = typed(IRModule.from_expr(Function((x, w), conv)))
    out = SimplifyExpr()(mod)
    assert "strided_slice(%w" in autorelay.astext(out)
    gen = np.random.default_rng(2)
    args = [gen.standard_normal(shape).astype("float32") for shape in ((1, 4, 5, 5), (2, 4, 3, 3))]
    np.testing.assert_allclose(np.asarray(evaluate(out, *args)), np.asarray(evaluate(mod, *args)),
                               rtol=1e-5, atol=1e-5)
