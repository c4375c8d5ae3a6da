"""A depthwise convolution computed per band of rows inside the 1x1 convolution that reads it
(`FusionPlan.depthwise_bands`, the `conv2d_nchwc_dwpw` template), and with it the convolution
producing its input (`FusionPlan.expansions`: an inverted residual block in one kernel): which pairs
and triples fuse, and that the fused kernels compute what the reference interpreter computes, for
every tail, stride, block and sampled tuning config. Every host compiles both vector widths (AVX-512
and AVX2 code); a build runs against the interpreter where this host has its CPU's features, and is
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
from autorelay.schedule.templates import template_for
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, conv_layers, plan_passes
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.prepare import prepare

pytestmark = pytest.mark.cpu

BANDS = FusionPlan(depthwise_bands=True)
TARGETS = ("llvm -mcpu=skylake-avx512", "llvm -mcpu=znver3")
RELU6 = "clip(add(%0, %bd), a_min=0f, a_max=6f)"
TEMPLATE = "conv2d_nchwc_dwpw"


def _model(channels: int = 32, out: int = 16, size: int = 14, stride: int = 1, tail: str = RELU6,
           kernel: int = 3, residual: bool = False, expand: bool = False, multiplier: int = 1,
           pw_kernel: int = 1, pw_stride: int = 1, expand_tail: bool = True, expand_kernel: int = 1,
           expand_stride: int = 1, padding: int | None = None) -> str:
    """(with `expand`: an `expand_kernel`x`expand_kernel` conv from 8 channels (`expand_stride`,
    padded to keep the map), with `expand_tail` a ReLU ->) depthwise `kernel`x`kernel` conv
    (`channels`, `stride`, `padding`, by default half the kernel; `multiplier` outputs per channel)
    -> `tail` -> conv `pw_kernel`x`pw_kernel` (-> `out`, `pw_stride`) -> bias (-> + the input, with
    `residual`: a MobileNet-v2 block)."""
    pad, pw_pad, mid = kernel // 2 if padding is None else padding, pw_kernel // 2, channels * multiplier
    end = "add(%3, %x)" if residual else "%3"
    ek, es = expand_kernel, expand_stride
    data = f"%x: Tensor[(1, 8, {size}, {size}), float32], %we: Tensor[({channels}, 8, {ek}, {ek}), float32]" \
        if expand else f"%x: Tensor[(1, {channels}, {size}, {size}), float32]"
    # a kernel's output as the depthwise input: the graph builder stores it zero-bordered (a halo)
    source = (f"nn.conv2d(%x, %we, strides=[{es}, {es}], padding=[{ek // 2}, {ek // 2}], "
              f"channels={channels}, kernel_size=[{ek}, {ek}])")
    source = (f"nn.relu({source})" if expand_tail else source) if expand else "%x"
    return f"""#[version = "0.0.5"]
