"""CPU code generation with LLVM (llvmlite): loop IR -> LLVM IR -> JIT-compiled segment functions."""

from autorelay.codegen.llvm.emit import emit_module
from autorelay.codegen.llvm.host import host_target
from autorelay.codegen.llvm.jit import CompiledModule, clear_memory_cache, compile_ir

__all__ = ["CompiledModule", "clear_memory_cache", "compile_ir", "emit_module", "host_target"]
