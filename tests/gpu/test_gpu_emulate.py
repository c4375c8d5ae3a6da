"""GPU schedules checked without a GPU: the GPU-scheduled loop IR runs on the CPU with blocks and
threads as loops (`autorelay.codegen.nvptx.emulate`), threads in both orders, against NumPy."""

from __future__ import annotations

import random

import numpy as np
import pytest
from gpu_cases import CASES, inputs

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.emulate import emulate_func, run_both_orders
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.templates import template_for
from autorelay.te import nn
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


@pytest.mark.parametrize("case", ["sgemm", "dense_bias_relu", "elemwise_math"])
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


def _without_barriers(s):
    from autorelay.tir.nodes import Allocate, Barrier, If, Seq

    if isinstance(s, Seq):
        return Seq(tuple(_without_barriers(t) for t in s.stmts if not isinstance(t, Barrier)))
    if isinstance(s, For):
        return For(s.var, s.extent, _without_barriers(s.body), s.kind)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _without_barriers(s.body))
    if isinstance(s, If):
        return If(s.cond, _without_barriers(s.then),
                  None if s.orelse is None else _without_barriers(s.orelse))
    return s


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
    racy = dataclasses.replace(code, func=code.func.with_body(_without_barriers(code.func.body)))
    xs = inputs(cdef)
    assert not any(np.allclose(got, ref(*xs), rtol=1e-4, atol=1e-4) for got in run_both_orders(racy, *xs))


def test_shared_memory_beyond_the_target_is_refused():
    cdef, _ = CASES["sgemm"]()
    small = resolve_target("cuda -arch=sm_90 -max_shared_memory_per_block=1024")
    with pytest.raises(ScheduleError, match="bytes of shared memory exceed the target's 1024"):
        emit_kernel(cdef, None, small)


def test_cache_read_is_legal_only_for_inputs_read_by_its_readers():
    cdef, _ = CASES["sgemm"]()
    with pytest.raises(ScheduleError, match="not an input"):
        emit_kernel(cdef, [S.CacheRead("C", ("C",))], TARGET)
    with pytest.raises(ScheduleError, match="must be computed at a loop"):
        emit_kernel(cdef, [S.CacheRead("A", ("C",))], TARGET)
    assert S.from_json(S.to_json(S.CacheRead("A", ("C",)))) == S.CacheRead("A", ("C",))
