"""Values stored with a zero border (`autorelay.te.halo`): a convolution's producer writes the
interior of a bordered buffer and the convolution reads it whole, with no padding pass.

Oracles: the reference interpreter for whole models (at 1 and 2 threads, through save/load, on
repeated calls with fresh inputs, so a border that stopped being zero would show), NumPy's `pad`
for a convolution reading its input pre-padded, and sentinel values for a kernel that must write
only the interior of its output."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import autorelay
from autorelay import te
from autorelay.codegen import resolve_target
from autorelay.errors import ScheduleError
from autorelay.graph_builder import graph_buffer_plans
from autorelay.kernel import BoundKernel, compile_kernel
from autorelay.runtime.graph_plan import Slot, Step, plan_memory
from autorelay.te import nn
from autorelay.te.halo import BufferPlan, pad_request, padded_shape, read_padded
from autorelay.te.tensor import topo_order
from autorelay.transform.fuse_ops import FuseOps
from autorelay.transform.fusion_plan import halos_allowed
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import pipeline_passes
from autorelay.transform.prepare import prepare

pytestmark = pytest.mark.cpu

RNG = np.random.default_rng(11)

# a residual block: %1 is padded by the second convolution and read in place by the add; %4 is
# read by two convolutions that pad it differently (the one asking for the common border reads
# it whole, the other pads as usual)
BLOCK = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 12, 12), float32], %w1: Tensor[(16, 16, 3, 3), float32],
          %w2: Tensor[(16, 16, 3, 3), float32], %w3: Tensor[(8, 16, 3, 3), float32],
          %w4: Tensor[(8, 16, 5, 5), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1], channels=16, kernel_size=[3, 3]);
  %3 = add(%2, %1);
  %4 = nn.relu(%3);
  %5 = nn.conv2d(%4, %w3, padding=[1, 1], channels=8, kernel_size=[3, 3]);
  %6 = nn.conv2d(%4, %w4, padding=[2, 2], channels=8, kernel_size=[5, 5]);
  (%5, %6)
}"""
WEIGHTS = {"w1": (16, 16, 3, 3), "w2": (16, 16, 3, 3), "w3": (8, 16, 3, 3), "w4": (8, 16, 5, 5)}


def _params() -> dict[str, np.ndarray]:
    return {k: (RNG.standard_normal(s) * 0.2).astype("float32") for k, s in WEIGHTS.items()}


def _check(mod, params, exe, x):
    want = autorelay.evaluate(mod, x, *(params[k] for k in WEIGHTS))
    got = exe(x)
    for g, w in zip(got, want):
        w = np.asarray(w)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    return got


@pytest.mark.parametrize("pipeline", ["default", "nchwc", "nchwc16-direct"])
@pytest.mark.parametrize("threads", [1, 2])
def test_bordered_values_match_the_interpreter(pipeline, threads, tmp_path):
    mod = autorelay.parse(BLOCK)
    params = _params()
    exe = autorelay.build(mod, params=params, threads=threads, pipeline=pipeline)
    kinds = [s.kind for s in exe.plan.slots]
    assert "padded" in kinds and "interior" in kinds, kinds
    details = " ".join(r.detail for r in exe.report.rows)
    assert "no padding pass" in details and "writes into a zero-bordered buffer" in details
    assert exe.report.fallbacks == []
    for _ in range(3):  # fresh inputs each call: the borders must still read as zeros
        got = _check(mod, params, exe, RNG.standard_normal((1, 16, 12, 12)).astype("float32"))
    x = RNG.standard_normal((1, 16, 12, 12)).astype("float32")
    got = _check(mod, params, exe, x)
    exe.save(tmp_path / "m.arx")
    again = autorelay.load(tmp_path / "m.arx")(x)
    for a, b in zip(again, got):
        np.testing.assert_array_equal(a, b)


def _without_halos(name: str) -> Pipeline:
    """The named pipeline with its fusion plan's halos switched off."""
    passes = pipeline_passes(name)
    assert isinstance(passes[-1], FuseOps)
    return Pipeline([*passes[:-1], FuseOps(plan=replace(passes[-1].plan, halos=False))])


