"""Kernels for the ahead-of-time path: one compiled kernel per primitive function, with its
constants packed and its workspaces allocated once, exposed as raw segment addresses that the
generated code calls directly (no Python in between).

Like the VM's `CompiledProvider`, kernels come from `autorelay.primitive.compile_primitive` (the
one schedule choice and compile seam); an op without a compute may use a builtin compute
(`autorelay.lower.builtins`). What the AoT path cannot do is call a NumPy reference, or
re-lay-out a non-constant input on every call: those raise `AotError` naming the kernel.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.ir.expr import Function
from autorelay.primitive import compile_primitive
from autorelay.runtime.vm.kernels import KernelInfo
from autorelay.schedule.relayout import relayout
from autorelay.schedule.source import ScheduleSource
from autorelay.target import Target


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


class KernelTable:
    """Builds `NativeKernel`s; keeps every array whose address is baked into generated code alive."""

    def __init__(self, target: Target, schedules: ScheduleSource | None = None) -> None:
        self.target, self.schedules = target, schedules
        self.keep: list[Any] = []
        self._rows: list[KernelInfo] = []
        self._native: dict[int, tuple[Function, NativeKernel]] = {}

    def native(self, fn: Function) -> NativeKernel:
        hit = self._native.get(id(fn))
        if hit is None:
            hit = self._native[id(fn)] = (fn, self._make(fn))
        return hit[1]

    def report(self) -> list[KernelInfo]:
        return list(self._rows)

    def _make(self, fn: Function) -> NativeKernel:
        prim = compile_primitive(fn, self.schedules, self.target, builtins=True)
        name, lowered = prim.name, prim.lowered
        if lowered is None:
            if prim.choice.lowered is None:
                raise AotError(f"AoT: kernel {name} has no compiled form ({prim.detail}); the AoT path "
                               f"cannot call a NumPy reference — use the VM")
            raise AotError(f"AoT: kernel {name} cannot be scheduled: {prim.detail}")
        kern = prim.kernels[0]
        self._rows.append(KernelInfo(name, prim.source, prim.key, prim.detail))
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
