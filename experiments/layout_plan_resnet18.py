"""ResNet-18's per-layer layout plan against the per-model layout pick, from a short tune.

Tunes the kernels of every layout a conv layer may take (`autorelay tune --pipeline plan`, `--trials`
measurements in all), then runs the layout search: per conv layer its measured kernel time in NCHW
and in each channel block, the dynamic program's choice and the re-layout time it pays, against the
block the fastest per-model pipeline gives that layer; then the end-to-end latencies of the plan and
of every per-model pipeline, timed interleaved with the log's schedules.

    python experiments/layout_plan_resnet18.py --trials 100 [--image-size 224] [--threads 2]
        [--db PATH] [--out experiments/results/layout_plan_resnet18.md]

The table is printed and written as Markdown to `--out`. Budget and machine go in the header:
these are measurements of one short tune on a shared machine, not a benchmark.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from search.layout_search import LayoutSearchResult
from search.model_tuning import tune_model
from search.models import load_model


def markdown(r: LayoutSearchResult, header: str) -> str:
    """Per layer: the plan's block, kernel and transform time, vs the per-model pick's block and kernel."""
    per_model = min((p for p in r.latencies if p != "plan"), key=r.latencies.__getitem__)
    lines = [header, "",
             f"Per-model pick (fastest per-model pipeline, measured): `{per_model}`.", "",
             "| layer | plan block | plan kernel us | transform in us | per-model block "
             "| per-model kernel us |",
             "|---|---:|---:|---:|---:|---:|"]
    plan_total = pm_total = xform_total = 0.0
    for row in r.rows:
        k = row.kernel_s.get(row.block, float("nan"))
        pk = row.kernel_s.get(row.per_model_block, float("nan"))
        plan_total, pm_total, xform_total = plan_total + k, pm_total + pk, xform_total + row.transform_s
        lines.append(f"| {row.layer} | {row.block} | {k * 1e6:.1f} | {row.transform_s * 1e6:.1f} | "
                     f"{row.per_model_block} | {pk * 1e6:.1f} |")
    lines.append(f"| **sum** | | {plan_total * 1e6:.1f} | {xform_total * 1e6:.1f} | | {pm_total * 1e6:.1f} |")
    lines += ["", "Modelled cost (conv kernels + transforms on conv/join edges): "
              + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.modeled.items()),
              "", "Measured end to end (interleaved, median): "
              + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in r.latencies.items())
              + f"; kept `{r.winner}`; max |plan - default| = {r.max_abs_diff:.2g}", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default=None, help="tuning log (default: a fresh temporary one)")
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    args = ap.parse_args()
    db = args.db or str(Path(tempfile.mkdtemp()) / "layout_plan.sqlite")
    model = load_model("resnet-18", image_size=args.image_size)
    t0 = time.perf_counter()
    result = tune_model(model, trials=args.trials, tuner="xgb", db=db, threads=args.threads,
                        pipeline="plan", compare=False)
    seconds = time.perf_counter() - t0
    assert result.layout is not None, "the tune was interrupted before the layout search"
    header = (f"# ResNet-18 ({args.image_size}x{args.image_size}) per-layer layout plan\n\n"
              f"`python experiments/layout_plan_resnet18.py --trials {args.trials} --image-size "
              f"{args.image_size} --threads {args.threads}`: {args.trials} tuning trials over "
              f"{len(result.rows)} tasks (every layout's kernels), {seconds:.0f} s in all; target "
              f"`{result.target}`; {platform.processor() or platform.machine()}, shared machine.")
    text = markdown(result.layout, header)
    print(result.layout.table())
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
