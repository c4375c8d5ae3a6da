"""The CPU backend: loop IR -> LLVM IR (`emit.emit_module`) -> JIT-compiled segments
(`jit.compile_ir`, with the in-memory and on-disk kernel caches)."""

from __future__ import annotations

from autorelay.codegen.base import BackendCode
from autorelay.codegen.llvm.emit import emit_module
from autorelay.codegen.llvm.host import resolve_cpu
from autorelay.codegen.llvm.jit import CompiledModule, compile_ir
from autorelay.target import Target, TargetSpec
from autorelay.tir.nodes import PrimFunc


class LLVMBackend:
    kind = "cpu"

    def emit(self, func: PrimFunc, target: Target, symbol: str) -> BackendCode:
        text, segments = emit_module(func, target, symbol)
        return BackendCode(text, tuple(segments))

    def load(self, code: BackendCode, nbuffers: int, target: Target, key: str,
             cache_dir: str | None) -> CompiledModule:
        return compile_ir(code.text, list(code.segments), nbuffers, target, key, cache_dir)

    def resolve(self, spec: TargetSpec, threads: int) -> Target:
        return resolve_cpu(spec, threads)


CPU_BACKEND = LLVMBackend()
