"""How much can tuning gain on the accelerator? Each of ResNet-18's distinct offloaded convolutions
timed over its whole knob space with the cycle model alone (`simulate(..., functional=False)`),
against the default knobs: the ceiling any tuner can reach in this space.

    python experiments/vta_space_ceiling.py [--out experiments/results/vta_space_ceiling.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.vta import VTAConfig
from autorelay.vta.conv import conv_space
from autorelay.vta.tasks import default_conv_knobs
from reproduce.vta_measure import layer_name, resnet18_convs, search_cycles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the table (Markdown) here too")
    args = ap.parse_args()
    hw = VTAConfig()
    lines = ["| layer | space | default cycles | best cycles | best knobs | best / default |",
             "|---|---:|---:|---:|---|---:|"]
    gains = []
    t0 = time.perf_counter()
    for shape, _ in resnet18_convs(224):  # ResNet-18's offloaded convolutions after the stem
        space = conv_space(shape, hw)
        default, *rest = search_cycles(shape, [default_conv_knobs(shape, hw), *space], hw)
        timed = dict(zip(space, rest))
        best = min(timed, key=timed.__getitem__)
        gains.append(default / timed[best])
        lines.append(f"| {layer_name(shape)} | {len(space)} | {default} | {timed[best]} | "
                     f"{best} | {gains[-1]:.2f}x |")
        print(lines[-1], flush=True)
    lines.append(f"\nmedian best / default over the layers: {statistics.median(gains):.2f}x "
                 f"({time.perf_counter() - t0:.0f} s)")
    print(lines[-1])
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"`python experiments/vta_space_ceiling.py --out {args.out}`\n\n")
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
