"""ConvTransposePhases: a transposed convolution as per-phase stride-1 convolutions, checked against
the op's own NumPy reference (the interpreter) and through builds in every kind of pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.build_module import build_prepared
from autorelay.codegen import resolve_target
from autorelay.ir import IRModule, TensorType, Var, const, post_order
from autorelay.ir.expr import Function
from autorelay.op.registry import call
from autorelay.transform.conv_transpose_phases import ConvTransposePhases, phases
from autorelay.transform.layout_plan import LayoutPlan, built_layers, conv_layers, plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes, pipeline
from autorelay.transform.prepare import prepare
from autorelay.transform.util import op_name, tensor_type


def _deconv(rng, xs, ws, **attrs):
    x = Var("x", TensorType(xs, "float32"))
    w = rng.standard_normal(ws).astype("float32")
    groups = attrs.get("groups", 1)
    body = call("nn.conv2d_transpose", x, const(w), channels=ws[1] * groups, kernel_size=ws[2:], **attrs)
    return autorelay.infer_types(IRModule.from_expr(Function((x,), body)))


def _close(got, want) -> None:
    """Equal up to float32 rounding of sums whose terms cancel (the bound scales with the outputs)."""
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


def _ops(mod) -> set[str]:
    return {op_name(n) for n in post_order(mod["main"].body)} - {None}


def test_every_phase_rewrite_computes_the_reference():
    """Random strides, paddings, output paddings, groups and kernel sizes (including kernels not
    divisible by the stride, phases of unequal extent and paddings that crop the input)."""
    rng = np.random.default_rng(7)
    rewritten = 0
    for _ in range(120):
        groups = int(rng.choice([1, 1, 2]))
        kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
        sh, sw = (int(v) for v in rng.integers(1, 4, size=2))
        ws = (groups * int(rng.integers(1, 4)), int(rng.integers(1, 4)), kh, kw)
        xs = (2, ws[0], *(int(v) for v in rng.integers(1, 7, size=2)))
        attrs = dict(strides=(sh, sw), padding=tuple(int(v) for v in rng.integers(0, 3, size=4)),
                     output_padding=(int(rng.integers(0, sh)), int(rng.integers(0, sw))), groups=groups)
        try:
            mod = _deconv(rng, xs, ws, **attrs)
        except autorelay.TypeCheckError:
            continue  # a padding that leaves no output
        out = ConvTransposePhases()(mod)
        applies = kh >= sh and kw >= sw  # every phase reaches a kernel tap
        assert ("nn.conv2d_transpose" not in _ops(out)) == applies, (xs, ws, attrs)
        rewritten += applies
        data = rng.standard_normal(xs).astype("float32")
        want = autorelay.evaluate(mod["main"], data)
        _close(autorelay.evaluate(out["main"], data), want)
    assert rewritten >= 40


def test_phases_of_dcgan_layer():
    """A 4x4 kernel of stride 2, padding 1 (DCGAN's): two taps per phase, no crop, equal extents."""
    even, odd = phases(4, 4, 2, 1, 8)
    assert (even.first, even.taps, even.before, even.after, even.extent) == (1, 2, 1, 0, 4)
    assert (odd.first, odd.taps, odd.before, odd.after, odd.extent) == (0, 2, 0, 1, 4)


def test_dilated_and_one_dimensional_ones_are_left_alone():
    rng = np.random.default_rng(0)
    mod = _deconv(rng, (1, 4, 5, 5), (4, 3, 3, 3), strides=(2, 2), dilation=(2, 2))
    assert "nn.conv2d_transpose" in _ops(ConvTransposePhases()(mod))


@pytest.mark.cpu
@pytest.mark.parametrize("name", ["default", "nchwc16", "nchwc-direct"])
def test_builds_match_the_reference(name):
    """Through a named pipeline, the phases' convolutions built (blocked in the blocked ones) with
    a bias and ReLU after the transposed convolution, as DCGAN has."""
    rng = np.random.default_rng(3)
    x = Var("x", TensorType((1, 32, 6, 5), "float32"))
    w = const(rng.standard_normal((32, 24, 4, 3)).astype("float32"))
    y = call("nn.conv2d_transpose", x, w, strides=(2, 2), padding=(1, 1, 1, 0), output_padding=(1, 0),
             channels=24, kernel_size=(4, 3))
    y = call("nn.relu", call("nn.bias_add", y, const(rng.standard_normal(24).astype("float32"))))
    mod = IRModule.from_expr(Function((x,), y))
    prepared = prepare(mod, {}, pipeline(name))
    assert "nn.conv2d_transpose" not in {op_name(n) for f in prepared.functions.values()
                                         for n in post_order(f.body)}
    data = rng.standard_normal((1, 32, 6, 5)).astype("float32")
    got = build_prepared(prepared, resolve_target("llvm"))(data)
    _close(got, autorelay.evaluate(mod["main"], data))


@pytest.mark.cpu
def test_a_plan_addresses_the_same_convolutions_around_a_transposed_one():
    """A plan names convolutions by position: the phases, added after the plan's layouts are
    placed, must not move the name of the conv after the transposed one."""
    rng = np.random.default_rng(4)
    x = Var("x", TensorType((1, 16, 6, 6), "float32"))
    first = call("nn.conv2d", x, const(rng.standard_normal((16, 16, 3, 3)).astype("float32")), padding=(1, 1),
                 channels=16, kernel_size=(3, 3))
    up = call("nn.conv2d_transpose", first, const(rng.standard_normal((16, 32, 4, 4)).astype("float32")),
              strides=(2, 2), padding=(1, 1), channels=32, kernel_size=(4, 4))
    last = call("nn.conv2d", up, const(rng.standard_normal((16, 32, 1, 1)).astype("float32")), channels=16,
                kernel_size=(1, 1))
    mod = IRModule.from_expr(Function((x,), last))
    assert conv_layers(mod) == ["conv2d_0", "conv2d_1"]
    plan = LayoutPlan({"conv2d_0": 0, "conv2d_1": 16})
    fused = prepare(mod, {}, plan_pipeline(plan))
    built = built_layers(prepare(mod, {}, Pipeline(graph_passes())), fused)
    assert (built["conv2d_0"][0], built["conv2d_1"][0]) == (0, 16)
    assert tensor_type(built["conv2d_1"][1].params[0]).shape[1:] == (2, 12, 12, 16)  # after the phases
    data = rng.standard_normal((1, 16, 6, 6)).astype("float32")
    got = build_prepared(fused, resolve_target("llvm"))(data)
    _close(got, autorelay.evaluate(mod["main"], data))
