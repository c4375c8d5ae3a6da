"""Writing an experiment's report: `NAME.csv` (raw numbers), `NAME.md` (the tables, with where and
with what code they were measured) and one PNG per figure, into the output directory."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .experiment import Context, Experiment, Report, Row
from .papers import section


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: numbers rounded, missing values as a dash."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 2) -> str:
    """A Markdown table; numeric columns right-aligned."""
    def numeric(i: int) -> bool:
        return any(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in rows)

    align = ["---:" if rows and numeric(i) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(fmt(v, digits) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _header(exp: Experiment, ctx: Context, rows: Sequence[Row]) -> str:
    machines = sorted({r.machine_label for r in rows})
    versions = sorted({r.code_version or "?" for r in rows})
    reused = sum(r.reused for r in rows)
    return "\n".join([
        f"# {exp.title}",
        "",
        f"Reproduces: {exp.reference}.",
        "",
        f"Mode `{ctx.mode}` ({'reduced: `--quick`' if ctx.quick else 'full'}), {ctx.threads} threads. "
        f"Measured on {'; '.join(machines)} with code {', '.join(versions)}; "
        f"{len(rows)} units ({reused} read from the log `{ctx.db_url}`).",
        "",
        f"Rerun: `autorelay reproduce {exp.name}{' --quick' if ctx.quick else ''} --threads {ctx.threads}` "
        "(add `--replot` to redraw from the log without measuring).",
        "",
        "",
    ])


def write_report(exp: Experiment, ctx: Context, report: Report, rows: Sequence[Row],
                 log: TextIO) -> list[Path]:
    """Write CSV, Markdown and figures; returns the paths written."""
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    csv_path = ctx.out_dir / f"{exp.name}.csv"
    columns: list[str] = []
    for r in report.csv_rows:
        columns += [k for k in r if k not in columns]
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(report.csv_rows)
    written.append(csv_path)
    pngs = _draw(exp, ctx, report, log)
    md = _header(exp, ctx, rows) + report.markdown.rstrip() + "\n"
    paper = section(exp.name)
    md += f"\n{paper}" if paper else ""
    md += "".join(f"\n![{p.stem}]({p.name})\n" for p in pngs)
    md_path = ctx.out_dir / f"{exp.name}.md"
    md_path.write_text(md)
    written += [md_path, *pngs]
    print(f"wrote {', '.join(str(p) for p in written)}", file=log)
    return written


def _draw(exp: Experiment, ctx: Context, report: Report, log: TextIO) -> list[Path]:
    if not report.figures:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (no figures: matplotlib is not installed; pip install matplotlib adds it)", file=log)
        return []
    paths = []
    for stem, draw in report.figures.items():
        fig = plt.figure(figsize=(7.5, 4.5))
        try:
            draw(fig)
            path = ctx.out_dir / f"{stem}.png"
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            paths.append(path)
        finally:
            plt.close(fig)
    return paths


__all__ = ["fmt", "md_table", "write_report"]
