"""GPU schedules checked without a GPU: the GPU-scheduled loop IR runs on the CPU with blocks and
threads as loops (`autorelay.codegen.nvptx.emulate`), threads in both orders, against NumPy."""

from __future__ import annotations

import random

import numpy as np
import pytest
from gpu_cases import CASES, CONV_CASES, XRED_CASES, inputs, without_barriers

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.emulate import emulate_func, run_both_orders
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.templates import template_for
from autorelay.te import expr as E
from autorelay.te import nn, nn_depthwise
from autorelay.te import tensor as te
from autorelay.tir.nodes import For, walk_stmts

TARGET = resolve_target("cuda -arch=sm_90")


def _check(code, cdef, ref):
    xs = inputs(cdef)
    want = ref(*xs)
    for got in run_both_orders(code, *xs):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_gpu_schedule_matches_numpy(case):
    cdef, ref = CASES[case]()
    tmpl = template_for(cdef, target=TARGET)
    assert tmpl.kind == "cuda"
    _check(emit_kernel(cdef, None, TARGET), cdef, ref)


@pytest.mark.parametrize("case", ["sgemm", "dense_bias_relu", "elemwise_math", "softmax", *sorted(CONV_CASES),
                                  *sorted(XRED_CASES)])
def test_random_gpu_configs_match_numpy(case):
    cdef, ref = CASES[case]()
    tmpl = template_for(cdef, target=TARGET)
    space = tmpl.space(cdef, TARGET)
    rng = random.Random(7)
    done = 0
    while done < 3:
        cfg = space.sample(rng)
        try:
            code = emit_kernel(cdef, cfg, TARGET)
        except ScheduleError:  # e.g. more threads than a block may have: pruned, as a tuner would
            continue
        _check(code, cdef, ref)
        done += 1


def test_emulated_ir_has_no_bound_loops_and_guards_short_thread_loops():
    cdef, _ = CASES["dense_bias_relu"]()
    code = emit_kernel(cdef, None, TARGET)
    emu = emulate_func(code.func)
    kinds = {s.kind for s in walk_stmts(emu.body) if isinstance(s, For)}
    assert kinds <= {"serial", "unrolled", "vectorized"}
    assert any(s.kind.startswith("threadIdx") for s in walk_stmts(code.func.body) if isinstance(s, For))


def test_a_schedule_reading_another_threads_registers_fails_in_emulation():
    """Thread (y, x) computes accumulator row x but copies out row y: fine as CPU loops, wrong on a
    GPU (registers are private). The emulation must say so, while the right binding passes."""
    a, w = te.placeholder((32, 16), name="A"), te.placeholder((32, 16), name="W")
    cdef = te.make_def([a, w], nn.dense(a, w, name="C"))
    base = [S.CacheWrite("C"), S.Split("C", "i", 8, "ib", "it"), S.Bind("C", "ib", "blockIdx.x"),
            S.Bind("C", "it", "threadIdx.y"), S.Bind("C", "j", "threadIdx.x")]
    xs = inputs(cdef)
    ok = emit_kernel(cdef, [*base, S.ComputeAt("C_local", "C", "ib"), S.Bind("C_local", "i", "threadIdx.y")],
                     TARGET)
    for got in run_both_orders(ok, *xs):
        np.testing.assert_allclose(got, xs[0] @ xs[1].T, rtol=1e-4, atol=1e-5)
    bad = emit_kernel(cdef, [*base, S.ComputeAt("C_local", "C", "ib"), S.Bind("C_local", "i", "threadIdx.x")],
                      TARGET)
    for got in run_both_orders(bad, *xs):
        assert not np.allclose(got, xs[0] @ xs[1].T)


def test_shared_memory_gemm_needs_its_barriers():
    """The default sgemm copies k-tiles into shared memory between barriers; the emulation runs
    each barrier-delimited phase for all threads and matches NumPy — and without the barriers
    threads read tiles not yet copied (or already overwritten), so it must not."""
    import dataclasses

    from autorelay.tir.nodes import Barrier

    cdef, ref = CASES["sgemm"]()
    code = emit_kernel(cdef, None, TARGET)
    assert code.steps and any(isinstance(s, S.CacheRead) for s in code.steps)
    assert sum(isinstance(s, Barrier) for s in walk_stmts(code.func.body)) == 2
    assert "bar.sync" in code.code.ptx and ".shared" in code.code.ptx
    _check(code, cdef, ref)
    racy = dataclasses.replace(code, func=code.func.with_body(without_barriers(code.func.body)))
    xs = inputs(cdef)
    assert not any(np.allclose(got, ref(*xs), rtol=1e-4, atol=1e-4) for got in run_both_orders(racy, *xs))


def test_shared_memory_beyond_the_target_is_refused():
    cdef, _ = CASES["sgemm"]()
    small = resolve_target("cuda -arch=sm_90 -max_shared_memory_per_block=256")
    with pytest.raises(ScheduleError, match="bytes of shared memory exceed the target's 256"):
        emit_kernel(cdef, None, small)


def test_cache_read_is_legal_only_for_inputs_read_by_its_readers():
    cdef, _ = CASES["sgemm"]()
    with pytest.raises(ScheduleError, match="not an input"):
        emit_kernel(cdef, [S.CacheRead("C", ("C",))], TARGET)
    with pytest.raises(ScheduleError, match="must be computed at a loop"):
        emit_kernel(cdef, [S.CacheRead("A", ("C",))], TARGET)
    assert S.from_json(S.to_json(S.CacheRead("A", ("C",)))) == S.CacheRead("A", ("C",))


