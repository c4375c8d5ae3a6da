"""The simulated accelerator on ResNet-18's offloaded convolutions (batch 1, int8, requantize + relu).

Per layer: cycles and GEMM-core utilisation of the default knobs (one thread), the largest
two-thread knobs and that tile on one thread (`reproduce.vta_measure.measure_layer`, each run
checked bit-exact against the integer reference), plus the best of `--search` random knob settings
of the layer's space (cycle model alone). The experiment `autorelay reproduce vta` measures the
same layers into the tuning log; this script prints them with the random search beside.

    python experiments/vta_conv.py [--image 224] [--clock 100] [--search 16] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.vta import VTAConfig
from autorelay.vta.conv import conv_space
from reproduce.vta_measure import layer_name, measure_layer, resnet18_convs, search_cycles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", type=int, default=224, help="ResNet-18 input side")
    ap.add_argument("--clock", type=float, default=100.0, help="MHz")
    ap.add_argument("--search", type=int, default=16, help="random knob settings tried per layer")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    config = VTAConfig(clock_mhz=args.clock)
    rows = []
    print(f"{'layer':<22} {'util v1':>7} {'util v2':>7} {'cycles v1':>10} {'cycles v2':>10} "
          f"{'v1 same tile':>12} {'searched':>10} {'v1/searched':>11}")
    for shape, _ in resnet18_convs(args.image):
        row = measure_layer(shape, config)
        sample = random.Random(layer_name(shape)).sample(conv_space(shape, config),
                                                         min(args.search, row["space"]))
        row["cycles_searched"] = min([row["v1_cycles"], *search_cycles(shape, sample, config)])
        rows.append(row)
        print(f"{row['layer']:<22} {row['v1_util']:>7.2f} {row.get('v2_util', 0):>7.2f} "
              f"{row['v1_cycles']:>10} {row.get('v2_cycles', '-'):>10} {row.get('v1_same_cycles', '-'):>12} "
              f"{row['cycles_searched']:>10} {row['v1_cycles'] / row['cycles_searched']:>10.2f}x", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
