"""The NVIDIA GPU backend: GPU-scheduled loop IR -> NVPTX LLVM IR (`emit.py`) -> PTX (`ptx.py`,
in `emit`, so a builder process does the compiling) -> a CUDA module loaded through the driver
(`runtime.py`, in `load`; CudaDriverError "no CUDA driver found" without one).

For `cuda -device=emulated` targets `emit` also produces the CPU code of the kernel's emulation
(`emulate.py`), and `load` binds that to a `HostDevice`: the same PTX is emitted (so ptxas checks
it), but launches run on the CPU."""

from __future__ import annotations

from dataclasses import dataclass

from autorelay.codegen.base import BackendCode
from autorelay.codegen.llvm.backend import CPU_BACKEND
from autorelay.codegen.llvm.host import host_target
from autorelay.codegen.nvptx.device import resolve_cuda
from autorelay.codegen.nvptx.driver import Driver, open_driver
from autorelay.codegen.nvptx.emit import emit_nvptx_module
from autorelay.codegen.nvptx.host_device import HostDevice
from autorelay.codegen.nvptx.launch import Launch
from autorelay.codegen.nvptx.ptx import compile_ptx
from autorelay.codegen.nvptx.runtime import GPUModule, load_module
from autorelay.target import Target, TargetSpec
from autorelay.tir.nodes import PrimFunc


@dataclass(frozen=True)
class PTXCode(BackendCode):
    """`text` is the NVPTX LLVM IR; `ptx` what the driver loads; one launch per segment;
    `emulation` the CPU code of the emulated kernel (emulated targets only)."""

    ptx: str = ""
    launches: tuple[Launch, ...] = ()
    emulation: BackendCode | None = None


def _emulation_target() -> Target:
    return host_target().with_threads(1)


class NVPTXBackend:
    kind = "cuda"

    def emit(self, func: PrimFunc, target: Target, symbol: str) -> PTXCode:
        text, info = emit_nvptx_module(func, target, symbol)
        names = [n for n, _ in info]
        ptx = compile_ptx(text, target.arch, names)
        emulation = None
        if target.emulated:
            from autorelay.codegen.nvptx.emulate import emulate_func  # it loads kernels: imported late

            emulation = CPU_BACKEND.emit(emulate_func(func), _emulation_target(), f"{symbol}_emu")
        launches = tuple(launch for _, launch in info)
        return PTXCode(text, tuple((n, 0) for n in names), ptx, launches, emulation)

    def load(self, code: BackendCode, nbuffers: int, target: Target, key: str,
             cache_dir: str | None) -> GPUModule:
        assert isinstance(code, PTXCode)
        if target.emulated:
            assert code.emulation is not None, "emulated targets emit the kernel's emulation"
            cpu = CPU_BACKEND.load(code.emulation, nbuffers, _emulation_target(), f"{key}|emulated",
                                   cache_dir)
            # the grid is loops inside each emulated segment: its launch is one "thread"
            one = Launch((1, 1, 1), (1, 1, 1))
            return GPUModule(key, HostDevice(), [(fn, one) for fn in cpu.functions], code.ptx)
        return load_module(code.ptx, [n for n, _ in code.segments], list(code.launches), key)

    def resolve(self, spec: TargetSpec, threads: int) -> Target:
        return resolve_cuda(spec)


NVPTX_BACKEND = NVPTXBackend()


def open_device(target: Target) -> Driver | HostDevice:
    """The device a cuda target's executables allocate on: the GPU's driver (CudaDriverError "no
    CUDA driver found" without one), or host memory for `-device=emulated`."""
    return HostDevice() if target.emulated else open_driver()
