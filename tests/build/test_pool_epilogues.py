"""Max pooling run in the kernel of the convolution it reads (`FusionPlan.pool_epilogues`, the
`conv2d_nchwc_pool` and `conv2d_winograd_nchwc_pool` templates): which pairs fuse, and that the
fused kernels compute what the reference interpreter computes, with every channel block and
Winograd tile, and for sampled tuning configs. Every host compiles both vector widths (AVX-512 and
AVX2 code); a build runs against the interpreter where this host has its CPU's features, and is
skipped, naming the features it lacks, elsewhere."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from host_widths import build_runnable, run_here_or_skip
from one_config import OneConfig

import autorelay
from autorelay.build_module import build_prepared
from autorelay.codegen import resolve_target
from autorelay.ir.expr import Function
from autorelay.ir.visitor import post_order
from autorelay.lower import workload_key
from autorelay.lower.lower import lower_primitive
from autorelay.op.pool import windows_inside
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, conv_layers, plan_passes
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.prepare import prepare

pytestmark = pytest.mark.cpu

POOLED = FusionPlan(pool_epilogues=True)
TARGETS = ("llvm -mcpu=skylake-avx512", "llvm -mcpu=znver3")


def _model(pool: str, channels: int = 32, size: int = 14, epilogue: str = "nn.relu(add(%0, %b))",
           then_conv: bool = True) -> str:
    """conv 3x3 (16 -> `channels`) -> `epilogue` -> `pool` (-> conv 3x3 reading the pooled map)."""
    tail = "%3 = nn.conv2d(%2, %w2, padding=[1, 1], channels=16, kernel_size=[3, 3]);\n  nn.relu(%3)" \
        if then_conv else "%2"
    return f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, {size}, {size}), float32], %w: Tensor[({channels}, 16, 3, 3), float32],
          %b: Tensor[({channels}, 1, 1), float32], %w2: Tensor[(16, {channels}, 3, 3), float32]) {{
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels={channels}, kernel_size=[3, 3]);
  %1 = {epilogue};
  %2 = {pool};
  {tail}
}}"""


