"""Kernels for the ahead-of-time path: one compiled kernel per primitive function, with its
constants packed and its workspaces allocated once, exposed as raw segment addresses that the
generated code calls directly (no Python in between).

Like the VM's `CompiledProvider`, kernels come from `autorelay.primitive.compile_primitive` (the
one schedule choice and compile seam); an op without a compute may use a builtin compute
(`autorelay.lower.builtins`). A constant input is re-laid-out once, here; a non-constant one that
the kernel reads blocked (a dense layer whose weight is a parameter, read as packed panels) is
packed on every call by a compiled packing kernel into a buffer of its own, as the graph
executor's packing step does. What the AoT path cannot do is call a NumPy reference: that raises
`AotError` naming the kernel.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.ir.expr import Function
from autorelay.kernel import Kernel
from autorelay.lower.relayout import PackKernels
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
    inputs: list[tuple[str, int]]  # ("param", index) | ("const", address) | ("packed", index)
    outputs: list[tuple[tuple[int, ...], str]]  # output buffer (shape, storage dtype)
    workspaces: list[int]  # addresses
    # per "packed" input, in order: the kernel packing the parameter and its output's address
    packs: list[tuple[NativeKernel, int]] = field(default_factory=list)


class KernelTable:
    """Builds `NativeKernel`s; keeps every array whose address is baked into generated code alive."""

    def __init__(self, target: Target, schedules: ScheduleSource | None = None) -> None:
        self.target, self.schedules = target, schedules
        self.keep: list[Any] = []
        self._rows: list[KernelInfo] = []
        self._native: dict[int, tuple[Function, NativeKernel]] = {}
        self._packs = PackKernels(target, lambda detail: self._rows.append(
            KernelInfo("pack", "relayout", "", detail)))

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
        packs: list[tuple[NativeKernel, int]] = []
        for t, src in zip(kern.cdef.inputs, lowered.sources):
            ops = list(kern.relayouts.get(t.name, []))
            if src.kind == "const":
                arr = np.ascontiguousarray(relayout(np.asarray(src.value), ops))
                self.keep.append(arr)
                inputs.append(("const", int(arr.ctypes.data)))
            elif ops:
                packs.append(self._packing(fn, src.index, ops))
                inputs.append(("packed", src.index))
            else:
                inputs.append(("param", src.index))
        return self._native_of(name, kern, inputs, packs)

    def _packing(self, fn: Function, index: int, ops: list) -> tuple[NativeKernel, int]:
        """The kernel that packs parameter `index` of `fn` as `ops` say, and the buffer it packs
        into (the packed kernel reads it right after, so one buffer per input serves every call)."""
        kernel = self._native_of("pack", self._packs.for_param(fn, index, ops), [("param", 0)], [])
        (out_shape, out_dtype), = kernel.outputs
        out = np.zeros(out_shape, out_dtype)
        self.keep.append(out)
        return kernel, int(out.ctypes.data)

    def _native_of(self, name: str, kern: Kernel, inputs: list[tuple[str, int]],
                   packs: list[tuple[NativeKernel, int]]) -> NativeKernel:
        n_in = len(kern.cdef.inputs)
        outputs = [(tuple(int(d) for d in b.shape), b.dtype) for b in kern.func.params[n_in:]]
        ws = [np.zeros(b.size + b.slack, b.dtype) for b in kern.func.workspaces]
        self.keep.extend(ws)
        self.keep.append(kern)  # its execution engine owns the code at these addresses
        segs = [(int(ctypes.cast(f, ctypes.c_void_p).value or 0), par) for f, par in kern.module.functions]
        return NativeKernel(name, segs, inputs, outputs, [int(w.ctypes.data) for w in ws], packs)
