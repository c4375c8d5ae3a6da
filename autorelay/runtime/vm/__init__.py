"""The virtual machine for programs with control flow, closures, recursion and ADTs.

    exe = autorelay.runtime.vm.compile(mod, target="llvm", params=params)
    out = exe(data)                       # NumPy arrays / tuples / ADT values, like the interpreter
    print(exe.disassemble())              # the bytecode
    print(exe.report)                     # every kernel: source (default / tuned / fallback …)

`compile` prepares the module (`prepare.prepare`: bind weights, push invariant weights into the
recursive globals, run the pipeline ending in FuseOps), then compiles every global to bytecode
(`compiler`, `bytecode`) whose `KERNEL` instructions call what the kernel provider returns for each
fused primitive function. `kernels="compiled"` (default) lowers and JIT-compiles them
(`kernels.CompiledProvider`, calls through `call_stub`); `kernels="reference"` runs the ops' NumPy
references (no LLVM needed); any object with `kernel(fn)` / `report()` works too. Registers dead
after a non-tail call are cleared before it (`liveness`), and with compiled kernels each straight
run of kernel calls becomes one native call (`blocks`). The executor is `machine.run`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import require_host_supports
from autorelay.ir.expr import Function
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.runtime.values import input_array
from autorelay.runtime.vm import machine
from autorelay.runtime.vm.blocks import KernelBlock, fuse_blocks
from autorelay.runtime.vm.bytecode import VMClosure, VMFunction
from autorelay.runtime.vm.compiler import ModuleCompiler, VMError
from autorelay.runtime.vm.kernels import (
    CompiledProvider,
    KernelInfo,
    KernelProvider,
    ReferenceProvider,
    build_report,
)
from autorelay.runtime.vm.machine import VMRuntimeError
from autorelay.schedule.source import ScheduleSource
from autorelay.target import Target
from autorelay.transform.prepare import prepare

__all__ = ["CompiledProvider", "KernelInfo", "KernelProvider", "ReferenceProvider", "VMClosure",
           "VMError", "VMExecutable", "VMRuntimeError", "compile", "from_prepared"]


class VMExecutable:
    """A compiled program: call it like the entry function (`exe(*inputs)` / `exe.run(**named)`)."""

    def __init__(self, mod: IRModule, functions: list[VMFunction], global_index: dict[str, int],
                 provider: Any, entry: str = "main") -> None:
        self.mod, self.functions, self.global_index = mod, functions, global_index
        self.provider, self.entry = provider, entry
        self.params = mod[entry].params if entry in mod else ()
        self.blocks: list[KernelBlock] = []  # fused kernel runs (see `blocks`)

    @property
    def input_names(self) -> list[str]:
        return [p.name_hint for p in self.params]

    def _check(self, name: str, args: Sequence[Any]) -> list[Any]:
        """Arguments of global `name`: count checked; tensors coerced to and checked against the
        parameters' annotated dtype and static dims (kernels read raw memory, so a wrong dtype must
        never get through)."""
        params = self.mod[name].params
        if len(args) != len(params):
            raise VMError(f"@{name} expects {len(params)} input(s) "
                          f"({', '.join(p.name_hint for p in params)}), got {len(args)}")
        out = []
        for p, a in zip(params, args):
            ann = p.type_annotation
            if isinstance(ann, TensorType):
                arr, problem = input_array(a, ann.dtype)
                if problem:
                    raise VMError(f"input {p.name_hint!r}: {problem}")
                shape = ann.shape
                if arr.ndim != len(shape) or any(isinstance(d, int) and d != s
                                                 for d, s in zip(shape, arr.shape)):
                    raise VMError(f"input {p.name_hint!r}: expected shape {tuple(shape)}, "
                                  f"got {tuple(arr.shape)}")
                a = arr if arr.flags.c_contiguous else arr.copy(order="C")  # keeps 0-d arrays 0-d
            out.append(a)
        return out

    def __call__(self, *inputs: Any) -> Any:
        if self.entry not in self.global_index:
            raise VMError(f"the module has no @{self.entry} function; use exe.call(name, ...)")
        return self._run(self.entry, self._check(self.entry, inputs))

    def run(self, **named: Any) -> Any:
        missing = [n for n in self.input_names if n not in named]
        extra = sorted(set(named) - set(self.input_names))
        if missing or extra:
            raise VMError(f"inputs: missing {missing or 'none'}, unknown {extra or 'none'} "
                          f"(expected {', '.join(self.input_names)})")
        return self(*[named[n] for n in self.input_names])

    def save(self, path: Any) -> None:
        """Refused, with the reason: only graph executables (static dataflow) are saved today."""
        raise VMError(f"cannot save to {path}: this program runs on the VM (control flow, closures or "
                      f"run-time shapes), and only graph executables, with static dataflow, are saved")

    def call(self, name: str, *args: Any) -> Any:
        """Call any global function of the compiled module (arguments checked like the entry's)."""
        if name not in self.global_index:
            raise VMError(f"no global function @{name} in the compiled module")
        return self._run(name, self._check(name, args))

    def _run(self, name: str, args: list[Any]) -> Any:
        if (target := getattr(self.provider, "target", None)) is not None:
            require_host_supports(target, "this VM program")
        book = getattr(self.provider, "book", None)
        try:
            return machine.run(self.functions, self.global_index[name], args)
        finally:
            if book is not None:
                book.end_run()

    def set_threads(self, threads: int) -> None:
        """Threads for kernels called one by one (kernels inside fused blocks stay single-threaded)."""
        if hasattr(self.provider, "set_threads"):
            self.provider.set_threads(threads)

    def disassemble(self) -> str:
        return "\n\n".join(f.disassemble() for f in self.functions)

    @property
    def report(self) -> Any:
        """Every distinct kernel: name, workload key, config source (`BuildReport`)."""
        return build_report(self.provider.report())


def compile(
    mod: IRModule | Function,
    target: str | Target = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    schedules: ScheduleSource | None = None,
    *,
    pipeline: str | Any = "default",
    kernels: str | KernelProvider = "compiled",
    threads: int = 1,
    blocks: bool = True,
    entry: str = "main",
) -> VMExecutable:
    """Prepare and compile a program with control flow for the VM (see the module docstring).
    `autorelay.build(..., executor="vm")` does the same through `from_prepared`."""
    prepared = prepare(mod, params, pipeline, entry)
    if kernels == "compiled":
        provider: Any = CompiledProvider(resolve_target(target, threads), schedules)
    elif kernels == "reference":
        provider = ReferenceProvider()
    elif isinstance(kernels, str):
        raise ValueError(f"kernels must be 'compiled', 'reference' or a provider object, got {kernels!r}")
    else:
        provider = kernels
    return from_prepared(prepared, provider, blocks=blocks, entry=entry)


def from_prepared(prepared: IRModule, provider: KernelProvider, *, blocks: bool = True,
                  entry: str = "main") -> VMExecutable:
    """Compile an already prepared module (`autorelay.transform.prepare`) to bytecode whose kernels
    come from `provider`.

    `blocks`: fuse straight runs of compiled kernels into one native call each
    (`autorelay.runtime.vm.blocks`; only with one thread, since block kernels run single-threaded).
    """
    mc = ModuleCompiler(prepared, provider)
    functions = mc.compile()
    fused = []
    if blocks and isinstance(provider, CompiledProvider) and provider.threads == 1:
        for f in functions:
            f.code, made = fuse_blocks(f.code, provider.book, provider.target)
            fused.extend(made)
    exe = VMExecutable(prepared, functions, mc.global_index, provider, entry)
    exe.blocks = fused
    return exe
