"""The one way to compile a kernel, and the kernel the CPU runtime calls.

`compile_kernel(compute, config, target)` = `load_kernel(emit_kernel(compute, config, target))`:

* `emit_kernel` (pure) expands the config into schedule steps (None: the template's heuristic
  default), applies them to the compute (loop IR) and has the target's backend emit its code — a
  `KernelCode`, plain data that pickles (the tuner's builder process hands it to a runner);
* `load_kernel` has the backend load that code (through the kernel cache, in memory and optionally
  on disk) and returns a runnable `Kernel`.

The graph executor, the VM, AoT, the measurement workers, tests and benchmarks all compile here.
`Kernel.run(*arrays)` is the convenient call; `Kernel.bind(*arrays)` re-lays-out the inputs once
(packing constant weights), allocates the outputs and workspaces, precomputes the buffer addresses
and returns a `BoundKernel` whose `__call__` costs one ctypes call per segment.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.codegen import backend_for, resolve_target
from autorelay.codegen.base import BackendCode
from autorelay.codegen.llvm.cache_evict import evict
from autorelay.codegen.llvm.host import require_host_supports
from autorelay.codegen.llvm.jit import CompiledModule
from autorelay.codegen.llvm.threads import Record, chunk_size, pack_records, pointer_array, run_program
from autorelay.kernel_store import has_code, load_code, save_code
from autorelay.schedule.apply import apply
from autorelay.schedule.relayout import relayout
from autorelay.schedule.space import Config
from autorelay.schedule.steps import Step
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor, make_def, topo_order
from autorelay.tir.nodes import PrimFunc
from autorelay.tir.printer import func_str, structural_hash


@dataclass(frozen=True, eq=False)
class KernelCode:
    """What `emit_kernel` produces: the scheduled loop IR and the backend's code for it."""

    cdef: ComputeDef
    func: PrimFunc
    steps: tuple[Step, ...]
    relayouts: dict[str, list]
    code: BackendCode
    key: str  # structural hash of the loop IR and the target's code-changing part
    target: Target

    @property
    def nbuffers(self) -> int:
        return len(self.func.params) + len(self.func.workspaces)