def @main({data},
          %wd: Tensor[({mid}, 1, {kernel}, {kernel}), float32], %bd: Tensor[({mid}, 1, 1), float32],
          %wp: Tensor[({out}, {mid}, {pw_kernel}, {pw_kernel}), float32],
          %bp: Tensor[({out}, 1, 1), float32]) {{
  %0 = nn.conv2d({source}, %wd, strides=[{stride}, {stride}], padding=[{pad}, {pad}], groups={channels},
                 channels={mid}, kernel_size=[{kernel}, {kernel}]);
  %1 = {tail};
  %2 = nn.conv2d(%1, %wp, strides=[{pw_stride}, {pw_stride}], padding=[{pw_pad}, {pw_pad}], channels={out},
                 kernel_size=[{pw_kernel}, {pw_kernel}]);
  %3 = add(%2, %bp);
  {end}
}}"""


def _params(mod) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {p.name_hint: (rng.standard_normal(p.type_annotation.shape) * 0.3).astype("float32")
            for p in mod["main"].params[1:]}


def _prepared(src: str, block: int = 8, fusion: FusionPlan = BANDS):
    mod = autorelay.parse(src)
    params = _params(mod)
    plan = replace(LayoutPlan.uniform(conv_layers(mod), block, winograd=0), fusion=fusion)
    return mod, params, prepare(mod, params, Pipeline(plan_passes(plan)))


def _kernels(prepared) -> list[Function]:
    return [n for n in post_order(prepared["main"]) if isinstance(n, Function) and n.is_primitive]


def _templates(prepared) -> list[str]:
    """The template of each kernel of a prepared module, in program order."""
    return [template_for(lower_primitive(fn)).name for fn in _kernels(prepared)]


def _check(mod, params, exe, calls: int = 2) -> None:
    rng = np.random.default_rng(9)
    for _ in range(calls):  # fresh inputs: a stale band would show
        x = rng.standard_normal(mod["main"].params[0].type_annotation.shape).astype("float32")
        want = np.asarray(autorelay.evaluate(mod, x, *params.values()))
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


CASES = {
    "ReLU6 (MobileNet-v2)": {},
    "stride 2, odd map": {"stride": 2, "size": 15, "channels": 48, "out": 24},
    "no tail: the band is the depthwise output": {"tail": "%0"},
    "ReLU, residual add after the 1x1": {"tail": "nn.relu(add(%0, %bd))", "out": 32, "residual": True},
    "5x5 depthwise (MnasNet)": {"kernel": 5, "size": 9},
    "a kernel's output read through its halo": {"expand": True, "stride": 2, "size": 16},
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("block", [8, 16])
def test_banded_pairs_match_the_interpreter(case, target, block):
    mod, params, prepared = _prepared(_model(**CASES[case]), block)
    # the pair and the 1x1's epilogue (bias, a residual add) are one kernel
    names = _templates(prepared)
    assert names.count(TEMPLATE) == 1, names
    convs = [fn for fn in _kernels(prepared) if "nn.conv2d" in str(fn.body)]
    assert len(convs) == 1 + CASES[case].get("expand", False), names
    exe = build_prepared(prepared, resolve_target(target, 2))
    run_here_or_skip(target)
    _check(mod, params, exe)


@pytest.mark.parametrize("case", ["ReLU6 (MobileNet-v2)", "stride 2, odd map"])
def test_sampled_configs_match_the_interpreter(case):
    """Random points of the space (band rows, both register tiles), at 1 and 2 threads."""
    mod, params, prepared = _prepared(_model(**{**CASES[case], "size": 2 * CASES[case].get("size", 14)}), 16)
    fn = next(f for f in _kernels(prepared) if template_for(lower_primitive(f)).name == TEMPLATE)
    cdef, key = lower_primitive(fn), workload_key(fn)
    target = resolve_target(TARGETS[1], 2)
    space = template_for(cdef).space(cdef, target)
    rows = next(k for k in space.knobs if k.name == "band_rows").values
    assert len(rows) > 2 and rows[0] == 1
    configs = [space.get(i) for i in random.Random(3).sample(range(len(space)), 5)]
    configs.append(template_for(cdef).default(cdef, target))
    for i, config in enumerate(configs):
        space.index(config)  # a point of the space
        for threads in (1, 2) if i == 0 else (2,):
            exe = build_prepared(prepared, resolve_target(TARGETS[1], threads), OneConfig(key, config))
            _check(mod, params, exe, calls=1)


@pytest.mark.parametrize("case, src", [
    ("3x3 convolution after the depthwise one", _model(pw_kernel=3)),
    ("strided 1x1", _model(pw_stride=2)),
    ("channel multiplier 2 (not depthwise)", _model(multiplier=2)),
    ("the activation read twice", _model(tail="clip(add(%0, %bd), a_min=0f, a_max=6f)").replace(
        "add(%2, %bp);", "add(add(%2, %bp), mean(%1, axis=[1], keepdims=True));")),
])
def test_pairs_the_template_does_not_schedule_stay_apart(case, src):
    mod, params, prepared = _prepared(src, 16)
    assert TEMPLATE not in _templates(prepared), case
    _check(mod, params, build_runnable(partial(build_prepared, prepared), *TARGETS), calls=1)


def test_nchw_convolutions_and_relay_rules_keep_the_pair_apart():
    src = _model()
    _, _, nchw = _prepared(src, 0)  # NCHW: the plain depthwise kernel, not the blocked one
    _, _, relay = _prepared(src, 8, FusionPlan.default())
    assert TEMPLATE not in _templates(nchw) + _templates(relay)
    # Relay's rules: the depthwise convolution and the 1x1 are kernels of their own
    assert sum("nn.conv2d" in str(fn.body) for fn in _kernels(relay)) == 2


def test_the_plan_round_trips_through_json():
    plan = replace(FusionPlan.prologues(), depthwise_bands=True).without_edges([(3, 4)])
    assert FusionPlan.from_json(plan.to_json()) == plan and "depthwise_bands=True" in repr(plan)
    assert "depthwise_bands" not in FusionPlan().to_json()  # plans stored before bands read back the same


EXPANSIONS = FusionPlan(depthwise_bands=True, expansions=True)
EXPANSION_CASES = {
    "MobileNet-v2 block (1x1 expansion, ReLU6 band)": {"expand": True},
    "residual add": {"expand": True, "out": 8, "residual": True, "tail": "nn.relu(add(%0, %bd))"},
    "stride 2, odd map": {"expand": True, "stride": 2, "size": 15, "channels": 48, "out": 24},
    "expansion without a tail": {"expand": True, "expand_tail": False},
    "5x5 depthwise": {"expand": True, "kernel": 5, "size": 9},
    "unpadded depthwise": {"expand": True, "padding": 0, "size": 12},
    "stem: a padded stride-2 3x3 expansion": {"expand": True, "expand_kernel": 3, "expand_stride": 2,
                                             "size": 29},
}


@pytest.mark.parametrize("case", sorted(EXPANSION_CASES))
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("block", [8, 16])
def test_expanded_bands_match_the_interpreter(case, target, block):
    """The expansion, the depthwise convolution, the 1x1 and its epilogue in one kernel."""
    mod, params, prepared = _prepared(_model(**EXPANSION_CASES[case]), block, EXPANSIONS)
    names = _templates(prepared)
    convs = [fn for fn in _kernels(prepared) if "nn.conv2d" in str(fn.body)]
    assert names.count(TEMPLATE) == 1 and len(convs) == 1, names
    assert str(convs[0].body).count("nn.conv2d") == 3
    exe = build_prepared(prepared, resolve_target(target, 2))
    run_here_or_skip(target)
    _check(mod, params, exe)


@pytest.mark.parametrize("case", ["MobileNet-v2 block (1x1 expansion, ReLU6 band)", "stride 2, odd map"])
def test_sampled_expansion_configs_match_the_interpreter(case):
    """Random points of the space with an expansion (band rows, all three register tiles), at 1
    and 2 threads: each unit's halo rows, computed again by its neighbour, must agree."""
    src = _model(**{**EXPANSION_CASES[case], "size": 2 * EXPANSION_CASES[case].get("size", 14)})
    mod, params, prepared = _prepared(src, 16, EXPANSIONS)
    fn = next(f for f in _kernels(prepared) if template_for(lower_primitive(f)).name == TEMPLATE)
    cdef, key = lower_primitive(fn), workload_key(fn)
    target = resolve_target(TARGETS[1], 2)
    space = template_for(cdef).space(cdef, target)
    assert {"ex_blocks", "ex_tile_ow"} <= {k.name for k in space.knobs}
    configs = [space.get(i) for i in random.Random(4).sample(range(len(space)), 5)]
    configs.append(template_for(cdef).default(cdef, target))
    for i, config in enumerate(configs):
        for threads in (1, 2) if i == 0 else (2,):
            exe = build_prepared(prepared, resolve_target(TARGETS[1], threads), OneConfig(key, config))
            _check(mod, params, exe, calls=1)


