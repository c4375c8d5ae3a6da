"""Search efficiency, AutoTVM-style: how many measured trials each tuner needs on ResNet-18's conv
kernels to reach 95% of the best-known speed.

For every conv task of ResNet-18 (zoo, batch 1) and every tuner in `--tuners` (and every seed),
`--trials` real, measured trials go into a tuning log; then, per (task, tuner), the best-so-far
GFLOP/s after each trial gives a curve. The best-known speed of a task is the best figure any tuner
reached on it in the same seed (the tuners of a seed run minutes apart; seeds can run an hour apart
on a host whose speed drifts), and the metric is the number of trials a tuner needed to reach 95% of
that (∞ when it never did within its budget), the median over seeds. The bar (issue 8): the
model-based tuner (`xgb`) needs at most half the trials that random search needs, as the median over
tasks of the per-task ratio xgb / random.

    python experiments/search_efficiency.py                       # all convs at 224, 128 trials
    python experiments/search_efficiency.py --tasks 2 --trials 24 --image-size 56   # a short run
    python experiments/search_efficiency.py --analyze-only        # tables + plot from the log

Everything measured is logged as it lands, so an interrupted run resumes where its log ends (and a
long run can be done in pieces: rerun the same command). Each (tuner, seed) tunes its own copy of a
task, logged under the task's workload key with a `#tuner-sSEED` suffix: the tuners must not see
(resume from) each other's measurements, and a later `autorelay build` never looks these keys up.
The model-based tuner is not warmed from other workloads in the log (`transfer=False`) and does not
start from the template's heuristic default: the curve measures search from scratch, as AutoTVM's
did.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import search  # noqa: F401
except ModuleNotFoundError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search.task import Task

OUT_DIR = Path(__file__).resolve().parent / "out"
MODEL_TUNER, BASELINE_TUNER = "xgb", "random"
BAR = 0.5  # the model-based tuner must need at most this fraction of random search's trials
LEVEL = 0.95  # "reached": this fraction of the best-known speed

# ---- analysis: pure functions over measurement histories ------------------------------------------


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
    """Trials (1-based) until the best-so-far `curve` first reaches `target`; ∞ if it never does."""
    for i, v in enumerate(curve):
        if v >= target:
            return float(i + 1)
    return math.inf


def efficiency_ratio(model_trials: float, random_trials: float, random_budget: int) -> tuple[float, bool]:
    """(model / random trials-to-target, whether that is only an upper bound).

    When random search never got there within its `random_budget` trials it would have needed
    more, so `model / budget` bounds the ratio from above (a conservative figure for the bar). A
    model-based tuner that never got there while random did scores ∞; when neither did, the ratio
    is unknown (nan) and left out of the median."""
    if math.isinf(model_trials):
        return (math.nan, False) if math.isinf(random_trials) else (math.inf, False)
    if math.isinf(random_trials):
        return (model_trials / random_budget if random_budget > 0 else math.nan), True
    return model_trials / random_trials, False


def median_finite(values: Sequence[float]) -> float:
    """Median of the values that are not nan (∞ counts); nan when none are left."""
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
    """One task's answer: per tuner its median best-so-far curve over seeds and its trials-to-95%
    (the median over seeds), and the model/random ratio."""

    name: str
    best_known: float  # GFLOP/s, the best any tuner and seed reached
    curves: dict[str, list[float]]
    trials: dict[str, float]
    budget: dict[str, int]  # trials each tuner actually ran (shortest seed)
    ratio: float = math.nan
    ratio_bounded: bool = False
    default_frac: float = math.nan  # the heuristic default config's speed / best-known (nan: unmeasured)
    level: float = LEVEL

    @property
    def default_reaches(self) -> bool:
        """The heuristic default already reaches the target: on such a task a tuner that started
        from the default (as `autorelay tune` does) would need no search at all."""
        return self.default_frac >= self.level


def analyse_task(name: str, histories: Mapping[str, Sequence[Sequence[float]]],
                 default_speed: float = math.nan, level: float = LEVEL) -> TaskResult:
    """`histories[tuner]` holds, per seed, the GFLOP/s of each trial in measurement order;
    `default_speed` is the heuristic default config's GFLOP/s where some tuner measured it."""
    per_seed = {t: [best_so_far(h) for h in hs] for t, hs in histories.items()}
    n_seeds = max((len(cs) for cs in per_seed.values()), default=0)
    # Each seed is judged against the best any tuner reached *in that seed*: the tuners of one
    # seed run minutes apart, different seeds can be an hour apart on a host whose speed drifts
    # (a slow hour would otherwise make every later seed miss a target set in a fast one).
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
                     default_frac=default_speed / best if best > 0 else math.nan, level=level)
    if MODEL_TUNER in trials and BASELINE_TUNER in trials:
        res.ratio, res.ratio_bounded = efficiency_ratio(trials[MODEL_TUNER], trials[BASELINE_TUNER],
                                                        budget[BASELINE_TUNER])
    return res


