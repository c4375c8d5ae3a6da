"""ResNet-18's per-layer layout plan against the per-model layout pick, from a short tune.

Tunes the kernels of every layout a conv layer may take (`autorelay tune --pipeline plan`, `--trials`
measurements in all), then runs the layout search: per conv layer its measured kernel time in NCHW
(its fastest NCHW form: direct, Winograd F(2x2) or F(4x4)) and in each channel block (its fastest
form there: direct, F(2x2) or F(4x4)), the dynamic program's choice and the re-layout time it pays,
against the form the fastest per-model pipeline gives that layer; then the end-to-end latencies of
the plan and of every per-model pipeline, timed interleaved with the log's schedules. A `--db` that
already holds a finished plan tune measures no more trials and only reruns the layout search,
storing nothing.

    python experiments/layout_plan_resnet18.py --trials 100 [--image-size 224] [--threads 2]
        [--db PATH] [--out experiments/results/layout_plan_resnet18.md] [--plot FIG.png]

The table is printed and written as Markdown to `--out`; `--plot` saves a per-layer bar chart.
Budget and machine go in the header: these are measurements of one tune, not a benchmark.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tuning_db
from search.layout_search import LayoutSearchResult, layout_label, plan_tasks, search_layout
from search.model_tuning import tune_model
from search.models import load_model


def plot(r: LayoutSearchResult, path: str) -> None:
    """Per layer: the plan's kernel + transform time next to the per-model pick's kernel time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [row.layer.replace("conv2d_", "") for row in r.rows]
    plan = [row.kernel_s.get(row.block, float("nan")) * 1e3 for row in r.rows]
    xform = [row.transform_s * 1e3 for row in r.rows]
    per_model = [row.per_model_s * 1e3 for row in r.rows]
    x = range(len(names))
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar([i - 0.2 for i in x], plan, 0.4, label="plan: kernel")
    ax.bar([i - 0.2 for i in x], xform, 0.4, bottom=plan, label="plan: re-layout")
    ax.bar([i + 0.2 for i in x], per_model, 0.4, label="per-model pick: kernel")
    for i, row in enumerate(r.rows):
        label = layout_label(row.block, row.tile).replace("/", "\n")
        ax.text(i - 0.2, plan[i] + xform[i], label, ha="center", va="bottom", fontsize=6)
    ax.set_xticks(list(x), names)
    ax.set_xlabel("conv layer (conv2d_i)")
    ax.set_ylabel("ms")
    ax.set_title("ResNet-18: per-layer plan vs the per-model pick (labels: the plan's layout)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(r: LayoutSearchResult, header: str) -> str:
    """Per layer: the plan's block, kernel and transform time, vs the per-model pick's block and kernel."""
    per_model = min((p for p in r.latencies if not p.startswith("plan")), key=r.latencies.__getitem__)
    lines = [header, "",
             f"Per-model pick (fastest per-model pipeline, measured): `{per_model}`.", "",
             "| layer | plan layout | plan kernel us | transform in us | per-model layout "
             "| per-model kernel us |",
             "|---|---:|---:|---:|---:|---:|"]
    plan_total = pm_total = xform_total = 0.0
    for row in r.rows:
        k = row.kernel_s.get(row.block, float("nan"))
        pk = row.per_model_s
        plan_total, pm_total, xform_total = plan_total + k, pm_total + pk, xform_total + row.transform_s
        ours = layout_label(row.block, row.tile)
        theirs = layout_label(row.per_model_block, row.per_model_tile)
        lines.append(f"| {row.layer} | {ours} | {k * 1e6:.1f} | {row.transform_s * 1e6:.1f} | {theirs} | "
                     f"{pk * 1e6:.1f} |")
    lines.append(f"| **sum** | | {plan_total * 1e6:.1f} | {xform_total * 1e6:.1f} | | {pm_total * 1e6:.1f} |")
    lines += ["", "Modelled cost (conv kernels + transforms on conv/join edges): "
              + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.modeled.items()),
              "", "Measured end to end (interleaved, median): "
              + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.latencies.items())
              + "; the finalists again: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.confirmed.items())
              + f"; kept `{r.winner}` (the plan's fusion: {r.fusion}); max |plan - default| = "
              f"{r.max_abs_diff:.2g}", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default=None, help="tuning log (default: a fresh temporary one)")
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    ap.add_argument("--plot", default=None, help="save a per-layer bar chart (PNG) here")
    args = ap.parse_args()
    db = args.db or str(Path(tempfile.mkdtemp()) / "layout_plan.sqlite")
    model = load_model("resnet-18", image_size=args.image_size)
    t0 = time.perf_counter()
    result = tune_model(model, trials=args.trials, tuner="xgb", db=db, threads=args.threads,
                        pipeline="plan", compare=False)
    assert not result.interrupted, "the tune was interrupted before the layout search"
    layout = result.layout
    if layout is None:  # the log held a finished plan tune: search again for the table, storing nothing
        with tuning_db.open(db) as handle:
            every_form = plan_tasks(model, "llvm", args.threads)[1].tasks
            layout = search_layout(model, handle, "llvm", args.threads, store=False, tasks=every_form)
    seconds = time.perf_counter() - t0
    what = (f"{args.trials} tuning trials over {len(result.rows)} tasks (every layout's kernels), "
            f"{seconds:.0f} s in all" if result.layout is not None else
            f"the layout search rerun on a log holding a finished {args.trials}-trial plan tune, "
            f"{seconds:.0f} s")
    header = (f"# ResNet-18 ({args.image_size}x{args.image_size}) per-layer layout plan\n\n"
              f"`python experiments/layout_plan_resnet18.py --trials {args.trials} --image-size "
              f"{args.image_size} --threads {args.threads}`: {what}; target "
              f"`{result.target}`; {platform.processor() or platform.machine()}, shared machine.")
    text = markdown(layout, header)
    print(layout.table())
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        print(f"written to {args.out}")
    if args.plot:
        plot(layout, args.plot)
        print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