def _expansion_edge(src: str, block: int = 16) -> tuple[int, int]:
    """The edge `FusionPlan.expansions` adds to the bands in `src`'s blocked graph."""
    from autorelay.transform.fuse_ops import fused_edge_calls

    mod = autorelay.parse(src)
    plan = LayoutPlan.uniform(conv_layers(mod), block, winograd=0)
    fn = prepare(mod, _params(mod), Pipeline(plan_passes(plan)[:-1]))["main"]
    added = set(fused_edge_calls(fn, EXPANSIONS)) - set(fused_edge_calls(fn, BANDS))
    assert len(added) == 1
    return added.pop()


def _read_twice(src: str) -> str:
    """`src` with its expansion's output bound to a name and read by the output too."""
    source = "nn.relu(nn.conv2d(%x, %we, strides=[1, 1], padding=[0, 0], channels=32, kernel_size=[1, 1]))"
    assert source in src
    return (src.replace(source, "%9").replace("  %0 =", f"  %9 = {source};\n  %0 =", 1)
            .replace("add(%2, %bp);", "add(add(%2, %bp), mean(%9, axis=[1], keepdims=True));"))


@pytest.mark.parametrize("case, src, fusion", [
    ("expansions without bands", _model(expand=True), FusionPlan(expansions=True)),
    ("no band: a strided 1x1", _model(expand=True, pw_stride=2), EXPANSIONS),
    ("the expanded value read twice", _read_twice(_model(expand=True)), EXPANSIONS),
    ("the expansion edge disabled", _model(expand=True),
     EXPANSIONS.without_edges([_expansion_edge(_model(expand=True))])),
])
def test_expansions_that_may_not_join_stay_apart(case, src, fusion):
    mod, params, prepared = _prepared(src, 16, fusion)
    convs = [fn for fn in _kernels(prepared) if "nn.conv2d" in str(fn.body)]
    assert all(str(fn.body).count("nn.conv2d") < 3 for fn in convs), case
    assert sum(str(fn.body).count("nn.conv2d") for fn in convs) == 3
    _check(mod, params, build_runnable(partial(build_prepared, prepared), *TARGETS), calls=1)


def test_an_expanded_plan_round_trips_through_json():
    plan = EXPANSIONS.without_edges([(2, 3)])
    assert FusionPlan.from_json(plan.to_json()) == plan and "expansions=True" in repr(plan)
    assert "expansions" not in BANDS.to_json()  # plans stored before expansions read back the same
