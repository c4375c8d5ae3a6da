"""Cross-thread reductions (`CrossThreadReduce`, `cuda_reduction`'s `reduce_threads`): a block of
threads per output element, checked by the CPU emulation in both thread orders against NumPy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpu_cases import CASES, XRED_CASES, inputs, without_barriers
from test_gpu_emulate import TARGET, _check

from autorelay.codegen.nvptx.emulate import run_both_orders
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from autorelay.schedule.templates.cuda_reduction import default_reduce_threads
from autorelay.te import nn
from autorelay.te import tensor as te
from autorelay.tir.nodes import Barrier, Seq, walk_stmts


@pytest.mark.parametrize("case", sorted(XRED_CASES))
def test_long_reductions_with_few_outputs_reduce_across_threads_by_default(case):
    cdef, _ = CASES[case]()
    code = emit_kernel(cdef, None, TARGET)
    xred = [s for s in code.steps if isinstance(s, S.CrossThreadReduce)]
    assert xred and all(s.warp == TARGET.warp_size for s in xred)
    assert "shfl.sync.down.b32" in code.code.ptx
    # a block of one warp needs neither shared memory nor a barrier
    if any(s.threads > TARGET.warp_size for s in xred):
        assert "bar.sync" in code.code.ptx and ".shared" in code.code.ptx


@pytest.mark.parametrize("rt", [0, 32, 64, 128, 256, 512, 1024])
@pytest.mark.parametrize("case", ["softmax_1000", "softmax_37", "global_avg_pool_2x64x13x13",
                                  "int32_sum_axis_200", "min_all"])
def test_every_reduce_threads_value_matches_numpy(case, rt):
    """Both forms, every block size: lengths below, above and not a multiple of the block."""
    cdef, ref = CASES[case]()
    cfg = Config("cuda_reduction", (("threads", 64), ("reduce_threads", rt)))
    code = emit_kernel(cdef, cfg, TARGET)
    assert any(isinstance(s, S.CrossThreadReduce) for s in code.steps) == bool(rt)
    _check(code, cdef, ref)


def _drop_barrier(s, which: int):
    """`s` (a segment: blockIdx loop > Allocate > Seq) without its `which`-th barrier."""
    if isinstance(s, Seq):
        bars = [i for i, t in enumerate(s.stmts) if isinstance(t, Barrier)]
        if bars:
            return Seq(tuple(t for i, t in enumerate(s.stmts) if i != bars[which]))
    return dataclasses.replace(s, body=_drop_barrier(s.body, which))


def _shared_tree_steps(cdef, rt: int, threads: int = 128):
    """The template's steps with the shuffles off (`warp=0`): the shared-memory tree throughout."""
    cfg = Config("cuda_reduction", (("threads", threads), ("reduce_threads", rt)))
    steps = template_for(cdef, target=TARGET).steps(cdef, cfg, TARGET)
    return [dataclasses.replace(s, warp=0) if isinstance(s, S.CrossThreadReduce) else s for s in steps]


@pytest.mark.parametrize("which", ["all", 0, -1])
def test_the_tree_reduction_needs_its_barriers(which):
    """Without the barrier after the fold (or before the last round, or all of them), threads
    combine partials other threads have not written yet: the emulation must be wrong. (Dropped
    from the sum-of-exp kernel: softmax's result does not depend on the max it subtracts.)"""
    cdef, ref = CASES["softmax_1000"]()
    code = emit_kernel(cdef, _shared_tree_steps(cdef, 64), TARGET)
    assert "shfl" not in code.code.ptx
    segs = code.func.body.stmts
    assert sum(isinstance(t, Barrier) for t in walk_stmts(segs[1])) == 6  # after the fold + 5 rounds
    _check(code, cdef, ref)
    if which == "all":
        body = without_barriers(code.func.body)
    else:
        body = Seq((segs[0], _drop_barrier(segs[1], which), *segs[2:]))
    racy = dataclasses.replace(code, func=code.func.with_body(body))
    xs = inputs(cdef)
    outs = run_both_orders(racy, *xs)
    assert not all(np.allclose(got, ref(*xs), rtol=1e-4, atol=1e-5) for got in outs)


def test_default_rule():
    assert default_reduce_threads(1, 1000, 1024, 132) == 512  # softmax over 1000 classes at batch 1
    assert default_reduce_threads(512, 49, 1024, 132) == 32  # ResNet's global pool at batch 1
    assert default_reduce_threads(1000, 1000, 1024, 132) == 256
    assert default_reduce_threads(4096, 16, 1024, 132) == 0  # short: one thread each
    assert default_reduce_threads(200_000, 1000, 1024, 132) == 0  # enough outputs to fill the GPU
    assert default_reduce_threads(1, 1000, 256, 132) == 256  # the target's block limit


def test_many_short_reductions_keep_the_serial_form():
    x = te.placeholder((64, 64, 56, 56), name="X")
    cdef = te.make_def([x], nn.pool2d(x, "max", 3, 2, 1))
    assert template_for(cdef, target=TARGET).default(cdef, TARGET)["reduce_threads"] == 0


def test_cross_thread_reduce_is_checked_and_round_trips():
    cdef, _ = CASES["softmax_37"]()
    step = S.CrossThreadReduce("softmax_max", 64)
    assert S.from_json(S.to_json(step)) == step
    for bad in ([S.CrossThreadReduce("softmax_max", 48)], [S.CrossThreadReduce("softmax", 64)],
                [S.CrossThreadReduce("softmax_max", 64), S.Split("softmax_max", "i0", 2)]):
        with pytest.raises(ScheduleError):
            emit_kernel(cdef, bad, TARGET)
