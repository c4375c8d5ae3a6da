"""Depthwise bands end to end: a model's uniform blocked plan built with Relay's fusion rules, with
`FusionPlan.depthwise_bands` (each depthwise convolution computed per band of rows inside the 1x1
convolution that reads it), with the bands on maps of at least `--min-rows` rows only, and with
those bands' expansions too (`FusionPlan.expansions`: each inverted residual block in one kernel);
each build in its own process, timed in alternating blocks (`reproduce.peers.time_isolated`).

    python experiments/depthwise_bands.py [--models mobilenet-v2] [--block 8] [--batch 1]
                                          [--threads 2] [--rounds 10] [--block-ms 500] [--db URL]
                                          [--min-rows 14] [--pairs]

`--pairs` profiles the Relay-rules build and the banded one kernel by kernel instead (in one
process, alternately, the median of three profiles) and lists, per depthwise-separable pair, the
banded kernel's time against the sum of the pair's two kernels.

With `--db`, the builds take their schedules from that tuning log (tuned, transferred or default);
without, every kernel runs its template's default.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from reproduce.peers import time_isolated
from search.fusion_choice import BANDS, depthwise_band_edges
from search.models import build_model, load_model, run_inputs, schedule_source
from search.pipeline_choice import prepare_plan

FUSIONS = ("relay", "bands", "bands on larger maps", "bands on larger maps+expansions")


def _fusion(model, block: int, which: str, min_rows: int) -> FusionPlan:
    if which.endswith("+expansions"):
        return replace(_fusion(model, block, which.removesuffix("+expansions"), min_rows), expansions=True)
    if which == "relay":
        return FusionPlan.default()
    if which == "bands":
        return BANDS
    small = [e for e, rows in depthwise_band_edges(model, _plan(model, block)).items() if rows < min_rows]
    return BANDS.without_edges(small)


def _plan(model, block: int, fusion: FusionPlan | None = None) -> LayoutPlan:
    return replace(LayoutPlan.uniform(conv_layers(model.mod), block, winograd=0), fusion=fusion)


def built(name: str, block: int, threads: int, which: str, min_rows: int, db_url: str | None, batch: int = 1):
    """The build of model `name` (`batch` images) with fusion `which` (one of `FUSIONS`) and its
    sample inputs."""
    model = load_model(name, batch_size=batch)
    fusion = _fusion(model, block, which, min_rows)
    prepared = prepare_plan(model, "llvm", threads, _plan(model, block, fusion))
    source = None
    if db_url:
        import tuning_db

        source = schedule_source(tuning_db.open(db_url), model, prepared=prepared)
    exe = build_model(model, source, prepared=prepared)
    return exe, run_inputs(exe, model)


def build(name: str, block: int, threads: int, which: str, min_rows: int, db_url: str | None, batch: int = 1):
    """Worker factory: the build and one call of it (module level: sent to the worker by name)."""
    exe, args = built(name, block, threads, which, min_rows, db_url, batch)
    return (lambda: exe(*args)), np.asarray(exe(*args))


Profile = list[tuple[str, float]]  # (kernel name, seconds) in program order


def pair_rows(relay: Profile, banded: Profile) -> list[tuple[str, float, float]]:
    """Per banded kernel of `banded` (its name holds two conv2d), (name, its seconds, the seconds of
    the two kernels of `relay` it replaces), matching both profiles' kernels in program order."""
    out, k = [], 0
    for name, seconds in banded:
        parts = 2 if name.count("conv2d") == 2 else 1
        if parts == 2:
            out.append((name, seconds, relay[k][1] + relay[k + 1][1]))
        k += parts
    return out


def _pairs(name: str, a) -> None:
    (relay, args), (banded, _) = (built(name, a.block, a.threads, w, a.min_rows, a.db, a.batch)
                                  for w in FUSIONS[:2])
    profiles: tuple[list, list] = ([], [])
    for _ in range(3):  # alternately, so both see the same drift of the host
        for exe, runs in zip((relay, banded), profiles):
            runs.append(exe.profile(*args, repeat=5).rows)
    relay_rows, banded_rows = ([(rows[0].name, statistics.median(r.seconds for r in rows))
                                for rows in zip(*runs)] for runs in profiles)
    print(f"| {name} kernel | banded us | pair us | speed-up |\n|---|---:|---:|---:|")
    for kernel, fused, pair in pair_rows(relay_rows, banded_rows):
        print(f"| {kernel} | {fused * 1e6:.1f} | {pair * 1e6:.1f} | {pair / fused:.2f}x |", flush=True)


def _cell(r) -> str:
    lo, hi = r.spread_ms
    return f"{r.median_ms:.3f} [{lo:.3f}-{hi:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="mobilenet-v2")
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block-ms", type=float, default=500.0)
    ap.add_argument("--db", default=None)
    ap.add_argument("--min-rows", type=int, default=14, help="the third build: bands on maps this tall up")
    ap.add_argument("--pairs", action="store_true", help="per-pair kernel times instead")
    a = ap.parse_args()
    for name in a.models.split(","):
        if a.pairs:
            _pairs(name, a)
            continue
        runs = time_isolated({w: (build, (name, a.block, a.threads, w, a.min_rows, a.db, a.batch))
                              for w in FUSIONS}, rounds=a.rounds, block_s=a.block_ms / 1e3)
        print(f"{name}, batch {a.batch}, blocks of {a.block}, {a.threads} threads: "
              "ms [p10-p90 of block medians]")
        relay = runs["relay"]
        for w, r in runs.items():
            if r.error or relay.error:
                print(f"  {w}: failed: {r.error or relay.error}")
                continue
            diff = float(np.abs(r.output - relay.output).max())
            print(f"  {w}: {_cell(r)}, {relay.median_ms / r.median_ms:.2f}x Relay's rules, "
                  f"max abs diff {diff:.2g}", flush=True)


if __name__ == "__main__":
    main()
