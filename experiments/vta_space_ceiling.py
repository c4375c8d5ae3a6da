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

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.vta import VTAConfig, simulate
from autorelay.vta.conv import ConvKnobs, ConvShape, conv_program, conv_space
from autorelay.vta.tasks import default_conv_knobs

# ResNet-18's offloaded convolutions after the stem (batch 1): (C, H, O, kernel, stride)
LAYERS = [(64, 56, 64, 3, 1), (64, 56, 128, 3, 2), (128, 28, 128, 3, 1), (64, 56, 128, 1, 2),
          (128, 28, 256, 3, 2), (256, 14, 256, 3, 1), (128, 28, 256, 1, 2), (256, 14, 512, 3, 2),
          (512, 7, 512, 3, 1), (256, 14, 512, 1, 2)]


def cycles(shape: ConvShape, knobs: ConvKnobs, hw: VTAConfig, w: np.ndarray) -> int:
    x = np.zeros((1, shape.c, shape.h, shape.w), np.int8)
    prog, _ = conv_program(x, w, None, shape.stride, shape.pad, 6, -128, 127, knobs, hw)
    return simulate(prog.insns, prog.dram, hw, functional=False).cycles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the table (Markdown) here too")
    args = ap.parse_args()
    hw = VTAConfig()
    rng = np.random.default_rng(0)
    lines = ["| layer | space | default cycles | best cycles | best knobs | best / default |",
             "|---|---:|---:|---:|---|---:|"]
    gains = []
    t0 = time.perf_counter()
    for c, h, o, k, s in LAYERS:
        shape = ConvShape(c, h, h, o, k, k, s, k // 2)
        w = rng.integers(-3, 3, (o, c, k, k)).astype(np.int8)
        space = conv_space(shape, hw)
        default = cycles(shape, default_conv_knobs(shape, hw), hw, w)
        timed = {kn: cycles(shape, kn, hw, w) for kn in space}
        best = min(timed, key=timed.__getitem__)
        gains.append(default / timed[best])
        lines.append(f"| {c}x{h}x{h}->{o} k{k}s{s} | {len(space)} | {default} | {timed[best]} | "
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