def verdict(median_ratio: float, bar: float = BAR) -> str:
    if math.isnan(median_ratio):
        return f"VERDICT: undetermined (no task gives an {MODEL_TUNER}/{BASELINE_TUNER} ratio)"
    ok = median_ratio <= bar
    return (f"VERDICT: {'PASS' if ok else 'FAIL'} - median trials {MODEL_TUNER}/{BASELINE_TUNER} = "
            f"{median_ratio:.3g} {'<=' if ok else '>'} {bar} (the bar)")


def _n(v: float) -> str:
    return "inf" if math.isinf(v) else ("-" if math.isnan(v) else f"{v:.0f}")


def format_report(results: Sequence[TaskResult], tuners: Sequence[str]) -> str:
    """The per-task table (trials to 95% of best-known per tuner, the ratio) and the verdict."""
    head = f"{'task':<28} {'best GFLOP/s':>12} {'default':>7} " + " ".join(f"{t:>7}" for t in tuners) + \
        f" {MODEL_TUNER + '/' + BASELINE_TUNER:>12}"
    lines = [f"trials to reach {LEVEL:.0%} of the best-known speed (median over seeds; inf = never)",
             head, "-" * len(head)]
    for r in results:
        ratio = "-" if math.isnan(r.ratio) else ("<" if r.ratio_bounded else "") + f"{r.ratio:.3g}"
        dflt = "-" if math.isnan(r.default_frac) else f"{r.default_frac:.0%}"
        lines.append(f"{r.name[:28]:<28} {r.best_known:>12.2f} {dflt:>7} "
                     + " ".join(f"{_n(r.trials.get(t, math.nan)):>7}" for t in tuners) + f" {ratio:>12}")
    lines.append("-" * len(head))
    med = median_finite([r.ratio for r in results])
    bounded = any(r.ratio_bounded for r in results)
    counted = sum(not math.isnan(r.ratio) for r in results)
    lines.append(f"median ratio {MODEL_TUNER}/{BASELINE_TUNER} over {counted} tasks: "
                 f"{'-' if math.isnan(med) else f'{med:.3g}'}"
                 + (" (an upper bound: random never reached 95% on some task)" if bounded else ""))
    lines.append(verdict(med))
    search_only = [r.ratio for r in results if not r.default_reaches]
    if len(search_only) < len(results):
        med2 = median_finite(search_only)
        lines.append(f"tasks whose heuristic default (column 'default', share of best-known) already reaches "
                     f"{LEVEL:.0%} left out (search hardly matters there): median ratio over "
                     f"{sum(not math.isnan(v) for v in search_only)} tasks "
                     f"{'-' if math.isnan(med2) else f'{med2:.3g}'}")
    return "\n".join(lines)


def save_plot(results: Sequence[TaskResult], tuners: Sequence[str], path: Path, title: str = "") -> Path:
    """One panel per task (best-so-far GFLOP/s vs trials, the 95% line dashed) plus a last panel
    with the curves normalised by each task's best-known speed and averaged over tasks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results) + 1
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax, r in zip(flat, results):
        for t in tuners:
            if t in r.curves:
                ax.plot(range(1, len(r.curves[t]) + 1), r.curves[t], label=t)
        ax.axhline(LEVEL * r.best_known, color="grey", ls="--", lw=0.8)
        ax.set_title(r.name[:40], fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
    ax = flat[len(results)]
    for t in tuners:
        have = [r for r in results if t in r.curves and r.best_known > 0]
        mean = mean_normalised_curve([r.curves[t] for r in have], [r.best_known for r in have])
        if mean:
            ax.plot(range(1, len(mean) + 1), mean, label=t)
    ax.axhline(LEVEL, color="grey", ls="--", lw=0.8)
    ax.set_title("mean over tasks (fraction of best-known)", fontsize=9)
    ax.set_xlabel("trials")
    ax.legend()
    for extra in flat[n:]:
        extra.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ---- measurement: tasks, tuning into the log, reading the histories back -------------------------


def conv_tasks(model: str, image_size: int, threads: int, n: int | None) -> list[Any]:
    """The conv tasks of the model, heaviest first (FLOPs times occurrences), the first `n`."""
    from search.extract import extract_tasks
    from search.models import load_model

    m = load_model(model, image_size=image_size)
    tasks = [t for t in extract_tasks(m.mod, m.params, "llvm", threads=threads) if "nn.conv2d" in t.ops]
    if not tasks:
        raise ValueError(f"model {model} at image size {image_size} has no tunable conv kernel")
    tasks.sort(key=lambda t: -t.total_flops)
    return tasks[:n] if n else tasks


def tagged(task: Task, tuner: str, seed: int) -> Task:
    """A copy of `task` whose log key belongs to one (tuner, seed): its own history to resume."""
    return dataclasses.replace(task, key=f"{task.key}#{tuner}-s{seed}", _cache={})


def history_gflops(db: Any, task: Task, trials: int) -> list[float]:
    """GFLOP/s of the first `trials` search measurements of `task` in the log, oldest first."""
    from search.tune import REMEASURE_TAG

    recs = [r for r in db.history(task.key, str(task.target)) if r.runner_version != REMEASURE_TAG]
    return [trial_gflops(r.costs, r.error_kind is not None, task.flops) for r in recs[:trials]]


def default_gflops(db: Any, task: Task, tuners: Sequence[str], seeds: int) -> float:
    """The default config's best search figure in any (tuner, seed) log; nan if none measured it."""
    from search.tune import REMEASURE_TAG

    found = []
    for tuner in tuners:
        for seed in range(seeds):
            tt = tagged(task, tuner, seed)
            for r in db.history(tt.key, str(tt.target)):
                if r.runner_version != REMEASURE_TAG and tt.config_from_json(r.config) == task.default:
                    found.append(trial_gflops(r.costs, r.error_kind is not None, task.flops))
    return max(found, default=math.nan)


