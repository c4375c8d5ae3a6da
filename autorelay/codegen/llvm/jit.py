"""JIT compilation of LLVM IR with a kernel cache keyed by the loop IR's structural hash.

In memory: hash -> compiled module (so a kernel is compiled once per process; `autorelay.kernel`
keeps its emitted LLVM IR under the same hash, so it is emitted once too). On disk (optional,
`cache_dir`): hash -> object file, served to MCJIT through its object cache so a warm cache skips
both the O3 pipeline and instruction selection.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm

from autorelay.codegen.llvm.host import init_llvm, new_machine, target_machine
from autorelay.codegen.llvm.parallel import job_name
from autorelay.target import Target
from autorelay.utils.files import write_cache_file


@dataclass(eq=False)
class CompiledModule:
    key: str
    engine: llvm.ExecutionEngine
    functions: list[tuple[ctypes._CFuncPtr, int]]  # (callable, parallel extent or 0)
    llvm_ir: str
    jobs: list[int] = field(default_factory=list)  # per segment, its job thunk's address
    from_disk: bool = False
    stats: dict = field(default_factory=dict)
    object_code: bytes | None = None  # what MCJIT loaded: a saved executable stores it, not a recompile


_MEMORY: dict[str, CompiledModule] = {}
_LOCK = threading.Lock()


def _optimize(mod: llvm.ModuleRef, target: Target) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(target_machine(target), pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)


def compile_ir(
    text: str,
    segments: list[tuple[str, int]],
    nbuffers: int,
    target: Target,
    key: str,
    cache_dir: str | None = None,
) -> CompiledModule:
    """Compile (or fetch from cache) a module whose segment functions take `nbuffers` pointers.
    `cache_dir`: a folder of compiled objects, read before compiling; a module compiled (or
    found in memory) without its object there is filed in it."""
    # on disk the name also digests the LLVM IR and llvmlite's version, so a changed code generator
    # or LLVM never serves a stale object for an unchanged loop IR
    obj_path = None
    if cache_dir:
        digest = hashlib.sha256(f"{llvmlite.__version__}|{text}".encode()).hexdigest()[:16]
        obj_path = os.path.join(cache_dir, f"{key}-{digest}.o")
    with _LOCK:
        hit = _MEMORY.get(key)
    if hit is not None:
        if obj_path is not None and hit.object_code is not None and not os.path.exists(obj_path):
            write_cache_file(obj_path, hit.object_code)
        return hit
    init_llvm()
    mod = llvm.parse_assembly(text)
    mod.triple = target.triple or llvm.get_process_triple()
    mod.verify()
    from_disk = obj_path is not None and os.path.exists(obj_path)
    if not from_disk:
        _optimize(mod, target)
    engine = llvm.create_mcjit_compiler(mod, new_machine(target))
    loaded: list[bytes] = []

    def notify(_mod: object, data: bytes) -> None:
        loaded.append(data)
        if obj_path is not None:
            write_cache_file(obj_path, data)

    def getbuffer(_mod: object) -> bytes | None:
        if obj_path is not None and os.path.exists(obj_path):
            with open(obj_path, "rb") as fh:
                loaded.append(fh.read())
            return loaded[-1]
        return None

    engine.set_object_cache(notify, getbuffer)
    engine.finalize_object()
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nbuffers), ctypes.c_int64, ctypes.c_int64)
    fns = [(proto(engine.get_function_address(name)), par) for name, par in segments]
    jobs = [engine.get_function_address(job_name(name)) for name, _ in segments]
    cm = CompiledModule(key, engine, fns, text, jobs, from_disk, object_code=loaded[-1] if loaded else None)
    with _LOCK:
        _MEMORY.setdefault(key, cm)
        return _MEMORY[key]


def clear_memory_cache() -> None:
    with _LOCK:
        _MEMORY.clear()


def assembly(text: str, target: Target) -> str:
    """Optimised assembly of a module, for inspection and tests."""
    init_llvm()
    mod = llvm.parse_assembly(text)
    _optimize(mod, target)
    return target_machine(target).emit_assembly(mod)
