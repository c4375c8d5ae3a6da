"""The kernel-provider seam: given a fused primitive function, a callable over NumPy arrays.

The VM does not care how a primitive function is computed. Two providers:

* `ReferenceProvider` — the ops' NumPy references (`autorelay.runtime.fallback.ReferenceFunction`):
  needs nothing but the op registry, so the VM is testable on its own.
* `CompiledProvider` — lowering (`autorelay.lower.lower`) + `autorelay.kernel.build_kernel`, with
  the schedule from the plain `schedules.lookup` object (None: heuristic defaults). A function whose
  ops lack computes uses a builtin compute when one fits (`autorelay.runtime.aot.builtins`: argmax,
  one_hot) and otherwise falls back to the reference; `report()` says which, per kernel.

Compiled calls go through `autorelay.runtime.vm.call_stub.CompiledCall` (preallocated outputs,
cached addresses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from autorelay.errors import ScheduleError
from autorelay.ir.expr import Function
from autorelay.runtime.fallback import ReferenceFunction, op_names
from autorelay.runtime.vm.call_stub import AddressBook, CompiledCall


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


def kernel_name(fn: Function) -> str:
    return "_".join(n.split(".")[-1] for n in op_names(fn)) or "identity"


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

    def __init__(self, target: Any = None, schedules: Any = None, threads: int = 1) -> None:
        from autorelay.codegen.llvm.target import Target

        if target is None or target == "llvm" or (isinstance(target, str) and target.split()[:1] == ["llvm"]):
            self.target = Target.host(threads)
        elif isinstance(target, Target):
            self.target = target.with_threads(threads)
        else:
            raise ValueError(f"unsupported target {target!r} (only 'llvm' for the CPU)")
        self.target_name = self.target.tuning_name()  # the name the tuning log files results under
        self.schedules, self.threads = schedules, threads
        self.book = AddressBook()
        self._rows: list[KernelInfo] = []
        self.calls: list[CompiledCall] = []

    def kernel(self, fn: Function) -> Callable[..., Any]:
        from autorelay.lower import NoCompute, describe_workload, lower, workload_key

        name, key = kernel_name(fn), workload_key(fn)
        try:
            lowered = lower(fn)
        except NoCompute as e:
            from autorelay.runtime.aot.builtins import builtin_lowering

            lowered = builtin_lowering(fn)
            if lowered is None:
                self._rows.append(KernelInfo(name, "fallback", key, f"no compute: {e}"))
                return ReferenceFunction(fn)
            kern = self._build(lowered, ())  # naive loops: the default templates do not fit these
            self._rows.append(KernelInfo(name, "builtin", key, f"builtin compute ({e})"))
            return self._call(kern, lowered, fn)
        config, source = self._lookup(key, fn, describe_workload)
        try:
            kern = self._build(lowered, config)
        except ScheduleError as e:
            if config is None:
                self._rows.append(KernelInfo(name, "fallback", key, f"default schedule failed: {e}"))
                return ReferenceFunction(fn)
            source, kern = "default", self._build(lowered, None)
        self._rows.append(KernelInfo(name, source, key, ""))
        return self._call(kern, lowered, fn)

    def _call(self, kern: Any, lowered: Any, fn: Function) -> CompiledCall:
        call = CompiledCall(kern, lowered, fn, self.book, self.threads)
        self.calls.append(call)
        return call

    def _build(self, lowered: Any, config: Any) -> Any:
        from autorelay.kernel import build_kernel
        from autorelay.schedule.space import Config
        from autorelay.schedule.templates import check_in_space

        if isinstance(config, Config):  # a logged config may predate a change of its template
            check_in_space(lowered.cdef, config, self.target)
        return build_kernel(lowered.cdef, config, self.target)

    def _lookup(self, key: str, fn: Function, describe: Callable[[Function], Any]) -> tuple[Any, str]:
        from autorelay.schedule.source import lookup_schedule

        return lookup_schedule(self.schedules, key, self.target_name, describe(fn))

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        for c in self.calls:
            c.threads = threads

    def report(self) -> list[KernelInfo]:
        return list(self._rows)


def build_report(rows: list[KernelInfo], const_bytes: int = 0) -> Any:
    """The rows as the build's `BuildReport` (same columns as the graph executor's report)."""
    from autorelay.runtime.report import BuildReport, KernelRow

    kinds = {"fallback": "fallback", "reference": "fallback"}
    table = [KernelRow(r.name, kinds.get(r.source, "kernel"), r.workload_key, r.source, r.detail)
             for r in rows]
    return BuildReport(table, 0, 0, const_bytes)