@dataclass(eq=False)
class Kernel:
    """A loaded kernel: its code and the backend module whose entry points run it."""

    code: KernelCode
    module: CompiledModule  # or the backend's module (cuda: `GPUModule`)
    target: Target

    @property
    def cdef(self) -> ComputeDef:
        return self.code.cdef

    @property
    def func(self) -> PrimFunc:
        return self.code.func

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.code.steps

    @property
    def relayouts(self) -> dict[str, list]:
        return self.code.relayouts

    @property
    def loop_ir(self) -> str:
        return func_str(self.func)

    @property
    def llvm_ir(self) -> str:
        return self.module.llvm_ir

    def _check(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        ins = self.cdef.inputs
        if len(arrays) != len(ins):
            raise ValueError(
                f"{self.cdef.name}: expected {len(ins)} inputs ({', '.join(t.name for t in ins)}), "
                f"got {len(arrays)}"
            )
        out = []
        for t, a in zip(ins, arrays):
            a = np.asarray(a)
            if a.shape != t.shape or a.dtype != np.dtype(t.dtype):
                raise ValueError(
                    f"{self.cdef.name}: input {t.name} must be {t.dtype}{list(t.shape)}, "
                    f"got {a.dtype}{list(a.shape)}"
                )
            out.append(relayout(np.ascontiguousarray(a), self.relayouts[t.name]))
        return out

    def bind(self, *arrays: np.ndarray, outputs: Sequence[np.ndarray] | None = None) -> BoundKernel:
        if pitched := [b.name for b in self.func.params if b.pitch is not None]:
            raise ValueError(f"{self.cdef.name}: buffer {pitched[0]} is the interior of a zero-bordered "
                             "array (autorelay.te.halo); a graph executor binds it, not Kernel.bind")
        ins = self._check(arrays)
        require_host_supports(self.target, f"kernel {self.cdef.name!r}")
        n_out = len(self.cdef.outputs)
        if outputs is None:
            outs = [np.empty(b.shape, b.dtype) for b in self.func.params[len(ins) :]]
        else:
            outs = list(outputs)
            for b, o in zip(self.func.params[len(ins) :], outs):
                if o.shape != b.shape or o.dtype != np.dtype(b.dtype) or not o.flags.c_contiguous:
                    raise ValueError(
                        f"{self.cdef.name}: output {b.name} must be a contiguous {b.dtype}{list(b.shape)}"
                    )
        assert len(outs) == n_out
        ws = [np.zeros(b.shape, b.dtype) for b in self.func.workspaces]
        if self.target.kind != "cpu":  # the backend's module binds device buffers (cuda)
            return self.module.bind(ins, outs, ws)
        return BoundKernel(self, ins, outs, ws)

    def run(self, *arrays: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        bound = self.bind(*arrays)
        bound()
        return bound.outputs[0] if len(bound.outputs) == 1 else tuple(bound.outputs)


class BoundKernel:
    """A kernel with its buffers fixed: calling it runs the segments with cached addresses."""

    def __init__(self, kernel: Kernel, ins: list[np.ndarray], outs: list[np.ndarray], ws: list[np.ndarray]):
        self.kernel = kernel
        self.inputs, self.outputs, self.workspaces = ins, outs, ws
        self._keep = ins + outs + ws  # the addresses below stay valid while these live
        self.args = tuple(int(a.ctypes.data) for a in self._keep)
        self._argv = pointer_array(self.args)
        self._argv_addr = ctypes.addressof(self._argv)
        self.threads = kernel.target.threads
        # its segments as one native program, run as a model's graph executor runs them
        segments = zip(kernel.module.functions, kernel.module.jobs)
        self._records = pack_records([Record(job, self._argv_addr, par, chunk_size(par, self.threads))
                                      for (_fn, par), job in segments])
        self._program = (ctypes.addressof(self._records), len(kernel.module.jobs), self.threads)

    def __call__(self) -> None:
        run_program(*self._program)

    def time(self, number: int, cold: Sequence[np.ndarray] = ()) -> float:
        """Seconds per call over `number` back-to-back calls (wall clock; a GPU kernel's bound
        form times device launches instead). `cold`: arrays evicted from the caches before each
        call, outside the timed part (`autorelay.codegen.llvm.cache_evict`)."""
        if not cold:
            t0 = time.perf_counter()
            for _ in range(number):
                self()
            return (time.perf_counter() - t0) / number
        total = 0.0
        for _ in range(number):
            evict(cold)
            t0 = time.perf_counter()
            self()
            total += time.perf_counter() - t0
        return total / number

    def constant_inputs(self) -> list[np.ndarray]:
        """The bound buffers of the inputs that are a model's constants (weights, re-laid-out as
        the kernel reads them): what a model's inference finds out of cache."""
        return [a for a, t in zip(self.inputs, self.kernel.cdef.inputs) if t.value is not None]


def as_compute_def(compute: Any) -> ComputeDef:
    if isinstance(compute, ComputeDef):
        return compute
    if isinstance(compute, Tensor):
        ins = [t for t in topo_order([compute]) if t.is_placeholder]
        return make_def(ins, compute, compute.name)
    if isinstance(compute, tuple) and len(compute) == 2:
        return make_def(compute[0], compute[1])
    raise TypeError(
        f"compile_kernel: expected a ComputeDef, an output Tensor or (inputs, outputs), got {compute!r}"
    )


def emit_kernel(compute: Any, config: Config | Sequence[Step] | None = None,
                target: Target | str | None = None, *, cache_dir: str | None = None) -> KernelCode:
    """Schedule a compute and emit its backend code (pure; see the module docstring).

    `config`: a template Config, an explicit tuple of Steps, or None for the template's heuristic
    default. Raises ScheduleError if the schedule is illegal for this compute. `cache_dir`: a
    folder of emitted kernels (`autorelay.kernel_store`) read before emitting and written after.
    """
    cdef = as_compute_def(compute)
    target = resolve_target(target if target is not None else "llvm", None if target is not None else 1)
    if config is None:
        tmpl = template_for(cdef, target=target)
        steps = tmpl.steps(cdef, tmpl.default(cdef, target), target)
    elif isinstance(config, Config):
        tmpl = template_for(cdef, config.template)
        steps = tmpl.steps(cdef, config, target)
    else:
        steps = tuple(config)
    func, state = apply(cdef, steps)
    key = structural_hash(func, target.key())
    code = _EMITTED.get(key)
    if code is None:
        code = load_code(cache_dir, key) if cache_dir is not None else None
        if code is None:
            code = backend_for(target).emit(func, target, f"k_{key[:16]}")
            if cache_dir is not None:
                save_code(cache_dir, key, code)
        code = _EMITTED.put(key, code)
    elif cache_dir is not None and not has_code(cache_dir, key):  # emitted here before, not filed
        save_code(cache_dir, key, code)
    return KernelCode(cdef, func, tuple(steps), state.relayouts, code, key, target)


class EmitCache:
    """Backend code by kernel key, the most recently used up to `limit` characters of text.

    Emission is pure (the key hashes the loop IR and the target's code-changing part) and is most
    of a build's time once the JIT's cache holds the compiled module, so a model rebuilt in one
    process (a plan and its fusion variants, a test's second build) emits each kernel once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._codes: OrderedDict[str, BackendCode] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> BackendCode | None:
        with self._lock:
            code = self._codes.get(key)
            if code is not None:
                self._codes.move_to_end(key)
            return code

    def put(self, key: str, code: BackendCode) -> BackendCode:
        with self._lock:
            if key not in self._codes:
                self._codes[key] = code
                self._size += len(code.text)
            while self._size > self.limit and len(self._codes) > 1:
                self._size -= len(self._codes.popitem(last=False)[1].text)
        return code


_EMITTED = EmitCache(limit=64 << 20)


def load_kernel(code: KernelCode, cache_dir: str | None = None) -> Kernel:
    """Load emitted code through the target's backend (and its kernel cache)."""
    module = backend_for(code.target).load(code.code, code.nbuffers, code.target, code.key, cache_dir)
    return Kernel(code, module, code.target)


def compile_kernel(compute: Any, config: Config | Sequence[Step] | None = None,
                   target: Target | str | None = None, *, cache_dir: str | None = None) -> Kernel:
    """Emit and load one kernel: `compute` is a ComputeDef, an output Tensor or (inputs, outputs);
    `target` a Target or target string (None: the host CPU, one thread); `cache_dir`: a folder
    keeping emitted kernels and their compiled objects across processes."""
    return load_kernel(emit_kernel(compute, config, target, cache_dir=cache_dir), cache_dir)
