"""Evicting arrays from the CPU caches, so a kernel can be timed as a model runs it.

In a model, a kernel's weights were last read one inference earlier; every other layer's weights
and activations have passed through the caches since, so they arrive from memory. A tuner that
calls a candidate back to back finds them cached instead and ranks configs by a situation the
model never sees. On ResNet-18's 7x7 layers (AVX-512 host, 9.4 MB of weights per layer, effective
last-level cache well below that per core) the two disagree: back to back, a tile of 2 rows x 7
pixels x 2 channel blocks ran 1.14x faster than 1 row x 7 pixels x 4 blocks; in the model it ran
1.2x slower, and timed with the weights evicted before each call it ran 1.13x slower, the model's
order. (TVM's measurement offers the same remedy as its CPU cache flush.)

`evict(arrays)` writes back and invalidates every cache line of each array (x86: `clflushopt`
where the CPU has it, then a fence; `clflush` elsewhere, which serialises: 5.7 ms against 0.43 ms
for 9.4 MB on the AVX-512 host, which would dominate a tuning run); on other machines it does
nothing and `available()` says so.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import llvmlite.binding as llvm
import numpy as np

from autorelay.codegen.llvm.host import host_target, init_llvm, new_machine

_IR = """
declare void @{flush}(ptr)
declare void @llvm.x86.sse.sfence()

define void @evict(ptr %p, i64 %n) {{
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %q = getelementptr i8, ptr %p, i64 %i
  call void @{flush}(ptr %q)
  %next = add i64 %i, 64
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  call void @llvm.x86.sse.sfence()
  ret void
}}
"""


@functools.cache
def available() -> bool:
    """Whether this machine can evict cache lines (x86)."""
    init_llvm()
    return llvm.get_process_triple().startswith(("x86_64", "i686"))


@functools.cache
def _compiled() -> tuple[llvm.ExecutionEngine, ctypes._CFuncPtr]:
    """The evict function, JIT-compiled once per process for the host CPU (the engine is kept
    with it: the function's code lives as long as its engine)."""
    host = host_target()
    flush = "llvm.x86.clflushopt" if host.has("clflushopt") else "llvm.x86.sse2.clflush"
    mod = llvm.parse_assembly(_IR.format(flush=flush))
    mod.triple = host.triple
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, new_machine(host))
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("evict"))
    return engine, fn


def evict(arrays: Sequence[np.ndarray]) -> None:
    """Flush every cache line of each (contiguous) array out of all cache levels."""
    if not arrays or not available():
        return
    fn = _compiled()[1]
    for a in arrays:
        fn(a.ctypes.data, a.nbytes)
