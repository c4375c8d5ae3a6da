"""How much can tuning gain on the accelerator? Each of ResNet-18's distinct offloaded convolutions
searched over its whole knob space with the cycle model alone (`simulate(..., functional=False)`),
against the default knobs: the ceiling any tuner can reach in this space.

The search is exact but does not simulate every setting: `conv_schedule.cycles_lower_bound` (busy
time the load or compute module must spend, from the plan alone) orders the space, and settings
are simulated in that order until the next one's bound is no better than the best found; no
skipped setting can beat it. Besides the best overall, the table gives the best with the loop order
and rounding fixed to their defaults (the tile and thread knobs alone, reuse included), and the
GEMM bound: the accumulate cycles every setting spends, so default / bound caps any tuner's gain.

    python experiments/vta_space_ceiling.py [--out experiments/results/vta_space_ceiling.md]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.vta import VTAConfig
from autorelay.vta.conv import ConvKnobs, ConvShape, conv_space
from autorelay.vta.conv_schedule import cycles_lower_bound
from autorelay.vta.tasks import default_conv_knobs
from reproduce.vta_measure import layer_name, resnet18_convs, search_cycles

NOTE = """
GEMM bound: the accumulate cycles (one per micro-op iteration: output pixel x output block x input
block x tap) that every knob setting spends on the compute module, so default / bound is the most
any setting, tuned or not, can gain on that layer. Default: today's rule (largest fitting tile,
one thread, oc_outer, ALU rounding), which reuse of resident weights and bias now also speeds up.
"""


def _today(k: ConvKnobs) -> bool:
    """A setting of the tile and thread knobs alone: loop order and rounding at their defaults."""
    return (k.order, k.rounding) == (ConvKnobs().order, ConvKnobs().rounding)


def ceiling(shape: ConvShape, hw: VTAConfig) -> dict:
    """The best setting overall and among `_today` ones, by bound-ordered exhaustive search."""
    space = sorted(((cycles_lower_bound(shape, k, hw), i, k) for i, k in enumerate(conv_space(shape, hw))),
                   key=lambda t: t[:2])
    best: dict[bool, tuple[int, ConvKnobs | None]] = {True: (math.inf, None), False: (math.inf, None)}
    simulated = 0
    for bound, _, k in space:
        if bound >= best[True][0]:  # the bounds only grow from here, and best[True] >= best[False]
            break
        if bound >= best[False][0] and not _today(k):  # it could only win overall, and cannot
            continue
        (cycles,) = search_cycles(shape, [k], hw)
        simulated += 1
        for today in (False, True):
            if (not today or _today(k)) and cycles < best[today][0]:
                best[today] = (cycles, k)
    return {"space": len(space), "simulated": simulated, "best": best[False], "best_today": best[True]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the table (Markdown) here too")
    args = ap.parse_args()
    hw = VTAConfig()
    lines = ["| layer | space (simulated) | GEMM bound | default cycles | best, default order + rounding "
             "| best cycles | best knobs | best / default | default / bound |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    gains, gains3 = [], []
    t0 = time.perf_counter()
    for shape, _ in resnet18_convs(224):  # ResNet-18's offloaded convolutions after the stem
        (default,) = search_cycles(shape, [default_conv_knobs(shape, hw)], hw)
        r = ceiling(shape, hw)
        (best, knobs), (today, _) = r["best"], r["best_today"]
        bound = shape.oh * shape.ow * math.ceil(shape.o / hw.block_out) * math.ceil(shape.c / hw.block_in) \
            * shape.kh * shape.kw
        gains.append(default / best)
        if shape.kh == 3:
            gains3.append(gains[-1])
        lines.append(f"| {layer_name(shape)} | {r['space']} ({r['simulated']}) | {bound} | {default} | "
                     f"{today} | {best} | {knobs} | {gains[-1]:.2f}x | {default / bound:.2f}x |")
        print(lines[-1], flush=True)
    lines.append(f"\nmedian best / default over the layers: {statistics.median(gains):.2f}x; over the 3x3 "
                 f"layers: {statistics.median(gains3):.2f}x ({time.perf_counter() - t0:.0f} s)")
    print(lines[-1])
    lines.append(NOTE)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"`python experiments/vta_space_ceiling.py --out {args.out}` (cycle model alone; "
                    "cycles are deterministic)\n\n")
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
