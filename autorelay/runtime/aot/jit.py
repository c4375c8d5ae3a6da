"""JIT-compile one generated LLVM module and return a ctypes callable for one of its functions."""

from __future__ import annotations

import ctypes
from typing import Any

import llvmlite.binding as llvm

from autorelay.codegen.llvm.host import init_llvm, new_machine, target_machine
from autorelay.target import Target


def jit_function(text: str, name: str, nargs: int, target: Target) -> tuple[Any, Any]:
    """(execution engine, callable taking `nargs` pointers); keep the engine alive with the callable."""
    init_llvm()
    mod = llvm.parse_assembly(text)
    mod.triple = target.triple or llvm.get_process_triple()
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(target_machine(target), pto)
    pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, new_machine(target))  # the engine owns its machine
    engine.finalize_object()
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))
    return engine, proto(engine.get_function_address(name))
