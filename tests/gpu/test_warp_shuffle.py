"""Cross-thread reductions by warp shuffles (`schedule.cross_thread`, `tir.nodes.shfl_down`): the
emulation in both thread orders against NumPy, the emulation's honesty (a wrong lane offset or a
missing shuffle must give a wrong answer), the PTX (`shfl.sync.down`) through ptxas, and the
fallback to the shared-memory tree where shuffles do not apply."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpu_cases import _reduce_case, _softmax_case, inputs, without_barriers
from test_gpu_emulate import TARGET, _check
from test_nvptx_ptxas import needs_ptxas

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.emulate import run_both_orders
from autorelay.codegen.nvptx.ptx import run_ptxas
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config
from autorelay.te.expr import Call, Const
from autorelay.te.traverse import transform
from autorelay.tir.nodes import SHFL_DOWN, Allocate, Barrier, For, If, Seq, Stmt, Store, shuffles, walk_stmts

SHUFFLE_CASES = {  # lengths below one warp, ragged, and longer than the largest block
    "sum_999": _reduce_case((3, 999), "sum", [1]),
    "sum_5000": _reduce_case((2, 5000), "sum", [1]),
    "max_33": _reduce_case((4, 33), "max", [1]),
    "max_axis_0": _reduce_case((300, 17), "max", [0]),
    "mean_axes_0_2": _reduce_case((37, 4, 23), "mean", [0, 2]),
    "softmax_1000": _softmax_case((2, 1000)),
    "softmax_21": _softmax_case((3, 21)),
    "int32_sum_200": _reduce_case((7, 200), "sum", [1], "int32"),
    "float64_sum_700": _reduce_case((2, 700), "sum", [1], "float64"),
    "int64_min_100": _reduce_case((3, 100), "min", [1], "int64"),
}


def _code(case: str, rt: int, target=TARGET):
    cdef, ref = SHUFFLE_CASES[case]()
    return cdef, ref, emit_kernel(cdef, Config("cuda_reduction", (("threads", 64), ("reduce_threads", rt))),
                                  target)


def _syncs(code) -> tuple[int, list[int]]:
    """Barriers and the offsets of the shuffles, over the whole kernel."""
    stmts = walk_stmts(code.func.body)
    offsets = [int(c.args[1].value) for s in stmts if isinstance(s, Store) for c in shuffles(s.value)]
    return sum(isinstance(s, Barrier) for s in stmts), offsets


@pytest.mark.parametrize("rt", [32, 64, 256, 1024])
@pytest.mark.parametrize("case", sorted(SHUFFLE_CASES))
def test_shuffle_reductions_match_numpy_in_both_thread_orders(case, rt):
    cdef, ref, code = _code(case, rt)
    assert any(isinstance(s, S.CrossThreadReduce) and s.warp == 32 for s in code.steps)
    _check(code, cdef, ref)


@pytest.mark.parametrize("rt", [32, 64, 256, 1024])
def test_one_barrier_and_the_warp_rounds_by_shuffles(rt):
    """Per reduction stage: shuffles 16..1 within each warp; with more than one warp, one barrier
    and shuffles over the per-warp partials (rt/32 of them)."""
    _, _, code = _code("sum_999", rt)
    barriers, offsets = _syncs(code)
    warps = rt // 32
    assert barriers == (1 if warps > 1 else 0)
    assert offsets == [16, 8, 4, 2, 1] + [s for s in (16, 8, 4, 2, 1) if s < warps]
    assert ("bar.sync" in code.code.ptx) == (warps > 1)
    assert code.code.ptx.count("shfl.sync.down.b32") == len(offsets)


def _mutate(code, fn) -> object:
    """`code` with every shuffle call replaced by `fn(call)`."""

    def stmt(s: Stmt) -> Stmt:
        if isinstance(s, Store):
            return Store(s.buffer, s.index, transform(
                s.value, lambda n: fn(n) if isinstance(n, Call) and n.name == SHFL_DOWN else None))
        if isinstance(s, Seq):
            return Seq(tuple(stmt(t) for t in s.stmts))
        if isinstance(s, (For, Allocate)):
            return dataclasses.replace(s, body=stmt(s.body))
        if isinstance(s, If):
            return If(s.cond, stmt(s.then), None if s.orelse is None else stmt(s.orelse))
        return s

    return dataclasses.replace(code, func=code.func.with_body(stmt(code.func.body)))


def _wrong(code, cdef, ref) -> bool:
    xs = inputs(cdef)
    return not any(np.allclose(got, ref(*xs), rtol=1e-4, atol=1e-5) for got in run_both_orders(code, *xs))


@pytest.mark.parametrize("mutation", ["offset_doubled", "offset_plus_one", "no_shuffle"])
@pytest.mark.parametrize("rt", [32, 256])
def test_the_emulation_catches_a_wrong_shuffle(mutation, rt):
    """The emulated shuffle really reads another lane: a wrong offset or a shuffle replaced by the
    lane's own value must give a wrong answer (the correct kernel is checked first)."""
    cdef, ref, code = _code("sum_999", rt)
    _check(code, cdef, ref)
    if mutation == "no_shuffle":
        bad = _mutate(code, lambda c: c.args[0])
    else:
        def fn(c: Call) -> Call:
            off = int(c.args[1].value)
            new = off * 2 if mutation == "offset_doubled" else off + 1
            return Call(c.name, (c.args[0], Const(new, "int32"), c.args[2]), c.dtype)
        bad = _mutate(code, fn)
    assert _wrong(bad, cdef, ref)


