"""conv2d as an implicit GEMM on the GPU (`ImplicitGemm` + `cuda_conv2d_igemm`), checked without a
GPU: the emulation (threads in both orders) against NumPy, ptxas for sm_80 and sm_90, and the
refusals a tuner prunes by."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gpu_cases import CONV_CASES, conv_ref, inputs, random_codes, without_barriers
from test_gpu_emulate import _check, _conv2d_transpose

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.emulate import run_both_orders
from autorelay.codegen.nvptx.ptx import ptxas_path, run_ptxas
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config
from autorelay.schedule.templates import check_in_space, template_choices, template_for
from autorelay.schedule.templates.cuda_igemm import shared_bytes
from autorelay.te import nn, nn_depthwise
from autorelay.te import tensor as te
from autorelay.tir.nodes import Allocate, Barrier, walk_stmts
from search.task import kernel_task

SM90 = resolve_target("cuda -arch=sm_90")
SM80 = resolve_target("cuda -arch=sm_80")
IGEMM = "cuda_conv2d_igemm"


def _conv(n, c, h, w, k, ks, stride, pad, dilation=1):
    """A plain conv2d_nchw; the reference dilates the weight with zeros (a dilated window)."""

    def build():
        x, wt = te.placeholder((n, c, h, w), name="X"), te.placeholder((k, c, ks, ks), name="W")
        cdef = te.make_def([x, wt], nn.conv2d_nchw(x, wt, stride, pad, dilation))

        def ref(x, wt):
            big = np.zeros((k, c, (ks - 1) * dilation + 1, (ks - 1) * dilation + 1), wt.dtype)
            big[:, :, ::dilation, ::dilation] = wt
            return conv_ref(x, big, stride, pad)

        return cdef, ref

    return build


CASES = {
    "3x3_s1_p1": CONV_CASES["conv3x3_s1_odd"],
    "3x3_s2_batch2": CONV_CASES["conv3x3_s2_batch2"],
    "1x1_s2": CONV_CASES["conv1x1_s2"],
    "7x7_s2_p3_3ch": CONV_CASES["conv7x7_s2_stem"],  # K = 147: ragged against every K-chunk
    "ragged_batch3": _conv(3, 5, 9, 11, 13, 3, 1, 1),  # M 13, N 297, K 45: no tile divides
    "dilated_3x3": _conv(2, 4, 10, 9, 6, 3, 1, 2, 2),
    "one_pixel": _conv(1, 4, 3, 3, 5, 3, 1, 0),  # N = 1: a block one thread wide
    "bias_relu": CONV_CASES["conv_bias_relu"],
    "bias_residual_relu": CONV_CASES["conv_bias_residual_relu"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_igemm_matches_numpy_in_both_thread_orders(case):
    cdef, ref = CASES[case]()
    tmpl = template_for(cdef, IGEMM)
    assert tmpl.claims(cdef)
    code = emit_kernel(cdef, tmpl.default(cdef, SM90), SM90)
    _check(code, cdef, ref)


@pytest.mark.parametrize("case", sorted(CASES))
def test_random_igemm_configs_match_numpy(case):
    cdef, ref = CASES[case]()
    for _cfg, code in random_codes(cdef, SM90, 2, sorted(CASES).index(case), IGEMM):
        _check(code, cdef, ref)


def test_both_operand_tiles_are_shared_and_barriers_guard_them():
    """Weight tile and im2col tile are shared buffers of the block (no global im2col workspace);
    without the two barriers the reversed thread order reads tiles not yet copied, and fails."""
    cdef, ref = CASES["ragged_batch3"]()
    code = emit_kernel(cdef, Config(IGEMM, (("threads_x", 16), ("threads_y", 4), ("tile_m", 2),
                                            ("tile_n", 2), ("shared_k", 16), ("unroll_k", 4))), SM90)
    shared = {s.buffer.name for s in walk_stmts(code.func.body)
              if isinstance(s, Allocate) and s.buffer.scope == "shared"}
    assert shared == {"conv2d_wt", "conv2d_col"}
    assert not code.func.workspaces
    assert sum(isinstance(s, Barrier) for s in walk_stmts(code.func.body)) == 2
    _check(code, cdef, ref)
    racy = dataclasses.replace(code, func=code.func.with_body(without_barriers(code.func.body)))
    xs = inputs(cdef)
    got = run_both_orders(racy, *xs)
    assert not np.allclose(got[1], ref(*xs), rtol=1e-4, atol=1e-4)


def test_conv2d_on_cuda_offers_both_forms_and_keeps_the_direct_default():
    for case in ("3x3_s1_p1", "bias_residual_relu"):
        cdef, _ = CASES[case]()
        assert template_for(cdef, target=SM90).name == "cuda_conv2d"
        assert template_choices(cdef, SM90) == ["cuda_conv2d", IGEMM]


def test_shared_tiles_beyond_the_target_are_refused():
    """A 1x256 block tile with a 64-deep K-chunk needs 65 KB of shared tiles: over the 48 KB a
    block may have statically, refused where the steps are made (a tuner prunes it)."""
    cdef, _ = _conv(1, 8, 16, 16, 16, 3, 1, 1)()
    cfg = Config(IGEMM, (("threads_x", 32), ("threads_y", 1), ("tile_m", 1), ("tile_n", 8),
                         ("shared_k", 64), ("unroll_k", 1)))
    assert shared_bytes(cfg, 4) > SM90.max_shared_memory_per_block
    with pytest.raises(ScheduleError, match="shared tiles exceed"):
        template_for(cdef, IGEMM).steps(cdef, cfg, SM90)
    with pytest.raises(ScheduleError, match="shared tiles exceed"):
        emit_kernel(cdef, cfg, SM80)
    small = dataclasses.replace(cfg, values=tuple((k, 16 if k == "shared_k" else v) for k, v in cfg.values))
    emit_kernel(cdef, small, SM90)  # a 16-deep chunk fits


def test_a_block_larger_than_the_gemm_is_refused():
    cdef, _ = CASES["1x1_s2"]()  # M = 12
    cfg = Config(IGEMM, (("threads_x", 8), ("threads_y", 16), ("tile_m", 1), ("tile_n", 1),
                         ("shared_k", 8), ("unroll_k", 1)))
    with pytest.raises(ScheduleError, match="exceeds the 12x"):
        emit_kernel(cdef, cfg, SM90)


@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90"])
def test_defaults_for_resnet_layers_are_legal_and_fill_the_gpu(target):
    """From the target's limits: 64..256 threads, shared tiles within a quarter of the block's
    shared memory, enough blocks for every multiprocessor; register tiles grow with the work
    (a batch-32 layer gets 16+ accumulators, a 50k-output one spreads over the GPU instead)."""
    tmpl = template_for(CASES["3x3_s1_p1"]()[0], IGEMM)
    for n, c, hw, k, ks, st, p in ((1, 64, 56, 64, 3, 1, 1), (1, 128, 28, 256, 3, 2, 1),
                                   (8, 512, 7, 512, 3, 1, 1), (1, 3, 224, 64, 7, 2, 3),
                                   (32, 64, 56, 64, 3, 1, 1)):
        x, w = te.placeholder((n, c, hw, hw), name="X"), te.placeholder((k, c, ks, ks), name="W")
        cdef = te.make_def([x, w], nn.conv2d_nchw(x, w, st, p))
        cfg = tmpl.default(cdef, target)
        tmpl.steps(cdef, cfg, target)  # legal
        d = cfg.as_dict()
        assert 64 <= d["threads_x"] * d["threads_y"] <= 256, cfg
        assert shared_bytes(cfg, 4) <= target.max_shared_memory_per_block // 4
        oh = (hw + 2 * p - ks) // st + 1
        blocks = -(-k // (d["threads_y"] * d["tile_m"])) * -(-n * oh * oh // (d["threads_x"] * d["tile_n"]))
        assert blocks >= target.multiprocessors, (cfg, blocks)
        if n == 32:
            assert d["tile_m"] * d["tile_n"] >= 16, cfg


def test_implicit_gemm_step_legality():
    cdef, _ = CASES["bias_relu"]()
    with pytest.raises(ScheduleError, match="must come before"):
        emit_kernel(cdef, [S.Split("conv2d", "f", 2), S.ImplicitGemm("conv2d")], SM90)
    with pytest.raises(ScheduleError, match="only a sum reduction"):
        emit_kernel(cdef, [S.ImplicitGemm("out")], SM90)
    with pytest.raises(ScheduleError, match="must be computed at a loop"):  # shared tiles need ComputeAt
        emit_kernel(cdef, [S.ImplicitGemm("conv2d")], SM90)
    a, w = te.placeholder((8, 9), name="A"), te.placeholder((4, 9), name="B")
    with pytest.raises(ScheduleError, match="4 spatial axes"):
        emit_kernel(te.make_def([a, w], nn.dense(a, w, name="C")), [S.ImplicitGemm("C")], SM90)
    assert S.from_json(S.to_json(S.ImplicitGemm("conv2d"))) == S.ImplicitGemm("conv2d")


needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas not found: pip install nvidia-cuda-nvcc-cu12 (the dev extra)")


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ["7x7_s2_p3_3ch", "bias_residual_relu"])
def test_igemm_ptx_assembles_without_spills(case, arch):
    cdef, _ = CASES[case]()
    target = resolve_target(f"cuda -arch={arch}")
    codes = [(None, emit_kernel(cdef, template_for(cdef, IGEMM).default(cdef, target), target)),
             *random_codes(cdef, target, 2, 5, IGEMM)]
    for cfg, code in codes:
        assert ".shared" in code.code.ptx and "bar.sync" in code.code.ptx
        (_name, k), = run_ptxas(code.code.ptx, arch).kernels.items()
        assert 0 < k["registers"] <= 255 and k["spill_stores"] == 0 and k["spill_loads"] == 0, (cfg, k)
        block = code.code.launches[0].block
        assert k["registers"] * block[0] * block[1] * block[2] <= target.registers_per_block, (cfg, k)


def test_a_tuning_task_and_the_build_take_the_implicit_gemm_by_template():
    """A kernel task tunes the implicit GEMM when it names the template; a logged config of it is
    a point of its own space, which is what the build checks before compiling it."""
    cdef, _ = CASES["bias_relu"]()
    task = kernel_task(cdef, SM90, template=IGEMM)
    assert task.template == IGEMM and task.space.template == IGEMM and len(task.space) > 1
    assert task.default == template_for(cdef, IGEMM).default(cdef, SM90)
    cfg = task.space.get(len(task.space) // 3)
    check_in_space(cdef, cfg, SM90)
    assert Config.from_json(cfg.to_json()) == cfg


def test_transposed_and_depthwise_convolutions_are_no_implicit_gemm():
    """A transposed convolution shares the tag, but its IOHW weight read at phase-dependent taps is
    no [OC, K] matrix: the template does not claim it and the step refuses it."""
    cdef, _ = _conv2d_transpose(1)
    assert template_choices(cdef, SM90) == ["cuda_conv2d"]
    assert not template_for(cdef, IGEMM).claims(cdef)
    with pytest.raises(ScheduleError, match="transposed"):
        emit_kernel(cdef, [S.ImplicitGemm(cdef.output.name)], SM90)
    x, w = te.placeholder((1, 4, 8, 8), name="X"), te.placeholder((4, 1, 3, 3), name="W")
    depthwise = te.make_def([x, w], nn_depthwise.depthwise_conv2d_nchw(x, w, 1, 1))
    assert not template_for(cdef, IGEMM).claims(depthwise)
