"""The kernel-provider seam: given a fused primitive function, a callable over NumPy arrays.

The VM does not care how a primitive function is computed. Two providers:

* `ReferenceProvider` — the ops' NumPy references (`autorelay.runtime.fallback.ReferenceFunction`):
  needs nothing but the op registry, so the VM is testable on its own.
* `CompiledProvider` — `autorelay.primitive.compile_primitive` (the one schedule choice and compile
  seam every executor uses) with a `ScheduleSource` (None: heuristic defaults). A function whose
  ops lack computes uses a builtin compute when one fits (`autorelay.lower.builtins`: argmax,
  one_hot) and otherwise falls back to the reference; `report()` says which, per kernel.

Compiled calls go through `autorelay.runtime.vm.call_stub.CompiledCall` (preallocated outputs,
cached addresses; an argument a kernel reads blocked is packed by a compiled packing kernel,
listed in the report). A primitive function with a dynamic op or `?` extents gets a
`specializing_kernel.SpecializingKernel`: compiled through the same seam once per concrete shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from autorelay.ir.expr import Function
from autorelay.ir.structural_hash import structural_hash
from autorelay.lower.relayout import PackKernels
from autorelay.primitive import compile_primitive, kernel_name
from autorelay.runtime.fallback import ReferenceFunction
from autorelay.runtime.report import BuildReport, KernelRow
from autorelay.runtime.vm.call_stub import AddressBook, CompiledCall
from autorelay.runtime.vm.specializing_kernel import (
    DEFAULT_MAX_ENTRIES,
    SpecializingKernel,
    needs_specializing,
)
from autorelay.schedule.source import ScheduleSource
from autorelay.target import Target


@dataclass
class KernelInfo:
    """One row of a provider's report: what runs a primitive function, and why."""

    name: str
    source: str  # tuned | transferred | default | reference | fallback
    workload_key: str
    detail: str = ""


class KernelProvider(Protocol):
    def kernel(self, fn: Function) -> Callable[..., Any]:
        """A callable computing the typed primitive function `fn` on NumPy arrays."""

    def report(self) -> list[KernelInfo]:
        """One row per distinct primitive function provided so far."""


class ReferenceProvider:
    """Primitive functions computed by the ops' NumPy references."""

    def __init__(self) -> None:
        self._rows: list[KernelInfo] = []

    def kernel(self, fn: Function) -> Callable[..., Any]:
        self._rows.append(KernelInfo(kernel_name(fn), "reference", "", "NumPy reference"))
        return ReferenceFunction(fn)

    def report(self) -> list[KernelInfo]:
        return list(self._rows)


class CompiledProvider:
    """Primitive functions lowered and compiled with LLVM; unlowerable ones run their references."""

    def __init__(self, target: Target, schedules: ScheduleSource | None = None,
                 max_specializations: int = DEFAULT_MAX_ENTRIES) -> None:
        self.target, self.schedules, self.threads = target, schedules, target.threads
        self.max_specializations = max_specializations
        self.book = AddressBook()
        self._rows: list[KernelInfo | tuple[str, SpecializingKernel]] = []
        self.calls: list[CompiledCall] = []
        self.specializing: list[SpecializingKernel] = []
        self._specializing_by_key: dict[str, SpecializingKernel] = {}
        self._packs = PackKernels(target, lambda detail: self._rows.append(
            KernelInfo("pack", "relayout", "", detail)))

    def kernel(self, fn: Function) -> Callable[..., Any]:
        if needs_specializing(fn):
            # call sites of one function (equal structure and constants) share its specialisations:
            # a run-time NonZero's binary search is 32 rounds of the same four functions, all
            # specialised again for each new length
            key = structural_hash(fn)
            spec = self._specializing_by_key.get(key)
            if spec is None:
                spec = SpecializingKernel(fn, self._compile_static, self.max_specializations)
                self._specializing_by_key[key] = spec
                self.specializing.append(spec)
                self._rows.append((kernel_name(fn), spec))
            return spec
        call, prim = self._compile(fn)
        self._rows.append(KernelInfo(prim.name, prim.source, prim.key, prim.detail))
        if call is not None:
            self.calls.append(call)
        return call if call is not None else ReferenceFunction(fn)

    def _compile(self, fn: Function) -> tuple[CompiledCall | None, Any]:
        prim = compile_primitive(fn, self.schedules, self.target, builtins=True)
        if prim.lowered is None:
            return None, prim
        call = CompiledCall(prim.kernels[0], prim.lowered, fn, self.book, self.threads, self._packs)
        return call, prim

    def _compile_static(self, fn: Function) -> tuple[Callable[..., Any], str]:
        """One specialisation of a `SpecializingKernel`, with the provider's current threads."""
        call, prim = self._compile(fn)
        return (ReferenceFunction(fn) if call is None else call), prim.source

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        for c in self.calls:
            c.threads = threads

    def report(self) -> list[KernelInfo]:
        return [r if isinstance(r, KernelInfo) else KernelInfo(r[0], r[1].source, "", r[1].detail)
                for r in self._rows]


def build_report(rows: list[KernelInfo], const_bytes: int = 0) -> Any:
    """The rows as the build's `BuildReport` (same columns as the graph executor's report)."""

    kinds = {"fallback": "fallback", "reference": "fallback", "empty": "fallback", "relayout": "relayout"}
    table = [KernelRow(r.name, kinds.get(r.source, "kernel"), r.workload_key, r.source, r.detail)
             for r in rows]
    return BuildReport(table, 0, 0, const_bytes)

