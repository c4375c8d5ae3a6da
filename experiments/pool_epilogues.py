"""Pooling epilogues end to end: a model's uniform plan (direct, or Winograd F(2x2)/F(4x4) with
`--winograd`) built with Relay's fusion rules and
with `FusionPlan.pool_epilogues` (each max pooling computed in the convolution it pools), each
build in its own process, timed in alternating blocks (`reproduce.peers.time_isolated`).

    python experiments/pool_epilogues.py [--models vgg-16,squeezenet-1.1] [--block 16] [--threads 2]
                                         [--rounds 10] [--block-ms 500] [--db URL] [--layers]
                                         [--winograd 0|2|4]

`--layers` times VGG-16's five block ends alone instead (conv 3x3, bias, ReLU, 2x2 max pool at
224, 112, 56, 28 and 14 pixels; random weights, default schedules).

With `--db`, both builds take their schedules from that tuning log (the fused kernels' as the log
has them: tuned, transferred from another fused kernel, or the template's default); without,
every kernel runs its template's default. The report gives each build's median ms and the
10th-90th percentile of its block medians, the speed-up, how many poolings were fused and the
largest output difference between the builds.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from reproduce.peers import time_isolated
from search.fusion_choice import POOLS, pool_epilogue_edges
from search.models import build_model, load_model, run_inputs, schedule_source
from search.pipeline_choice import prepare_plan


def _plan(mod, block: int, winograd: int, pooled: bool) -> LayoutPlan:
    return replace(LayoutPlan.uniform(conv_layers(mod), block, winograd=winograd),
                   fusion=POOLS if pooled else FusionPlan.default())


def build(name: str, block: int, winograd: int, threads: int, pooled: bool, db_url: str | None):
    """Worker factory: the build and one call of it (module level: sent to the worker by name)."""
    model = load_model(name)
    prepared = prepare_plan(model, "llvm", threads, _plan(model.mod, block, winograd, pooled))
    source = None
    if db_url:
        import tuning_db

        source = schedule_source(tuning_db.open(db_url), model, prepared=prepared)
    exe = build_model(model, source, prepared=prepared)
    args = run_inputs(exe, model)
    return (lambda: exe(*args)), np.asarray(exe(*args))


VGG_ENDS = ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14))  # (channels, pixels)


def build_layer(channels: int, size: int, block: int, winograd: int, threads: int, pooled: bool):
    """Worker factory: one block end of VGG (conv 3x3, bias, ReLU, 2x2 max pool) as a model."""
    import autorelay
    from autorelay.build_module import build_prepared
    from autorelay.codegen import resolve_target
    from autorelay.transform.layout_plan import plan_passes
    from autorelay.transform.pass_base import Pipeline
    from autorelay.transform.prepare import prepare

    c, s = channels, size
    mod = autorelay.parse(f"""#[version = "0.0.5"]
def @main(%x: Tensor[(1, {c}, {s}, {s}), float32], %w: Tensor[({c}, {c}, 3, 3), float32],
          %b: Tensor[({c}, 1, 1), float32]) {{
  %0 = nn.conv2d(%x, %w, padding=[1, 1], channels={c}, kernel_size=[3, 3]);
  nn.max_pool2d(nn.relu(add(%0, %b)), pool_size=[2, 2], strides=[2, 2])
}}""")
    rng = np.random.default_rng(0)
    params = {"w": (rng.standard_normal((c, c, 3, 3)) * 0.05).astype("float32"),
              "b": rng.standard_normal((c, 1, 1)).astype("float32")}
    plan = _plan(mod, block, winograd, pooled)
    exe = build_prepared(prepare(mod, params, Pipeline(plan_passes(plan))), resolve_target("llvm", threads))
    x = rng.standard_normal((1, c, s, s)).astype("float32")
    return (lambda: exe(x)), np.asarray(exe(x))


def _row(label: str, runs: dict, fused: int) -> str:
    errors = [f"{k}: {r.error}" for k, r in runs.items() if r.error]
    if errors:
        return f"| {label} | {fused} | " + "; ".join(errors) + " | | | |"

    def cell(r) -> str:
        lo, hi = r.spread_ms
        return f"{r.median_ms:.3f} [{lo:.3f}-{hi:.3f}]"

    relay, pooled = runs["relay"], runs["pooled"]
    diff = float(np.abs(relay.output - pooled.output).max())
    return (f"| {label} | {fused} | {cell(relay)} | {cell(pooled)} | "
            f"{relay.median_ms / pooled.median_ms:.2f}x | {diff:.2g} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="vgg-16,squeezenet-1.1")
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block-ms", type=float, default=500.0)
    ap.add_argument("--db", default=None)
    ap.add_argument("--winograd", type=int, default=0, choices=(0, 2, 4), help="Winograd tile (0: direct)")
    ap.add_argument("--layers", action="store_true", help="VGG-16's block ends alone")
    a = ap.parse_args()
    print("| model | poolings fused | Relay's rules ms | pooled in the conv ms | speed-up | max abs diff |")
    print("|---|---:|---:|---:|---:|---:|")
    if a.layers:
        for c, size in VGG_ENDS:
            runs = time_isolated({label: (build_layer, (c, size, a.block, a.winograd, a.threads, pooled))
                                  for label, pooled in (("relay", False), ("pooled", True))},
                                 rounds=a.rounds, block_s=a.block_ms / 1e3)
            print(_row(f"{c} ch, {size} px", runs, 1), flush=True)
        return
    for name in a.models.split(","):
        model = load_model(name)
        fused = len(pool_epilogue_edges(model, _plan(model.mod, a.block, a.winograd, False)))
        runs = time_isolated({label: (build, (name, a.block, a.winograd, a.threads, pooled, a.db))
                              for label, pooled in (("relay", False), ("pooled", True))},
                             rounds=a.rounds, block_s=a.block_ms / 1e3)
        print(_row(name, runs, fused), flush=True)


if __name__ == "__main__":
    main()