@pytest.mark.parametrize("pipeline", ["default", "nchwc16-direct"])
def test_a_plan_without_halos_builds_no_bordered_slots(pipeline, tmp_path):
    """`FusionPlan.halos=False` marks the fused function and the builder stores every value
    plainly (also through save/load); both builds agree with the interpreter."""
    mod = autorelay.parse(BLOCK)
    params = _params()
    plain = autorelay.build(mod, params=params, threads=1, pipeline=_without_halos(pipeline))
    bordered = autorelay.build(mod, params=params, threads=1, pipeline=pipeline)
    assert {s.kind for s in plain.plan.slots}.isdisjoint({"padded", "interior"})
    assert "padded" in {s.kind for s in bordered.plan.slots}
    assert not any("zero-bordered" in r.detail for r in plain.report.rows)
    x = RNG.standard_normal((1, 16, 12, 12)).astype("float32")
    _check(mod, params, plain, x)
    _check(mod, params, bordered, x)
    plain.save(tmp_path / "m.arx")
    again = autorelay.load(tmp_path / "m.arx")
    assert {s.kind for s in again.plan.slots}.isdisjoint({"padded", "interior"})


def test_the_fused_function_says_whether_halos_are_allowed():
    mod = autorelay.parse(BLOCK)
    plain = prepare(mod, _params(), _without_halos("default"))
    bordered = prepare(mod, _params(), "default")
    assert not halos_allowed(plain["main"]) and halos_allowed(bordered["main"])
    assert graph_buffer_plans(plain, resolve_target("llvm", 1)) == {}
    assert graph_buffer_plans(bordered, resolve_target("llvm", 1)) != {}


