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

The measurement and the analysis live in the package (`reproduce.curve_tuning`,
`reproduce.tuning_curves`, `reproduce.curve_plots`), shared with `autorelay reproduce
autotvm_curves`, which runs the same comparison on the AutoTVM paper's C1-C12 workloads; this script
is the front door for a zoo model's own conv kernels.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

try:
    import reproduce  # noqa: F401
except ModuleNotFoundError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reproduce.curve_plots import save_plot
from reproduce.curve_tuning import collect, model_conv_tasks, tune_all
from reproduce.tuning_curves import BASELINE_TUNER, MODEL_TUNER, format_report

OUT_DIR = Path(__file__).resolve().parent / "out"


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
    tasks = model_conv_tasks(a.model, a.image_size, a.threads, a.tasks)
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
