"""Search efficiency, AutoTVM-style: pure functions from measured tuning histories to best-so-far
curves, trials-to-95%-of-best and the comparison of two search strategies.

A history is the GFLOP/s of each measured trial in measurement order (0 for a failed trial). A
task's best-known speed is the best figure any strategy reached on it *in the same seed*: the
strategies of one seed run minutes apart, seeds can run an hour apart on a host whose speed drifts,
so a slow hour would otherwise make every later seed miss a target set in a fast one. The metric is
the number of trials a strategy needed to reach 95% of that (inf when it never did within its
budget), the median over seeds; two strategies compare by the per-task ratio of those numbers,
summarised by its median over tasks. `autotvm_curves` (model-based vs random search) and `transfer`
(a pre-trained cost model vs one from scratch) both report through here, as does
`experiments/search_efficiency.py`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MODEL_TUNER, BASELINE_TUNER = "xgb", "random"
BAR = 0.5  # the model-based tuner must need at most this fraction of random search's trials
LEVEL = 0.95  # "reached": this fraction of the best-known speed


def trial_gflops(costs: Sequence[float] | None, failed: bool, flops: float) -> float:
    """GFLOP/s of one trial from its repeat timings (seconds): FLOPs over the median repeat, the
    figure the tuners minimise; 0 for a failed or untimed trial (it found nothing)."""
    if failed or not costs:
        return 0.0
    med = statistics.median(costs)
    return flops / med / 1e9 if med > 0 and math.isfinite(med) else 0.0


def best_so_far(values: Sequence[float]) -> list[float]:
    """The running maximum: the best speed known after each trial."""
    out: list[float] = []
    best = 0.0
    for v in values:
        best = max(best, v)
        out.append(best)
    return out


def trials_to_reach(curve: Sequence[float], target: float) -> float:
    """Trials (1-based) until the best-so-far `curve` first reaches `target`; inf if it never does."""
    for i, v in enumerate(curve):
        if v >= target:
            return float(i + 1)
    return math.inf


def efficiency_ratio(model_trials: float, random_trials: float, random_budget: int) -> tuple[float, bool]:
    """(candidate / baseline trials-to-target, whether that is only an upper bound).

    When the baseline never got there within its `random_budget` trials it would have needed more,
    so `candidate / budget` bounds the ratio from above (a conservative figure for the bar). A
    candidate that never got there while the baseline did scores inf; when neither did, the ratio
    is unknown (nan) and left out of the median."""
    if math.isinf(model_trials):
        return (math.nan, False) if math.isinf(random_trials) else (math.inf, False)
    if math.isinf(random_trials):
        return (model_trials / random_budget if random_budget > 0 else math.nan), True
    return model_trials / random_trials, False


def median_finite(values: Sequence[float]) -> float:
    """Median of the values that are not nan (inf counts); nan when none are left."""
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else math.nan


def mean_normalised_curve(curves: Sequence[Sequence[float]], scales: Sequence[float]) -> list[float]:
    """Each curve divided by its scale (a task's best-known speed), averaged point-wise over the
    length the curves share: the "fraction of best-known speed vs trials" summary over tasks."""
    if not curves:
        return []
    n = min(len(c) for c in curves)
    return [statistics.fmean(c[i] / s for c, s in zip(curves, scales)) for i in range(n)]


@dataclass
class TaskResult:
    """One task's answer: per strategy its median best-so-far curve over seeds and its trials to
    the target (the median over seeds), and the candidate/baseline ratio of `pair`."""

    name: str
    best_known: float  # GFLOP/s, the best any strategy and seed reached
    curves: dict[str, list[float]]
    trials: dict[str, float]
    budget: dict[str, int]  # trials each strategy actually ran (shortest seed)
    ratio: float = math.nan
    ratio_bounded: bool = False
    default_frac: float = math.nan  # the heuristic default config's speed / best-known (nan: unmeasured)
    level: float = LEVEL
    pair: tuple[str, str] = (MODEL_TUNER, BASELINE_TUNER)

    @property
    def default_reaches(self) -> bool:
        """The heuristic default already reaches the target: on such a task a tuner that started
        from the default (as `autorelay tune` does) would need no search at all."""
        return self.default_frac >= self.level


def analyse_task(name: str, histories: Mapping[str, Sequence[Sequence[float]]],
                 default_speed: float = math.nan, level: float = LEVEL,
                 pair: tuple[str, str] = (MODEL_TUNER, BASELINE_TUNER)) -> TaskResult:
    """`histories[strategy]` holds, per seed (a missing seed: an empty list), the GFLOP/s of each
    trial in measurement order; `default_speed` is the heuristic default config's GFLOP/s where it
    was measured; `pair` (candidate, baseline) names the ratio to compute."""
    per_seed = {t: [best_so_far(h) for h in hs] for t, hs in histories.items()}
    n_seeds = max((len(cs) for cs in per_seed.values()), default=0)
    refs = [max((cs[s][-1] for cs in per_seed.values() if s < len(cs) and cs[s]), default=0.0)
            for s in range(n_seeds)]
    best = max(refs, default=0.0)
    curves: dict[str, list[float]] = {}
    trials: dict[str, float] = {}
    budget: dict[str, int] = {}
    for tuner, cs in per_seed.items():
        runs = [(s, c) for s, c in enumerate(cs) if c]
        if not runs:
            continue
        n = min(len(c) for _, c in runs)
        curves[tuner] = [statistics.median(c[i] for _, c in runs) for i in range(n)]
        trials[tuner] = (statistics.median(trials_to_reach(c, level * refs[s]) for s, c in runs)
                         if best > 0 else math.inf)
        budget[tuner] = n
    res = TaskResult(name, best, curves, trials, budget,
                     default_frac=default_speed / best if best > 0 else math.nan, level=level, pair=pair)
    cand, base = pair
    if cand in trials and base in trials:
        res.ratio, res.ratio_bounded = efficiency_ratio(trials[cand], trials[base], budget[base])
    return res


@dataclass(frozen=True)
class Summary:
    """The median over tasks of the candidate/baseline ratio, and how it was obtained."""

    median: float
    counted: int  # tasks with a ratio (neither inf/inf)
    bounded: bool  # some ratio is only an upper bound (the baseline never reached the target)
    least: float = math.nan  # the median were every bounded ratio as small as it can be (0)

    def text(self, pair: tuple[str, str]) -> str:
        m = "-" if math.isnan(self.median) else f"{self.median:.3g}"
        return (f"median ratio {pair[0]}/{pair[1]} over {self.counted} tasks: {m}"
                + (f" (an upper bound: {pair[1]} never reached the target on some task)" if self.bounded
                   else ""))


def summarise(results: Sequence[TaskResult]) -> Summary:
    least = median_finite([0.0 if r.ratio_bounded else r.ratio for r in results])
    return Summary(median_finite([r.ratio for r in results]), sum(not math.isnan(r.ratio) for r in results),
                   any(r.ratio_bounded for r in results), least)


def verdict(median_ratio: float, bar: float = BAR, pair: tuple[str, str] = (MODEL_TUNER, BASELINE_TUNER),
            strict: bool = False, least: float = math.nan) -> str:
    """PASS when the median ratio is at most `bar` (below it, with `strict`). The median may hold
    upper bounds (the baseline never reached the target within its budget); `least` is the median
    were those as small as they can be, so a median over the bar with `least` under it is
    undetermined, not a FAIL: only a larger budget decides."""
    cand, base = pair
    if math.isnan(median_ratio):
        return f"VERDICT: undetermined (no task gives a {cand}/{base} ratio)"

    def within(v: float) -> bool:
        return v < bar if strict else v <= bar

    ok = within(median_ratio)
    if not ok and not math.isnan(least) and within(least):
        return (f"VERDICT: undetermined - median trials {cand}/{base} <= {median_ratio:.3g}, an upper bound "
                f"over the bar {bar}: {base} never reached the target within its budget on some task")
    rel = ("<" if strict else "<=") if ok else (">=" if strict else ">")
    return (f"VERDICT: {'PASS' if ok else 'FAIL'} - median trials {cand}/{base} = {median_ratio:.3g} "
            f"{rel} {bar}")


def trials_text(v: float) -> str:
    return "never" if math.isinf(v) else ("-" if math.isnan(v) else f"{v:.0f}")


def ratio_text(r: TaskResult) -> str:
    return "-" if math.isnan(r.ratio) else ("<" if r.ratio_bounded else "") + f"{r.ratio:.3g}"


def format_report(results: Sequence[TaskResult], tuners: Sequence[str]) -> str:
    """The per-task table (trials to 95% of best-known per tuner, the ratio) and the verdict, as
    plain text for a terminal."""
    pair = results[0].pair if results else (MODEL_TUNER, BASELINE_TUNER)
    head = f"{'task':<28} {'best GFLOP/s':>12} {'default':>7} " + " ".join(f"{t:>7}" for t in tuners) + \
        f" {pair[0] + '/' + pair[1]:>12}"
    lines = [f"trials to reach {LEVEL:.0%} of the best-known speed (median over seeds; never = not within "
             "the budget)", head, "-" * len(head)]
    for r in results:
        dflt = "-" if math.isnan(r.default_frac) else f"{r.default_frac:.0%}"
        lines.append(f"{r.name[:28]:<28} {r.best_known:>12.2f} {dflt:>7} "
                     + " ".join(f"{trials_text(r.trials.get(t, math.nan)):>7}" for t in tuners)
                     + f" {ratio_text(r):>12}")
    lines.append("-" * len(head))
    s = summarise(results)
    lines += [s.text(pair), verdict(s.median, BAR, pair, least=s.least)]
    search_only = [r for r in results if not r.default_reaches]
    if len(search_only) < len(results):
        s2 = summarise(search_only)
        lines.append(f"tasks whose heuristic default (column 'default', share of best-known) already reaches "
                     f"{LEVEL:.0%} left out (search hardly matters there): {s2.text(pair)}")
    return "\n".join(lines)


__all__ = ["BAR", "BASELINE_TUNER", "LEVEL", "MODEL_TUNER", "Summary", "TaskResult", "analyse_task",
           "best_so_far", "efficiency_ratio", "format_report", "mean_normalised_curve", "median_finite",
           "ratio_text", "summarise", "trial_gflops", "trials_text", "verdict"]
