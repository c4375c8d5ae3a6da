"""GPU cost-model features: registers from `ptxas -v` (parsed, cached, plumbed into the feature
vector of built and of featurized candidates), occupancy from the target's per-multiprocessor
limits, and a vector whose length does not depend on whether ptxas exists."""

from __future__ import annotations

import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx import ptx as ptx_mod
from autorelay.codegen.nvptx.device import occupancy
from autorelay.codegen.nvptx.ptx import parse_ptxas_verbose, ptxas_path, run_ptxas
from autorelay.kernel import emit_kernel
from autorelay.schedule.space import Config
from autorelay.te import nn
from autorelay.te import tensor as te
from search import features as F
from search.features import GPU, LENGTH, code_features, ptxas_registers
from search.task import kernel_task
from search.tuners.model_based import lower_features

needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas not found: pip install nvidia-cuda-nvcc-cu12 (the dev extra)")
SM80, SM90 = resolve_target("cuda -arch=sm_80"), resolve_target("cuda -arch=sm_90")
GPU0 = LENGTH - 2 * F.KNOBS - GPU  # where the GPU block starts in the vector

# `ptxas -v` of a three-kernel module (a softmax: two cross-thread reductions and the output),
# ptxas 12.9 for sm_80 (it lists kernels last to first)
PTXAS_SM80 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_d1987f01460297c1_s2' for 'sm_80'
ptxas info    : Function properties for k_d1987f01460297c1_s2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 0 barriers, 384 bytes cmem[0]
ptxas info    : Compile time = 22.173 ms
ptxas info    : Compiling entry function 'k_d1987f01460297c1_s1' for 'sm_80'
ptxas info    : Function properties for k_d1987f01460297c1_s1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 19 registers, used 1 barriers, 32 bytes smem, 384 bytes cmem[0]
ptxas info    : Compile time = 17.682 ms
ptxas info    : Compiling entry function 'k_d1987f01460297c1_s0' for 'sm_80'
ptxas info    : Function properties for k_d1987f01460297c1_s0
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 32 bytes smem, 384 bytes cmem[0]
ptxas info    : Compile time = 11.720 ms
"""
# the older spelling (no "used N barriers") with a called device function, whose frame and
# spills are its own, not the kernel's
PTXAS_OLD_WITH_CALL = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
    24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'k_s0' for 'sm_70'
ptxas info    : Function properties for k_s0
    16 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, 1024 bytes smem, 356 bytes cmem[0]
ptxas info    : Function properties for helper
    24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
"""


def test_ptxas_verbose_output_is_parsed_per_kernel():
    ks = parse_ptxas_verbose(PTXAS_SM80)
    assert {n: k["registers"] for n, k in ks.items()} == {
        "k_d1987f01460297c1_s0": 14, "k_d1987f01460297c1_s1": 19, "k_d1987f01460297c1_s2": 16}
    assert ks["k_d1987f01460297c1_s1"]["shared"] == 32 and ks["k_d1987f01460297c1_s1"]["barriers"] == 1
    assert ks["k_d1987f01460297c1_s2"]["shared"] == 0 and ks["k_d1987f01460297c1_s2"]["spill_stores"] == 0
    (k,) = parse_ptxas_verbose(PTXAS_OLD_WITH_CALL).values()
    assert (k["registers"], k["shared"], k["barriers"]) == (255, 1024, 0)
    assert (k["stack"], k["spill_stores"], k["spill_loads"]) == (16, 4, 12)
    assert parse_ptxas_verbose("") == {}


# (target, threads, shared bytes, registers per thread) -> occupancy, computed by hand:
# warps = threads / 32; blocks = min(64 / warps, 32, smem_per_sm // round128(shared + 1024),
# 4 * (16384 // round256(regs * 32)) // warps); occupancy = blocks * warps / 64
OCCUPANCY = [
    (SM80, 256, 0, 32, 1.0),  # 8 warps: 8 blocks by warps; regs 1024/warp -> 16 per partition
    (SM80, 256, 0, 64, 0.5),  # 2048 regs/warp -> 8 warps per partition -> 32 warps -> 4 blocks
    (SM80, 64, 0, 72, 0.4375),  # 2304 regs/warp -> 7 per partition -> 28 warps -> 14 blocks of 2
    (SM80, 128, 49152, 40, 0.1875),  # 50176 B per block: 167936 // 50176 = 3 blocks of 4 warps
    (SM90, 128, 49152, 40, 0.25),  # 233472 // 50176 = 4 blocks
    (SM90, 32, 0, 16, 0.5),  # one warp per block, 32 blocks at most
    (SM90, 1024, 0, 255, 0.0),  # 8192 regs/warp x 32 warps > the block's 65536: cannot launch
    (SM90, 1024, 0, 64, 0.5),  # 64 x 1024 = 65536 registers: one block of 32 warps
    (SM80, 256, 0, None, 1.0),  # registers unknown: threads and shared memory only
]