@pytest.mark.parametrize("case", ["conv2d", *sorted(CONV_CASES)])
def test_nchw_convolutions_take_the_cuda_conv2d_template(case):
    """Padding and the epilogue are inlined; one kernel, the register tile at the thread loop."""
    cdef, _ = CASES[case]()
    assert template_for(cdef, target=TARGET).name == "cuda_conv2d"
    code = emit_kernel(cdef, None, TARGET)
    assert len(code.code.launches) == 1
    assert any(isinstance(s, S.ComputeAt) and s.axis == "q.t" for s in code.steps)


def test_cuda_conv2d_shares_the_weight_tile_and_keeps_its_barriers():
    """A config with shared_ic stages the block's weight slab through shared memory between
    barriers, and still matches NumPy (both thread orders)."""
    from autorelay.schedule.space import Config

    cdef, ref = CONV_CASES["conv_bias_residual_relu"]()
    cfg = Config("cuda_conv2d", (("threads_x", 8), ("threads_y", 4), ("tile_oc", 4), ("tile_p", 3),
                                 ("shared_ic", 8), ("unroll_kw", 1)))
    code = emit_kernel(cdef, cfg, TARGET)
    assert any(isinstance(s, S.CacheRead) for s in code.steps) and "bar.sync" in code.code.ptx
    _check(code, cdef, ref)


def test_cuda_conv2d_default_fills_a_big_gpu_for_resnet18_layers():
    """Batch 1 and batch 32 ResNet-18 layers: at least one block per multiprocessor of the target,
    at most 32 accumulators per thread, no more threads than a block may have."""
    tmpl = template_for(CASES["conv2d"]()[0], target=TARGET)
    for n in (1, 32):
        for c, h, k, ks, st, p in [(3, 224, 64, 7, 2, 3), (64, 56, 64, 3, 1, 1), (256, 14, 512, 1, 2, 0),
                                   (512, 7, 512, 3, 1, 1)]:
            x, w = te.placeholder((n, c, h, h), name="X"), te.placeholder((k, c, ks, ks), name="W")
            cdef = te.make_def([x, w], nn.conv2d_nchw(x, w, st, p))
            cfg = tmpl.default(cdef, TARGET)
            tx, ty, toc, tp = (cfg[k] for k in ("threads_x", "threads_y", "tile_oc", "tile_p"))
            oh = (h + 2 * p - ks) // st + 1
            blocks = n * -(-k // (ty * toc)) * -(-(oh * -(-oh // tp)) // tx)
            assert blocks >= TARGET.multiprocessors and toc * tp <= 32 and tx * ty <= 1024, (n, c, h, k, cfg)


def test_depthwise_and_grouped_convolutions_stay_on_cuda_reduction():
    """cuda_conv2d schedules groups == 1 only: depthwise and grouped computes carry other tags."""
    from autorelay.te import nn_int8

    x, w = te.placeholder((1, 8, 10, 10), name="X"), te.placeholder((8, 1, 3, 3), name="W")
    dw = te.make_def([x, w], nn_depthwise.depthwise_conv2d_nchw(x, w, 1, 1))
    assert template_for(dw, target=TARGET).name == "cuda_reduction"
    xq, wq = te.placeholder((1, 8, 10, 10), "uint8", name="X"), te.placeholder((8, 4, 3, 3), "int8", name="W")
    grouped = nn_int8.conv2d_nchw_q(xq, wq, E.const(3, "int32"), lambda f: E.const(0, "int32"), 1, 1,
                                    groups=2)
    assert template_for(te.make_def([xq, wq], grouped), target=TARGET).name == "cuda_reduction"


def _conv2d_transpose(groups: int):
    from autorelay.ir.types import TensorType
    from autorelay.op.check import infer_op_type, run_op
    from autorelay.op.conv_transpose import _conv2d_transpose_compute
    from autorelay.op.registry import get

    xs, ws = (1, 4, 5, 6), (4, 6 // groups, 3, 3)
    kw = dict(strides=(2, 2), padding=(1, 1, 1, 1), groups=groups, kernel_layout="IOHW")
    out_type = infer_op_type("nn.conv2d_transpose", [TensorType(xs), TensorType(ws)], **kw)
    x, w = te.placeholder(xs, name="X"), te.placeholder(ws, name="W")
    out = _conv2d_transpose_compute([x, w], get("nn.conv2d_transpose").make_attrs(kw), out_type)
    return te.make_def([x, w], out), lambda x, w: run_op("nn.conv2d_transpose", x, w, **kw)


def test_transposed_convolutions_share_the_tag_but_only_ungrouped_ones_take_cuda_conv2d():
    """conv2d_transpose is tagged `conv2d_nchw` (IOHW weights): with groups == 1 cuda_conv2d
    schedules it (no shared weight slab: its taps depend on the output phase); grouped, it does
    not claim it."""
    cdef, ref = _conv2d_transpose(1)
    assert template_for(cdef, target=TARGET).name == "cuda_conv2d"
    tmpl, rng, done = template_for(cdef, target=TARGET), random.Random(5), 0
    assert tmpl.space(cdef, TARGET).knob("shared_ic").values == (0,)
    _check(emit_kernel(cdef, None, TARGET), cdef, ref)
    while done < 2:
        try:
            code = emit_kernel(cdef, tmpl.space(cdef, TARGET).sample(rng), TARGET)
        except ScheduleError:
            continue
        _check(code, cdef, ref)
        done += 1
    grouped, ref = _conv2d_transpose(2)
    assert template_for(grouped, target=TARGET).name == "cuda_reduction"
    _check(emit_kernel(grouped, None, TARGET), grouped, ref)
