"""The build report: every kernel of an executable with its workload key, where its schedule came
from (tuned / transferred / default / fallback) and, after `exe.profile()`, its share of run time;
plus the memory plan's peak against the unplanned total (every intermediate in its own buffer)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KernelRow:
    name: str
    kind: str  # kernel | fallback | external | relayout
    workload_key: str
    source: str
    detail: str
    seconds: float | None = None
    share: float | None = None


@dataclass
class BuildReport:
    rows: list[KernelRow]
    peak_memory_bytes: int
    unplanned_bytes: int
    const_bytes: int
    total_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_plan(plan: Any, const_bytes: int) -> BuildReport:
        rows = [KernelRow(s.name, s.kind, s.workload_key, s.source, s.detail) for s in plan.steps]
        temps = sum(s.nbytes for s in plan.slots if s.kind in ("temp", "padded"))
        return BuildReport(rows, plan.memory.peak_bytes, temps + plan.memory.workspace_bytes, const_bytes)

    def set_times(self, seconds: list[float]) -> None:
        total = sum(seconds) or 1e-12
        self.total_seconds = sum(seconds)
        for r, s in zip(self.rows, seconds):
            r.seconds, r.share = s, s / total

    @property
    def sources(self) -> Counter:
        """How many kernel steps each config source supplied (tuned/transferred/default/fallback;
        an offloaded layer counts under its device's name and source, e.g. "vta tuned")."""
        return Counter(r.source for r in self.rows if r.kind in ("kernel", "fallback", "external"))

    @property
    def fallbacks(self) -> list[KernelRow]:
        """The steps that run NumPy references; not those over inputs with no elements (source
        `empty`: they read nothing, and kernels take no empty buffers)."""
        return [r for r in self.rows if r.kind == "fallback" and r.source != "empty"]

    def __str__(self) -> str:
        lines = [f"{'#':>3} {'kernel':<34} {'source':<12} {'workload':<12} {'time us':>9} {'share':>6}"
                 "  config"]
        for i, r in enumerate(self.rows):
            t = f"{r.seconds * 1e6:9.1f}" if r.seconds is not None else f"{'-':>9}"
            sh = f"{r.share * 100:5.1f}%" if r.share is not None else f"{'-':>6}"
            lines.append(f"{i:>3} {r.name[:34]:<34} {r.source:<12} {r.workload_key[:12]:<12} {t} {sh}  "
                         f"{r.detail[:90]}")
        src = ", ".join(f"{k}: {v}" for k, v in sorted(self.sources.items()))
        lines.append(f"kernels by source: {src}")
        lines.append(f"memory: peak {self.peak_memory_bytes / 1024:.1f} KiB planned vs "
                     f"{self.unplanned_bytes / 1024:.1f} KiB unplanned; "
                     f"constants {self.const_bytes / 1024:.1f} KiB")
        if self.total_seconds is not None:
            lines.append(f"profiled total: {self.total_seconds * 1e3:.3f} ms")
        return "\n".join(lines)
