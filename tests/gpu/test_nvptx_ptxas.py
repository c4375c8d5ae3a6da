"""NVPTX code generation checked without a GPU: the PTX of every GPU template (default and random
configs) assembles with ptxas for sm_80 and sm_90, without spills."""

from __future__ import annotations

import pytest
from gpu_cases import CASES, random_codes

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.ptx import ptxas_path, run_ptxas
from autorelay.kernel import emit_kernel
from autorelay.schedule.templates import template_for

needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas not found: pip install nvidia-cuda-nvcc-cu12 (the dev extra)")


def _codes(cdef, target, n_random: int):
    """The default kernel and `n_random` random legal ones (illegal points are pruned)."""
    yield None, emit_kernel(cdef, None, target)
    yield from random_codes(cdef, target, n_random, 3)


def test_kernels_are_ptx_entries_reading_special_registers_and_libdevice_math():
    cdef, _ = CASES["elemwise_math"]()
    code = emit_kernel(cdef, None, resolve_target("cuda -arch=sm_90"))
    ptx = code.code.ptx
    assert ".target sm_90" in ptx and f".entry {code.code.segments[0][0]}(" in ptx
    assert "%ctaid.x" in ptx and "%tid.x" in ptx and "ld.global" in ptx and "st.global" in ptx
    assert "define ptx_kernel void" in code.code.text and "@__nv_expf" in code.code.text
    assert "call.uni" not in ptx and "__nv_expf" not in ptx  # libdevice was linked in and inlined
    launch = code.code.launches[0]
    assert launch.block == (256, 1, 1) and launch.grid == (-(-300 * 37 // 256), 1, 1)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_templates_assemble_with_ptxas(case, arch):
    cdef, _ = CASES[case]()
    target = resolve_target(f"cuda -arch={arch}")
    for cfg, code in _codes(cdef, target, 2):
        report = run_ptxas(code.code.ptx, arch)
        assert set(report.kernels) == {n for n, _ in code.code.segments}
        for name, k in report.kernels.items():
            assert 0 < k["registers"] <= 255, (cfg, name, k)
            assert k["spill_stores"] == 0 and k["spill_loads"] == 0, (cfg, name, k)


@needs_ptxas
@pytest.mark.parametrize("case", ["conv3x3_s1_odd", "conv7x7_s2_stem", "conv_bias_residual_relu"])
def test_cuda_conv2d_blocks_fit_the_register_file(case):
    """ptxas is not told the block size, so a config must leave registers x threads within the
    block's register file, or the launch fails: the template refuses configs that might not."""
    cdef, _ = CASES[case]()
    target = resolve_target("cuda -arch=sm_90")
    assert template_for(cdef, target=target).name == "cuda_conv2d"
    for cfg, code in _codes(cdef, target, 6):
        (_name, k), = run_ptxas(code.code.ptx, "sm_90").kernels.items()
        block = code.code.launches[0].block
        assert k["registers"] * block[0] * block[1] * block[2] <= target.registers_per_block, (cfg, k)
