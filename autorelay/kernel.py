"""Kernel API: build one compute (an operator or a fused function) under a config and run it on
NumPy arrays. Used by tests, benchmarks and the measurement workers.

`build_kernel(compute, config, target)` lowers, compiles (through the kernel cache) and returns a
`Kernel`. `Kernel.run(*arrays)` is the convenient call; `Kernel.bind(*arrays)` re-lays-out the
inputs once (packing constant weights), allocates the outputs and workspaces, precomputes the
buffer addresses and returns a `BoundKernel` whose `__call__` costs one ctypes call per segment.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.codegen.llvm.emit import emit_module
from autorelay.codegen.llvm.jit import CompiledModule, compile_ir
from autorelay.codegen.llvm.target import Target
from autorelay.codegen.llvm.threads import pointer_array, run_job
from autorelay.schedule.apply import apply
from autorelay.schedule.space import Config
from autorelay.schedule.state import relayout
from autorelay.schedule.steps import Step
from autorelay.te.tensor import ComputeDef, Tensor, make_def, topo_order
from autorelay.tir.nodes import PrimFunc
from autorelay.tir.printer import func_str, structural_hash


@dataclass(eq=False)
class Kernel:
    cdef: ComputeDef
    func: PrimFunc
    steps: tuple[Step, ...]
    relayouts: dict[str, list]
    module: CompiledModule
    target: Target

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
        ins = self._check(arrays)
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
        self._segments = list(zip(kernel.module.functions, kernel.module.jobs))

    def __call__(self) -> None:
        args, threads, argv = self.args, self.threads, self._argv_addr
        for (fn, par), job in self._segments:
            if par and threads > 1:
                run_job(job, argv, par, threads)
            else:
                fn(*args, 0, par)


def as_compute_def(compute: Any) -> ComputeDef:
    if isinstance(compute, ComputeDef):
        return compute
    if isinstance(compute, Tensor):
        ins = [t for t in topo_order([compute]) if t.is_placeholder]
        return make_def(ins, compute, compute.name)
    if isinstance(compute, tuple) and len(compute) == 2:
        return make_def(compute[0], compute[1])
    raise TypeError(
        f"build_kernel: expected a ComputeDef, an output Tensor or (inputs, outputs), got {compute!r}"
    )


def build_kernel(
    compute: Any,
    config: Config | Sequence[Step] | None = None,
    target: Target | None = None,
    *,
    cache_dir: str | None = None,
) -> Kernel:
    """Lower, compile and return a runnable kernel.

    `config`: a template Config, an explicit tuple of Steps, or None for the template's heuristic
    default. Raises ScheduleError if the schedule is illegal for this compute.
    """
    from autorelay.schedule.templates import template_for

    cdef = as_compute_def(compute)
    target = target or Target.host()
    if config is None:
        tmpl = template_for(cdef)
        steps = tmpl.steps(cdef, tmpl.default(cdef, target), target)
    elif isinstance(config, Config):
        tmpl = template_for(cdef, config.template)
        steps = tmpl.steps(cdef, config, target)
    else:
        steps = tuple(config)
    func, state = apply(cdef, steps)
    key = structural_hash(func, target.key())
    symbol = f"k_{key[:16]}"
    text, segs = emit_module(func, target, symbol)
    module = compile_ir(text, segs, len(func.params) + len(func.workspaces), target, key, cache_dir)
    return Kernel(cdef, func, tuple(steps), state.relayouts, module, target)
