"""What the reproduced papers report, cited to the section and figure, so each report can set the
paper's figure beside ours. Only figures the papers state are recorded here: none is estimated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reported:
    quantity: str  # what the paper measured, briefly
    value: str  # as the paper states it: "3x", "1.2-2x"
    source: str  # paper, section, figure / table
    ours: str = ""  # the column or figure of our report to compare it with


REPORTED: dict[str, tuple[Reported, ...]] = {}


def section(experiment: str) -> str:
    """A Markdown section listing the paper's figures for `experiment` ('' when none are recorded)."""
    rows = REPORTED.get(experiment, ())
    if not rows:
        return ""
    lines = ["## What the paper reports", "", "| quantity | paper | source | compare with |",
             "|---|---|---|---|"]
    lines += [f"| {r.quantity} | {r.value} | {r.source} | {r.ours or '-'} |" for r in rows]
    return "\n".join(lines) + "\n"


__all__ = ["REPORTED", "Reported", "section"]
