"""The `default` pipeline runs grouped convolutions (not depthwise ones) in channel blocks, where
they have a register-tiled template, and every other convolution as before."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

pytestmark = pytest.mark.cpu

NET = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 12, 12), float32], %g: Tensor[(32, 8, 3, 3), float32],
          %d: Tensor[(32, 1, 3, 3), float32], %p: Tensor[(16, 32, 1, 1), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %g, padding=[1, 1], groups=4));
  %1 = nn.relu(nn.conv2d(%0, %d, padding=[1, 1], groups=32));
  nn.conv2d(%1, %p)
}
"""


def _net_and_answer(seed: int):
    """NET parsed, random weights and input, and the reference interpreter's output."""
    mod = autorelay.parse(NET)
    gen = np.random.default_rng(seed)
    params = {p.name_hint: gen.standard_normal(p.type_annotation.concrete_shape).astype("float32")
              for p in mod["main"].params[1:]}
    x = gen.standard_normal((1, 32, 12, 12)).astype("float32")
    return mod, params, x, np.asarray(autorelay.evaluate(autorelay.infer_types(mod), x, *params.values()))


def test_grouped_convolutions_take_the_blocked_template_in_default():
    mod, params, x, want = _net_and_answer(0)
    exe = autorelay.build(mod, params=params, pipeline="default")
    np.testing.assert_allclose(np.asarray(exe(x)), want, rtol=1e-4, atol=1e-4)
    templates = [row.detail.split()[0] for row in exe.report.rows]
    assert templates.count("conv2d_nchwc") == 1, templates  # the grouped one; depthwise and 1x1 stay NCHW
    assert "reduction" not in templates and not exe.report.fallbacks, templates


@pytest.mark.parametrize("blocks", [{}, {"conv2d_2": 16}], ids=["all NCHW", "the 1x1 blocked"])
def test_a_layout_plan_runs_its_nchw_grouped_convolutions_as_default_does(blocks):
    """A layout plan that leaves a grouped convolution in NCHW (by name or unnamed: the layout
    program does not model packings it cannot price, such as several narrow groups to a block)
    must not leave it to the generic reduction schedule, many times slower: the plan's NCHW is
    `default`'s, grouped convolutions packed in blocks."""
    from autorelay.transform.layout_plan import LayoutPlan, plan_pipeline

    mod, params, x, want = _net_and_answer(1)
    exe = autorelay.build(mod, params=params, pipeline=plan_pipeline(LayoutPlan(blocks)))
    np.testing.assert_allclose(np.asarray(exe(x)), want, rtol=1e-4, atol=1e-4)
    templates = [row.detail.split()[0] for row in exe.report.rows]
    assert templates.count("conv2d_nchwc") == 1 + len(blocks), templates
    assert "reduction" not in templates and not exe.report.fallbacks, templates
