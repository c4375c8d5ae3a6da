"""Kernels for the ahead-of-time path: one compiled kernel per primitive function, with its
constants packed and its workspaces allocated once, exposed as raw segment addresses that the
generated code calls directly (no Python in between).

Like the VM's `CompiledProvider`, lowering comes from `autorelay.lower.lower` and code from
`autorelay.kernel.build_kernel`; an op without a compute may use a builtin compute
(`autorelay.runtime.aot.builtins`). What the AoT path cannot do is call a NumPy reference, or
re-lay-out a non-constant input on every call: those raise `AotError` naming the kernel.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.errors import AutoRelayError, ScheduleError
from autorelay.ir.expr import Function
from autorelay.runtime.vm.kernels import CompiledProvider, KernelInfo, kernel_name


class AotError(AutoRelayError):
    """The program is outside what the AoT compiler supports; the message names the construct."""


@dataclass
class NativeKernel:
    """What the emitter needs to call one kernel: segment addresses and argument layout."""

    name: str
    segments: list[tuple[int, int]]  # (function address, parallel extent or 0)
    inputs: list[tuple[str, int]]  # ("param", index) | ("const", address)
    outputs: list[tuple[tuple[int, ...], str]]  # output buffer (shape, storage dtype)
    workspaces: list[int]  # addresses


class KernelTable(CompiledProvider):
    """Builds `NativeKernel`s; keeps every array whose address is baked into generated code alive."""

    def __init__(self, target: Any = None, schedules: Any = None) -> None:
        super().__init__(target, schedules, threads=1)
        self.keep: list[Any] = []
        self._native: dict[int, tuple[Function, NativeKernel]] = {}

    def native(self, fn: Function) -> NativeKernel:
        hit = self._native.get(id(fn))
        if hit is None:
            hit = self._native[id(fn)] = (fn, self._make(fn))
        return hit[1]

    def _make(self, fn: Function) -> NativeKernel:
        from autorelay.lower import NoCompute, describe_workload, lower, workload_key
        from autorelay.runtime.aot.builtins import builtin_lowering
        from autorelay.schedule.state import relayout

        name, key = kernel_name(fn), workload_key(fn)
        try:
            lowered = lower(fn)
            config, source = self._lookup(key, fn, describe_workload)
        except NoCompute as e:
            lowered = builtin_lowering(fn)
            if lowered is None:
                raise AotError(f"AoT: kernel {name} has no compiled form ({e}); the AoT path cannot call a "
                               f"NumPy reference — use the VM") from None
            config, source = (), "builtin"
        try:
            kern = self._build(lowered, config)
        except ScheduleError as e:
            if config is None or config == ():
                raise AotError(f"AoT: kernel {name} cannot be scheduled: {e}") from None
            source, kern = "default", self._build(lowered, None)
        self._rows.append(KernelInfo(name, source, key, ""))
        inputs: list[tuple[str, int]] = []
        for t, src in zip(kern.cdef.inputs, lowered.sources):
            ops = list(kern.relayouts.get(t.name, []))
            if src.kind == "const":
                arr = np.ascontiguousarray(relayout(np.asarray(src.value), ops))
                self.keep.append(arr)
                inputs.append(("const", int(arr.ctypes.data)))
            elif ops:
                raise AotError(f"AoT: kernel {name} wants its input {t.name} (parameter {src.index}) "
                               f"re-laid-out ({ops}) on every call, which AoT code does not do")
            else:
                inputs.append(("param", src.index))
        n_in = len(kern.cdef.inputs)
        outputs = [(tuple(int(d) for d in b.shape), b.dtype) for b in kern.func.params[n_in:]]
        ws = [np.zeros(b.size + b.slack, b.dtype) for b in kern.func.workspaces]
        self.keep.extend(ws)
        self.keep.append(kern)  # its execution engine owns the code at these addresses
        segs = [(int(ctypes.cast(f, ctypes.c_void_p).value or 0), par) for f, par in kern.module.functions]
        return NativeKernel(name, segs, inputs, outputs, [int(w.ctypes.data) for w in ws])
