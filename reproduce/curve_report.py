"""From the stored rows of a tuning-curve experiment to its analysis and tables.

Each stored unit of `autotvm_curves` and `transfer` is one run: its workload, its strategy (a
tuner, or scratch / transfer), its seed and the GFLOP/s of every trial. Rows are grouped per
(machine, workload) so that, after a `db merge`, two machines' curves are never compared with each
other's best-known speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .experiment import Row
from .output import md_table
from .tuning_curves import TaskResult, analyse_task, best_so_far, ratio_text, trials_text

Histories = dict[str, list[list[float]]]  # strategy -> per seed, the GFLOP/s of each trial


def group_runs(rows: Sequence[Row], order: Sequence[str]) -> dict[tuple[str, str], Histories]:
    """(machine label, workload) -> strategy -> per-seed GFLOP/s histories (a seed not measured: an
    empty list), workloads in `order` (others after, by name). Rows without a curve are skipped."""
    runs: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = {}
    for r in rows:
        if "gflops" not in r.result:
            continue
        res = r.result
        runs.setdefault((r.machine_label, res["workload"]), {}).setdefault(res["strategy"], {})[
            int(res["seed"])] = [float(g) for g in res["gflops"]]
    rank = {name: i for i, name in enumerate(order)}
    out = {}
    for key in sorted(runs, key=lambda k: (k[0], rank.get(k[1], len(rank)), k[1])):
        out[key] = {s: [seeds.get(i, []) for i in range(max(seeds) + 1)] for s, seeds in runs[key].items()}
    return out


def analyse_rows(rows: Sequence[Row], order: Sequence[str], titles: dict[str, str],
                 pair: tuple[str, str]) -> list[TaskResult]:
    """One `TaskResult` per (machine, workload); its name is the workload's title, with the machine
    when the rows come from more than one."""
    grouped = group_runs(rows, order)
    machines = {m for m, _ in grouped}
    return [analyse_task(titles.get(w, w) + (f" @ {m}" if len(machines) > 1 else ""), hist, pair=pair)
            for (m, w), hist in grouped.items()]


def curve_csv(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The raw numbers: one line per trial of every run."""
    out = []
    for r in rows:
        res = r.result
        if "gflops" not in res:
            continue
        for i, (g, b) in enumerate(zip(res["gflops"], best_so_far(res["gflops"])), start=1):
            out.append({"machine": r.machine_label, "workload": res["workload"], "strategy": res["strategy"],
                        "seed": res["seed"], "trial": i, "gflops": g, "best_gflops": round(b, 3)})
    return out


def trials_table(results: Sequence[TaskResult], strategies: Sequence[str]) -> str:
    """Markdown: per workload, its best-known speed, the trials each strategy needed to reach the
    target (median over seeds) and the pair's ratio."""
    cand, base = results[0].pair if results else ("", "")
    headers = ["workload", "best GFLOP/s", *[f"{s}: trials" for s in strategies], f"{cand}/{base}"]
    body = []
    for r in results:
        budget = [r.budget.get(s) for s in strategies]
        cells = [trials_text(r.trials.get(s, math.nan)) + (f" (of {b})" if b else "")
                 for s, b in zip(strategies, budget)]
        body.append([r.name, round(r.best_known, 2), *cells, ratio_text(r)])
    return md_table(headers, body)


__all__ = ["analyse_rows", "curve_csv", "group_runs", "trials_table"]
