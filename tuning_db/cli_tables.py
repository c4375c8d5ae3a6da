"""Plain text tables and the units the `db` commands print their figures in."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned text columns with a rule under the header; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(row[i], (int, float)) for row in rows) and rows != [] for i in range(len(headers))
    ]

    def fmt(values: Sequence[str]) -> str:
        parts = [v.rjust(wd) if num else v.ljust(wd) for v, wd, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    return "\n".join([fmt(headers), "  ".join("-" * wd for wd in widths)] + [fmt(r) for r in cells])


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def fmt_seconds(s: float | None) -> str:
    """1.5e-05 -> '15.00 us': costs are seconds, people read them in the right unit."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale * 0.9995:  # 0.9999999e-3 s is "1.000 ms", not "1000.000 us"
            return f"{s / scale:.3f} {unit}"
    return f"{s / 1e-9:.1f} ns"


def when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


__all__ = ["fmt_seconds", "table", "when"]
