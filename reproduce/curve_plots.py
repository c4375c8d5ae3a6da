"""Figures of tuning curves, drawn onto a matplotlib Figure the caller owns (the reproduce runner
saves it; `save_plot` does for a script): a grid of best-so-far curves, one panel per task plus
the mean over tasks, and grouped bars of the trials each strategy needed to reach the target."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .tuning_curves import LEVEL, TaskResult, mean_normalised_curve


def draw_curves(fig: Any, results: Sequence[TaskResult], strategies: Sequence[str], title: str = "") -> None:
    """One panel per task (best-so-far GFLOP/s vs trials, the 95% line dashed) plus a last panel
    with the curves normalised by each task's best-known speed and averaged over tasks."""
    n = len(results) + 1
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig.set_size_inches(3.6 * cols, 2.9 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    flat = list(axes.flat)
    for ax, r in zip(flat, results):
        for t in strategies:
            if t in r.curves:
                ax.plot(range(1, len(r.curves[t]) + 1), r.curves[t], label=t)
        ax.axhline(r.level * r.best_known, color="grey", ls="--", lw=0.8)
        ax.set_title(r.name[:40], fontsize=8)
        ax.set_xlabel("trials", fontsize=8)
        ax.set_ylabel("best GFLOP/s", fontsize=8)
        ax.tick_params(labelsize=7)
    ax = flat[len(results)]
    for t in strategies:
        have = [r for r in results if t in r.curves and r.best_known > 0]
        mean = mean_normalised_curve([r.curves[t] for r in have], [r.best_known for r in have])
        if mean:
            ax.plot(range(1, len(mean) + 1), mean, label=t)
    ax.axhline(LEVEL, color="grey", ls="--", lw=0.8)
    ax.set_title("mean over tasks (fraction of best-known)", fontsize=8)
    ax.set_xlabel("trials", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    for extra in flat[n:]:
        extra.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)


def draw_trial_bars(fig: Any, results: Sequence[TaskResult], strategies: Sequence[str],
                    title: str = "") -> None:
    """Grouped bars: per task, the trials each strategy needed to reach the target (median over
    seeds). A strategy that never got there is drawn hatched at its budget, marked '>': it would
    have needed more."""
    fig.set_size_inches(max(6.0, 0.5 * len(results) * max(1, len(strategies)) + 2), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(strategies))
    hatched = []
    for k, t in enumerate(strategies):
        xs, hs, never = [], [], []
        for i, r in enumerate(results):
            v = r.trials.get(t, math.nan)
            if math.isnan(v):
                continue
            xs.append(i + (k - (len(strategies) - 1) / 2) * width)
            hs.append(r.budget.get(t, 0) if math.isinf(v) else v)
            never.append(math.isinf(v))
        bars = ax.bar(xs, hs, width, label=t)
        hatched += [b for b, nv in zip(bars, never) if nv]
    ax.legend(fontsize=8)  # before the hatching, so the legend shows plain colours
    for b in hatched:
        b.set_hatch("//")
        b.set_alpha(0.5)
        ax.annotate(">", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                    fontsize=7)
    ax.set_xticks(range(len(results)), [r.name.split()[0] for r in results], fontsize=8)
    ax.set_ylabel(f"trials to {LEVEL:.0%} of best (median over seeds)")
    if title:
        ax.set_title(title, fontsize=10)


def save_plot(results: Sequence[TaskResult], strategies: Sequence[str], path: Path, title: str = "") -> Path:
    """`draw_curves` into a PNG file (for scripts outside the reproduce runner)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    try:
        draw_curves(fig, results, strategies, title)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


__all__ = ["draw_curves", "draw_trial_bars", "save_plot"]