def test_the_partials_still_need_their_barrier():
    """Shuffles synchronise a warp only: without the barrier, warps read partials other warps
    have not written, and the emulation (warps run one after another) must be wrong."""
    cdef, ref, code = _code("sum_999", 256)
    racy = dataclasses.replace(code, func=code.func.with_body(without_barriers(code.func.body)))
    assert _wrong(racy, cdef, ref)


def test_a_shuffle_under_a_thread_condition_is_refused():
    """Every lane of a warp must reach a shuffle: under `if t < 16` the launch check refuses it."""
    from autorelay.codegen.nvptx.launch import launch_of

    _, _, code = _code("sum_999", 32)
    seg = code.func.body.stmts[0] if isinstance(code.func.body, Seq) else code.func.body
    loop = next(s for s in walk_stmts(seg) if isinstance(s, For) and s.kind == "threadIdx.x")
    from autorelay.te.expr import Cmp

    guarded = dataclasses.replace(loop, body=If(Cmp("lt", loop.var, Const(16, "int64")), loop.body))
    block = next(s for s in walk_stmts(seg) if isinstance(s, For) and s.kind == "blockIdx.x")
    with pytest.raises(ScheduleError, match="warp shuffle"):
        launch_of(dataclasses.replace(block, body=guarded))


@pytest.mark.parametrize("warp, rt", [(64, 32), (16, 1024)])
def test_the_shared_tree_where_shuffles_do_not_apply(warp, rt):
    """A block narrower than the warp, or more warps than a warp's lanes hold partials: the
    shared-memory tree, and still right."""
    target = resolve_target(f"cuda -arch=sm_90 -warp_size={warp}")
    cdef, ref, code = _code("softmax_1000", rt, target)
    assert "shfl" not in code.code.ptx
    assert _syncs(code)[0] == 2 * (rt.bit_length() - 1)  # per stage: one before each of log2(rt) rounds
    _check(code, cdef, ref)


def test_the_warp_is_checked():
    cdef, _ = SHUFFLE_CASES["sum_999"]()
    with pytest.raises(ScheduleError, match="warp"):
        emit_kernel(cdef, [S.CrossThreadReduce(cdef.output.name, 64, 24)], TARGET)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ["softmax_1000", "int32_sum_200", "float64_sum_700", "int64_min_100"])
def test_shuffle_kernels_assemble_with_ptxas(case, arch):
    """32-bit values shuffle directly; 64-bit ones as two 32-bit shuffles of their halves."""
    target = resolve_target(f"cuda -arch={arch}")
    for rt in (32, 1024):
        _, _, code = _code(case, rt, target)
        ptx = code.code.ptx
        assert "shfl.sync.down.b32" in ptx
        report = run_ptxas(ptx, arch)
        assert set(report.kernels) == {n for n, _ in code.code.segments}
        for k in report.kernels.values():
            assert k["spill_stores"] == 0 and k["spill_loads"] == 0
        if "64" in case:
            _, offsets = _syncs(code)
            assert ptx.count("shfl.sync.down.b32") == 2 * len(offsets)