def _params(channels: int = 32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    shapes = {"w": (channels, 16, 3, 3), "b": (channels, 1, 1), "w2": (16, channels, 3, 3)}
    return {k: (rng.standard_normal(s) * 0.3).astype("float32") for k, s in shapes.items()}


def _prepared(src: str, params: dict, block: int, fusion: FusionPlan = POOLED, winograd: int = 0):
    mod = autorelay.parse(src)
    plan = replace(LayoutPlan.uniform(conv_layers(mod), block, winograd=winograd), fusion=fusion)
    return mod, prepare(mod, params, Pipeline(plan_passes(plan)))


def _templates(prepared) -> list[str]:
    """The template of each kernel (primitive function) of a prepared module, in program order."""
    return [template_for(lower_primitive(n)).name for n in post_order(prepared["main"])
            if isinstance(n, Function) and n.is_primitive]


def _check(mod, params, exe, calls: int = 2) -> None:
    rng = np.random.default_rng(9)
    for _ in range(calls):  # fresh inputs: a stale band buffer or border would show
        x = rng.standard_normal(mod["main"].params[0].type_annotation.shape).astype("float32")
        want = np.asarray(autorelay.evaluate(mod, x, *params.values()))
        got = exe(x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def _build_and_check(mod, params, prepared, target: str) -> None:
    """Build for `target` on every host (compiling for the other width is tested too), then run
    against the interpreter where this host has its features (skip, naming them, elsewhere)."""
    __tracebackhide__ = True  # a skip is reported at the test's line
    exe = build_prepared(prepared, resolve_target(target, 2))
    run_here_or_skip(target)
    _check(mod, params, exe)


POOLS = {
    "2x2/2": "nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])",
    "3x3/2 (overlapping)": "nn.max_pool2d(%1, pool_size=[3, 3], strides=[2, 2])",
    "3x3/1": "nn.max_pool2d(%1, pool_size=[3, 3], strides=[1, 1])",
    "2x3/2x1": "nn.max_pool2d(%1, pool_size=[2, 3], strides=[2, 1])",
}


@pytest.mark.parametrize("pool", sorted(POOLS))
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("block", [8, 16])
def test_fused_pooling_matches_the_interpreter(pool, target, block):
    params = _params()
    mod, prepared = _prepared(_model(POOLS[pool], size=15), params, block)
    assert "conv2d_nchwc_pool" in _templates(prepared)
    _build_and_check(mod, params, prepared, target)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("size", [16, 14])  # 14: F(4x4)'s last tile row holds one pooled row
@pytest.mark.parametrize("target", TARGETS)
def test_fused_winograd_pooling_matches_the_interpreter(tile, size, target):
    params = _params()
    mod, prepared = _prepared(_model(POOLS["2x2/2"], size=size), params, 16, winograd=tile)
    assert "conv2d_winograd_nchwc_pool" in _templates(prepared)
    _build_and_check(mod, params, prepared, target)


def test_winograd_keeps_windows_that_are_not_its_tiles_apart():
    params = _params()
    for pool in ("3x3/2 (overlapping)", "3x3/1"):
        mod, prepared = _prepared(_model(POOLS[pool], size=16), params, 16, winograd=4)
        assert not {"conv2d_nchwc_pool", "conv2d_winograd_nchwc_pool"} & set(_templates(prepared)), pool
        _check(mod, params, build_runnable(partial(build_prepared, prepared), *TARGETS), calls=1)


@pytest.mark.parametrize("winograd, pool", [(0, "3x3/2 (overlapping)"), (4, "2x2/2")])
def test_sampled_configs_match_the_interpreter(winograd, pool):
    """Every knob of the space, through random points of it (each a different band or unit,
    register tile, padding and loop order), at 1 and 2 threads."""
    params = _params(48)
    mod, prepared = _prepared(_model(POOLS[pool], channels=48, size=16 if winograd else 17), params, 16,
                              winograd=winograd)
    fn = next(n for n in post_order(prepared["main"]) if isinstance(n, Function) and n.is_primitive
              and "max_pool2d" in str(n.body))
    cdef, pooled_key = lower_primitive(fn), workload_key(fn)
    target = resolve_target(TARGETS[1], 2)
    space = template_for(cdef).space(cdef, target)
    rng = random.Random(3)
    configs = [space.get(i) for i in rng.sample(range(len(space)), 4 if winograd else 6)]
    if winograd:  # both forms of the unit: the stages apart and in the unit
        units = next(k for k in space.knobs if k.name == "unit").values
        first = configs[0].values
        configs[-2:] = [Config(space.template, tuple((k, u if k == "unit" else v) for k, v in first))
                        for u in (units[0], units[-1])]
    for i, config in enumerate(configs):
        space.index(config)  # a point of the space
        for threads in (1, 2) if i == 0 else (2,):  # (compiling the unrolled Winograd pooling is slow)
            exe = build_prepared(prepared, resolve_target(TARGETS[1], threads), OneConfig(pooled_key, config))
            _check(mod, params, exe, calls=1)


@pytest.mark.parametrize("case, src", [
    ("padded pool (ResNet's stem)",
     _model("nn.max_pool2d(%1, pool_size=[3, 3], strides=[2, 2], padding=[1, 1])")),
    ("ceil-mode overhang", _model("nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2], ceil_mode=True)",
                                  size=15)),
    ("no elementwise op between", _model("nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2])",
                                         epilogue="%0")),
    ("average pooling", _model("nn.avg_pool2d(%1, pool_size=[2, 2], strides=[2, 2])")),
])
def test_pairs_the_template_does_not_schedule_stay_apart(case, src):
    params = _params()
    mod, prepared = _prepared(src, params, 16)
    assert "conv2d_nchwc_pool" not in _templates(prepared), case
    _check(mod, params, build_runnable(partial(build_prepared, prepared), *TARGETS), calls=1)


def test_nchw_convolutions_and_relay_rules_keep_the_pooling_apart():
    params = _params()
    src = _model(POOLS["2x2/2"])
    _, nchw = _prepared(src, params, 0)  # NCHW: a direct NCHW conv, not the blocked one
    _, relay = _prepared(src, params, 16, FusionPlan.default())
    assert "conv2d_nchwc_pool" not in _templates(nchw) + _templates(relay)
    assert sum("max_pool2d" in str(n.body) for n in post_order(relay["main"])
               if isinstance(n, Function) and n.is_primitive) == 1  # the pooling's own kernel


def test_the_plan_round_trips_through_json():
    plan = replace(FusionPlan.prologues(), pool_epilogues=True)
    assert FusionPlan.from_json(plan.to_json()) == plan and "pool_epilogues" in repr(plan)
    assert "pool_epilogues" not in FusionPlan.default().to_json()
    layout = replace(LayoutPlan.uniform(["conv2d_0"], 16), fusion=plan)
    assert LayoutPlan.from_json(layout.to_json()) == layout


def _pool_attrs(size, strides, padding=(0, 0, 0, 0), dilation=(1, 1)) -> dict:
    return {"pool_size": size, "strides": strides, "padding": padding, "dilation": dilation}


@pytest.mark.parametrize("attrs, in_hw, out_hw, inside", [
    (_pool_attrs((2, 2), (2, 2)), (8, 8), (4, 4), True),
    (_pool_attrs((3, 3), (2, 2)), (9, 9), (4, 4), True),
    (_pool_attrs((2, 2), (2, 2)), (7, 7), (4, 4), False),  # ceil mode: the last window hangs over
    (_pool_attrs((3, 3), (2, 2), (1, 1, 1, 1)), (8, 8), (4, 4), False),
    (_pool_attrs((2, 2), (1, 1), dilation=(2, 2)), (8, 8), (6, 6), False),
])
def test_windows_inside(attrs, in_hw, out_hw, inside):
    assert windows_inside(attrs, in_hw, out_hw) is inside


@pytest.mark.parametrize("channels, size", [(256, 28), (64, 56), (32, 14)])
@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("target", TARGETS)
def test_the_pooled_winograd_default_is_a_point_of_its_space(channels, size, tile, target):
    """A log's best config is rejected by the build unless it is a point of the space, so a
    default outside it (VGG-16's 256- and 512-channel pooled layers, whose stages run apart in
    units of one block) would be measured, logged best, and then never built as tuned."""
    src = f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, {channels}, {size}, {size}), float32],
          %w: Tensor[({channels}, {channels}, 3, 3), float32]) {{
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels={channels}, kernel_size=[3, 3]);
  nn.max_pool2d(nn.relu(%0), pool_size=[2, 2], strides=[2, 2])
}}"""
    w = np.zeros((channels, channels, 3, 3), "float32")
    _, prepared = _prepared(src, {"w": w}, 16, winograd=tile)
    fn = next(n for n in post_order(prepared["main"]) if isinstance(n, Function) and n.is_primitive
              and "max_pool2d" in str(n.body))
    cdef = lower_primitive(fn)
    tmpl = template_for(cdef)
    assert tmpl.name == "conv2d_winograd_nchwc_pool"
    tgt = resolve_target(target, 2)
    tmpl.space(cdef, tgt).index(tmpl.default(cdef, tgt))  # raises naming the knob if outside
