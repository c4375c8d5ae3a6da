"""The NVIDIA GPU backend: GPU-scheduled loop IR -> NVPTX LLVM IR (`emit.py`) -> PTX (`ptx.py`,
in `emit`, so a builder process does the compiling) -> a CUDA module loaded through the driver
(`runtime.py`, in `load`; CudaDriverError "no CUDA driver found" without one)."""

from __future__ import annotations

from dataclasses import dataclass

from autorelay.codegen.base import BackendCode
from autorelay.codegen.nvptx.device import resolve_cuda
from autorelay.codegen.nvptx.emit import emit_nvptx_module
from autorelay.codegen.nvptx.launch import Launch
from autorelay.codegen.nvptx.ptx import compile_ptx
from autorelay.codegen.nvptx.runtime import GPUModule, load_module
from autorelay.target import Target, TargetSpec
from autorelay.tir.nodes import PrimFunc


@dataclass(frozen=True)
class PTXCode(BackendCode):
    """`text` is the NVPTX LLVM IR; `ptx` what the driver loads; one launch per segment."""

    ptx: str = ""
    launches: tuple[Launch, ...] = ()


class NVPTXBackend:
    kind = "cuda"

    def emit(self, func: PrimFunc, target: Target, symbol: str) -> PTXCode:
        text, info = emit_nvptx_module(func, target, symbol)
        names = [n for n, _ in info]
        ptx = compile_ptx(text, target.arch, names)
        return PTXCode(text, tuple((n, 0) for n in names), ptx, tuple(launch for _, launch in info))

    def load(self, code: BackendCode, nbuffers: int, target: Target, key: str,
             cache_dir: str | None) -> GPUModule:
        assert isinstance(code, PTXCode)
        return load_module(code.ptx, [n for n, _ in code.segments], list(code.launches), key)

    def resolve(self, spec: TargetSpec, threads: int) -> Target:
        return resolve_cuda(spec)


NVPTX_BACKEND = NVPTXBackend()