def tune_all(tasks: Sequence[Task], tuners: Sequence[str], seeds: int, trials: int, db: Any,
             measurer: Any, say: Callable[[str], None] = print) -> None:
    """Bring every (task, tuner, seed) log up to `trials` measured trials (resuming)."""
    from search.tune import tune_task
    from search.tuners import make_tuner

    for task in tasks:
        for tuner in tuners:
            for seed in range(seeds):
                tt = tagged(task, tuner, seed)
                t0 = time.perf_counter()
                # from scratch: the model-based tuner does not start from the template's default
                opts = {"start_from_default": False} if tuner == MODEL_TUNER else {}
                r = tune_task(tt, make_tuner(tuner, tt, seed, **opts), trials, db, measurer, final=False,
                              transfer=False)
                if r.trials:
                    say(f"  {task.name} {tuner} seed {seed}: {r.trials} new trials "
                        f"({r.resumed} logged) in {time.perf_counter() - t0:.1f} s")


def collect(tasks: Sequence[Task], tuners: Sequence[str], seeds: int, trials: int,
            db: Any) -> list[TaskResult]:
    """Each task's analysis from the log (the first `trials` trials of every tuner and seed)."""
    return [analyse_task(t.name, {tu: [history_gflops(db, tagged(t, tu, s), trials) for s in range(seeds)]
                                  for tu in tuners}, default_gflops(db, t, tuners, seeds)) for t in tasks]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from search.models import default_threads
    from search.tuners import TUNERS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet-18")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--tasks", type=int, default=None, help="the N heaviest conv tasks (default: all)")
    p.add_argument("--tuners", default=f"{MODEL_TUNER},{BASELINE_TUNER},tpe")
    p.add_argument("--seeds", type=int, default=1, help="repeats per (task, tuner), seeds 0..N-1")
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--threads", type=int, default=default_threads())
    p.add_argument("--db", default=None, help="tuning log (default experiments/out/search_efficiency.db)")
    p.add_argument("--plot", default=None, help="PNG path (default experiments/out/search_efficiency.png)")
    p.add_argument("--min-repeat-ms", type=float, default=None, help="timing: shortest repeat (ms)")
    p.add_argument("--analyze-only", action="store_true", help="measure nothing; analyse the log")
    a = p.parse_args(argv)
    a.tuners = [t.strip() for t in a.tuners.split(",") if t.strip()]
    bad = [t for t in a.tuners if t not in TUNERS]
    if bad:
        p.error(f"unknown tuner(s) {', '.join(bad)} (known: {', '.join(TUNERS)})")
    for name in ("trials", "seeds", "image_size", "threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    if a.tasks is not None and a.tasks < 1:
        p.error(f"--tasks must be at least 1, got {a.tasks}")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    import tuning_db
    from search.measure import Measurer, TimingSettings

    a = parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    db_url = a.db or str(OUT_DIR / "search_efficiency.db")
    plot = Path(a.plot) if a.plot else OUT_DIR / "search_efficiency.png"
    tasks = conv_tasks(a.model, a.image_size, a.threads, a.tasks)
    print(f"{a.model}@{a.image_size}: {len(tasks)} conv tasks; tuners {', '.join(a.tuners)}; "
          f"{a.trials} trials x {a.seeds} seed(s); log {db_url}")
    with tuning_db.open_db(db_url) as db:
        if not a.analyze_only:
            settings = (TimingSettings(min_repeat_ms=a.min_repeat_ms) if a.min_repeat_ms is not None
                        else TimingSettings())
            t0 = time.perf_counter()
            try:
                with Measurer(settings=settings) as measurer:
                    tune_all(tasks, a.tuners, a.seeds, a.trials, db, measurer)
            except KeyboardInterrupt:
                print("interrupted: every finished trial is in the log; rerun the command to resume")
                return 130
            print(f"measuring took {time.perf_counter() - t0:.1f} s")
        results = collect(tasks, a.tuners, a.seeds, a.trials, db)
    print(format_report(results, a.tuners))
    title = f"{a.model}@{a.image_size}, {a.trials} trials, {a.seeds} seed(s), {a.threads} thread(s)"
    print(f"plot: {save_plot(results, a.tuners, plot, title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