@pytest.mark.parametrize("target, threads, shared, regs, want", OCCUPANCY)
def test_occupancy_matches_the_hand_computed_value(target, threads, shared, regs, want):
    assert occupancy(target, threads, shared, regs) == pytest.approx(want)


def _sgemm(tile: int):
    a, w = te.placeholder((128, 64), name="A"), te.placeholder((128, 64), name="W")
    cdef = te.make_def([a, w], nn.dense(a, w), "dense")
    cfg = Config("cuda_dense", (("threads_x", 16), ("threads_y", 4), ("tile_m", tile), ("tile_n", tile),
                                ("unroll_k", 1), ("shared_k", 0)))
    return cdef, cfg


@needs_ptxas
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90"])
def test_a_bigger_register_tile_reports_more_registers(target):
    regs = {}
    for tile in (1, 8):
        cdef, cfg = _sgemm(tile)
        code = emit_kernel(cdef, cfg, target)
        (r,) = ptxas_registers(code)
        f = code_features(code, cfg)
        assert f[GPU0 + 7] == 1.0 and f[GPU0 + 8] == pytest.approx(F._lg(r))
        regs[tile] = r
    assert regs[8] > regs[1] + 32, regs  # an 8x8 tile of accumulators lives in registers


@needs_ptxas
def test_ptxas_runs_once_per_ptx(monkeypatch):
    cdef, cfg = _sgemm(2)
    code = emit_kernel(cdef, cfg, SM80)
    calls = []
    real = ptx_mod.subprocess.run

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(ptx_mod.subprocess, "run", counting)
    ptx_mod._REPORTS.clear()
    first = run_ptxas(code.code.ptx, "sm_80")
    code_features(code, cfg)  # the builder's features after the featurizer's: no second assembly
    assert run_ptxas(code.code.ptx, "sm_80") is first and len(calls) == 1
    run_ptxas(code.code.ptx, "sm_90")  # another arch is another assembly
    assert len(calls) == 2


def test_the_vector_has_one_length_with_or_without_ptxas(monkeypatch):
    cdef, cfg = _sgemm(4)
    code = emit_kernel(cdef, cfg, SM80)
    with_ptxas = code_features(code, cfg)
    monkeypatch.setattr(F, "ptxas_path", lambda: None)
    without = code_features(code, cfg)
    assert len(with_ptxas) == len(without) == LENGTH
    assert without[GPU0 + 7: GPU0 + 11] == (0.0, 0.0, 0.0, 0.0)  # registers unknown: the fixed value
    assert without[:GPU0 + 7] == with_ptxas[:GPU0 + 7]  # the rest does not depend on ptxas
    if ptxas_path() is not None:
        assert with_ptxas[GPU0 + 7] == 1.0 and 0 < with_ptxas[GPU0 + 10] <= 1.0
    # a CPU kernel: the GPU block is zeros, the length the same
    cpu = emit_kernel(cdef, None, "llvm")
    assert len(code_features(cpu)) == LENGTH and code_features(cpu)[GPU0:GPU0 + GPU] == (0.0,) * GPU


@needs_ptxas
def test_featurized_cuda_candidates_carry_registers_like_built_ones():
    """The featurizer compiles a cuda config to PTX, so the unmeasured candidates the model ranks
    have registers known, as the measured ones it learnt from do."""
    cdef, cfg = _sgemm(4)
    task = kernel_task(cdef, SM90, template="cuda_dense")
    f = lower_features(task, cfg)
    assert f is not None and f == code_features(emit_kernel(cdef, cfg, SM90), cfg)
    assert f[GPU0 + 7] == 1.0
