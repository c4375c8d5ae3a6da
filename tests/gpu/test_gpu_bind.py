"""The Bind step: loops bound to GPU block/thread indices, its legality, and launch shapes."""

from __future__ import annotations

import pytest

from autorelay.codegen.nvptx.launch import launch_of
from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.apply import apply
from autorelay.te import tensor as te
from autorelay.tir.printer import func_str


def _matmul(m=16, n=24, k=20):
    a, w = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="W")
    kk = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, kk] * w[j, kk], kk), name="C")
    return te.make_def([a, w], c)


def test_bind_round_trips_and_marks_the_loops():
    step = S.Bind("C", "i", "blockIdx.x")
    assert S.from_json(S.to_json(step)) == step
    func, _ = apply(_matmul(), [S.Split("C", "j", 8), S.Bind("C", "i", "blockIdx.x"),
                                S.Bind("C", "j_i", "threadIdx.x"), S.Bind("C", "j_o", "threadIdx.y")])
    text = func_str(func)
    assert "for blockIdx.x C.i in 0..16:" in text and "for threadIdx.x C.j_i in 0..8:" in text
    seg = func.body
    assert launch_of(seg).grid == (16, 1, 1) and launch_of(seg).block == (8, 3, 1)


@pytest.mark.parametrize("steps, match", [
    ([S.Bind("C", "k", "threadIdx.x")], "reduction axis cannot be bound"),
    ([S.Bind("C", "i", "warp.x")], "unknown index"),
    ([S.Bind("C", "i", "threadIdx.x"), S.Bind("C", "j", "threadIdx.x")], "already bound"),
    ([S.Vectorize("C", "j"), S.Bind("C", "j", "threadIdx.x")], "already marked vectorized"),
])
def test_illegal_binds_are_schedule_errors(steps, match):
    with pytest.raises(ScheduleError, match=match):
        apply(_matmul(), steps)


@pytest.mark.parametrize("steps, match", [
    ([S.Bind("C", "j", "blockIdx.x")], "outermost loops"),          # a block loop inside a serial one
    ([S.Split("C", "j", 2), S.Bind("C", "j_o", "threadIdx.x"), S.Parallel("C", "i")], "parallel"),
])
def test_illegal_launch_shapes_are_schedule_errors(steps, match):
    func, _ = apply(_matmul(), steps)
    with pytest.raises(ScheduleError, match=match):
        launch_of(func.body)


def test_a_block_larger_than_the_target_allows_is_refused():
    from autorelay.codegen import resolve_target

    func, _ = apply(_matmul(64, 64), [S.Bind("C", "i", "threadIdx.y"), S.Bind("C", "j", "threadIdx.x")])
    assert launch_of(func.body).threads == 4096  # CUDA's own per-dimension limits allow the shape
    with pytest.raises(ScheduleError, match=r"4096 threads .* exceeds the target.s 1024"):
        launch_of(func.body, resolve_target("cuda -arch=sm_90"))
