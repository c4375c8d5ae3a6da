"""Kernels through the CUDA driver: run on a GPU where one exists, skip with the reason here."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gpu_cases import CASES, driver_reason, inputs

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.driver import NO_DRIVER, CudaDriverError, _load_library, open_driver
from autorelay.kernel import compile_kernel, emit_kernel, load_kernel

REASON = driver_reason()


def test_missing_driver_is_one_clear_error():
    try:
        _load_library()
    except CudaDriverError as e:
        assert str(e).startswith(NO_DRIVER)
        with pytest.raises(CudaDriverError, match=NO_DRIVER):
            open_driver()
    else:
        pytest.skip("libcuda is present on this machine")


@pytest.mark.cuda
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_kernel_matches_numpy_on_the_device(case):
    cdef, ref = CASES[case]()
    kernel = compile_kernel(cdef, None, resolve_target("cuda"))
    xs = inputs(cdef)
    np.testing.assert_allclose(kernel.run(*xs), ref(*xs), rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_gpu_kernel_launches_are_timed_with_events():
    cdef, ref = CASES["sgemm"]()
    code = emit_kernel(cdef, None, resolve_target("cuda"))
    module = load_kernel(code).module
    xs = inputs(cdef)
    out = np.zeros(code.func.params[-1].shape, np.float32)
    ms = module.run([*xs, out], repeat=5)
    np.testing.assert_allclose(out, ref(*xs), rtol=1e-4, atol=1e-4)
    assert ms is not None and ms > 0


class _EmulatingDriver:
    """The driver's interface with device memory in host arrays; a launch runs the segment's CPU
    emulation on it — so the host side of the GPU runtime is checked without a GPU."""

    def __init__(self, code):
        from autorelay.codegen.nvptx.emulate import emulate_func

        self.code, self.emulate, self.mem, self.launches = code, emulate_func, {}, []

    def load_module(self, ptx):
        assert ".entry" in ptx
        return "module"

    def function(self, module, name):
        return [n for n, _ in self.code.code.segments].index(name)

    def alloc(self, nbytes):
        self.mem[len(self.mem) + 1] = np.zeros(nbytes, np.uint8)
        return len(self.mem)

    def free(self, ptr):
        self.mem[ptr] = None

    def to_device(self, ptr, addr, nbytes):
        ctypes.memmove(self.mem[ptr].ctypes.data, addr, nbytes)

    def to_host(self, addr, ptr, nbytes):
        ctypes.memmove(addr, self.mem[ptr].ctypes.data, nbytes)

    def synchronize(self):
        pass

    def bind_launch(self, fn, launch, pointers):
        return lambda: self.launch(fn, launch.grid, launch.block, list(pointers))

    def launch(self, fn, grid, block, pointers, shared=0):
        from autorelay.codegen.llvm.backend import CPU_BACKEND
        from autorelay.codegen.llvm.host import host_target
        from autorelay.codegen.nvptx.launch import launch_of
        from autorelay.tir.nodes import Seq

        f = self.code.func
        seg = (f.body.stmts if isinstance(f.body, Seq) else (f.body,))[fn]
        assert (grid, block) == (launch_of(seg).grid, launch_of(seg).block)
        self.launches.append(fn)
        emu = self.emulate(f.with_body(seg))
        cpu = host_target().with_threads(1)
        mod = CPU_BACKEND.load(CPU_BACKEND.emit(emu, cpu, f"fake{fn}"), len(pointers), cpu,
                               f"fake|{self.code.key}|{fn}", None)
        for cfn, par in mod.functions:
            cfn(*[self.mem[p].ctypes.data for p in pointers], 0, par)


@pytest.mark.parametrize("case", ["softmax", "sgemm"])
def test_kernel_run_through_the_gpu_runtime_with_an_emulating_driver(case):
    from autorelay.codegen.nvptx.runtime import load_module
    from autorelay.kernel import Kernel

    cdef, ref = CASES[case]()
    code = emit_kernel(cdef, None, resolve_target("cuda -arch=sm_90"))
    drv = _EmulatingDriver(code)
    module = load_module(code.code.ptx, [n for n, _ in code.code.segments], list(code.code.launches),
                         code.key, drv)
    xs = inputs(cdef)
    np.testing.assert_allclose(Kernel(code, module, code.target).run(*xs), ref(*xs), rtol=1e-4, atol=1e-5)
    assert drv.launches == list(range(len(code.code.segments)))