def test_a_convolution_reads_its_input_padded():
    x = te.placeholder((1, 8, 9, 7), "float32", "x")
    w = te.placeholder((4, 8, 3, 3), "float32", "w")
    out = nn.conv2d_nchw(x, w, strides=1, padding=(1, 2, 1, 2))
    cdef = te.make_def([x, w], out)
    halo = pad_request(cdef, 0)
    assert halo == ((0, 0), (0, 0), (1, 1), (2, 2))
    assert pad_request(cdef, 1) is None  # the weight is read by the convolution itself
    whole = read_padded(cdef, 0)
    assert whole.inputs[0].shape == padded_shape(x.shape, halo) == (1, 8, 11, 11)
    assert not any(t.op is not None and t.op.tag == "pad" for t in topo_order(whole.outputs))
    xv = RNG.standard_normal(x.shape).astype("float32")
    wv = RNG.standard_normal(w.shape).astype("float32")
    want = compile_kernel(cdef).run(xv, wv)
    got = compile_kernel(whole).run(np.pad(xv, halo), wv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_pad_that_reads_through_an_inlined_stage_is_kept():
    """A prologue inlined into the pad stage (here an activation; in a layout plan, a re-layout)
    makes the stage read the input through it: the input is not the padded tensor."""
    x = te.placeholder((1, 4, 6, 6), "float32", "x")
    w = te.placeholder((4, 4, 3, 3), "float32", "w")
    out = nn.conv2d_nchw(nn.relu(x, name="act"), w, strides=1, padding=1)
    plain = te.make_def([x, w], out)
    inlined = te.inline_injective(plain, keep=("pad",))
    assert pad_request(inlined, 0) is None
    assert pad_request(te.make_def([x, w], nn.conv2d_nchw(x, w, strides=1, padding=1)), 0) is not None


def test_a_nonzero_pad_is_not_a_border():
    x = te.placeholder((1, 4, 6, 6), "float32", "x")
    out = nn.pool2d(x, "max", 3, 1, 1)
    assert pad_request(te.make_def([x], out), 0) is None


def test_a_pitched_kernel_writes_only_the_interior():
    x = te.placeholder((2, 5, 6), "float32", "x")
    y = nn.relu(x, name="y")
    halo = ((0, 0), (1, 2), (2, 1))
    whole = padded_shape(x.shape, halo)
    cdef = BufferPlan(pitches=((0, whole), (-1, whole))).apply(te.make_def([x], y))
    kern = compile_kernel(cdef)
    src = np.full(whole, np.nan, np.float32)  # a kernel reading the border would see NaN
    inner = (slice(None), slice(1, 6), slice(2, 8))
    src[inner] = RNG.standard_normal(x.shape)
    dst = np.full(whole, 7.0, np.float32)
    BoundKernel(kern, [src[inner]], [dst[inner]], [])()
    np.testing.assert_array_equal(dst[inner], np.maximum(src[inner], 0))
    border = np.ones(whole, bool)
    border[inner] = False
    assert (dst[border] == 7.0).all()  # not one element outside the interior was written
    with pytest.raises(ValueError, match="zero-bordered"):
        kern.bind(src[inner])


def test_a_pitch_on_an_unknown_buffer_is_refused():
    x = te.placeholder((4, 4), "float32", "x")
    cdef = te.make_def([x], nn.relu(x, name="y"))
    bad = te.ComputeDef(cdef.inputs, cdef.outputs, cdef.name, (("nowhere", (6, 6)),))
    with pytest.raises(ScheduleError, match="nowhere"):
        compile_kernel(bad)


def test_bordered_blocks_are_shared_only_by_alike_values():
    """Padded slots of one shape and border take turns in one zero-filled block; another border
    gets its own, and plain temps never land in a zero-filled block."""
    a = Slot((1, 4, 8, 8), "float32", "padded", halo=(0, 0, 1, 1))
    b = Slot((1, 4, 8, 8), "float32", "padded", halo=(0, 0, 1, 1))
    c = Slot((1, 4, 8, 8), "float32", "padded", halo=(0, 0, 2, 0))
    t = Slot((1, 4, 8, 8), "float32", "temp")
    slots = [a, b, c, t]
    steps = [Step("kernel", "a", [], [0]), Step("kernel", "b", [0], [1]), Step("kernel", "c", [1], [2]),
             Step("kernel", "t", [2], [3])]
    mem = plan_memory(slots, steps, [3], 0)
    assert a.index != b.index  # b is written while a is read
    assert c.index not in (a.index, b.index)
    assert sorted(mem.zeroed) == sorted({a.index, b.index, c.index})
    assert t.index not in mem.zeroed
    steps2 = [Step("kernel", "a", [], [0]), Step("kernel", "t", [0], [3]), Step("kernel", "b", [3], [1])]
    for s in slots:
        s.index = -1
    mem2 = plan_memory(slots, steps2, [1], 0)
    assert a.index == b.index and mem2.zeroed == [a.index]  # a is dead when b is written


def test_bordered_blocks_with_another_interior_are_not_shared():
    """Two bordered values of one padded shape and leading border, but different interiors (a
    Winograd reader pads its tiles' overhang after a smaller map): sharing a block would leave the
    larger value's last rows in the smaller one's border."""
    big = Slot((1, 4, 10, 10), "float32", "padded", halo=(0, 0, 1, 1))
    small = Slot((1, 4, 10, 10), "float32", "padded", halo=(0, 0, 1, 1))
    slots = [big, Slot((1, 4, 8, 8), "float32", "interior", 0, halo=(0, 0, 1, 1)),
             small, Slot((1, 4, 7, 7), "float32", "interior", 2, halo=(0, 0, 1, 1)),
             Slot((1,), "float32", "temp")]
    steps = [Step("kernel", "a", [], [1]), Step("kernel", "b", [1], [4]), Step("kernel", "c", [4], [3])]
    plan_memory(slots, steps, [3], 0)
    assert big.index != small.index


def test_a_winograd_layer_after_an_odd_pooled_map_reads_a_zero_border():
    """A map of 22 pixels whose convolution's border a later, 21-pixel map (after a 2x2 stride-1
    pooling) could inherit: both are stored 24 wide with one leading zero, F(2x2)'s overhanging
    tile making the smaller one's trailing border two wide. Checked against the interpreter."""
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 22, 22), float32], %v: Tensor[(32, 32, 3, 3), float32],
          %w: Tensor[(32, 32, 3, 3), float32]) {
  %0 = nn.relu(nn.conv2d(nn.relu(%x), %v, padding=[1, 1], channels=32, kernel_size=[3, 3]));
  nn.conv2d(nn.max_pool2d(%0, pool_size=[2, 2]), %w, padding=[1, 1], channels=32, kernel_size=[3, 3])
}"""
    mod = autorelay.parse(text)
    v, w = ((RNG.standard_normal((32, 32, 3, 3)) * 0.2).astype("float32") for _ in range(2))
    exe = autorelay.build(mod, params={"v": v, "w": w}, pipeline="default")
    assert sum(s.kind == "padded" for s in exe.plan.slots) == 2
    for _ in range(2):
        x = RNG.standard_normal((1, 32, 22, 22)).astype("float32")
        want = np.asarray(autorelay.evaluate(mod, x, v, w))
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
