"""The simulated accelerator on ResNet-18's 3x3 convolutions (batch 1, int8, requantize + relu).

Per layer: GEMM-core utilisation and cycles of the default knobs without and with virtual threads
(the default: the largest tiles whose slots fit the buffers), the best of `--search` random knob
settings of the layer's space (the "measurement" is the cycle model), the time at the clock, and
the simulator's speed. Every run is checked bit-exact against the integer reference.

    python experiments/vta_conv.py [--clock 100] [--search 16] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.vta import VTAConfig
from autorelay.vta.conv import ConvKnobs, ConvShape, conv_reference, conv_space, run_conv

# AutoTVM's names for ResNet-18's 3x3 convolutions: (H=W, in, out, stride)
LAYERS = {"C2": (56, 64, 64, 1), "C4": (56, 64, 128, 2), "C6": (28, 128, 128, 1), "C7": (28, 128, 256, 2),
          "C9": (14, 256, 256, 1), "C10": (14, 256, 512, 2), "C12": (7, 512, 512, 1)}


def default_knobs(space: list[ConvKnobs], vthreads: int) -> ConvKnobs:
    return max((k for k in space if k.vthreads == vthreads),
               key=lambda k: (k.tile_h * k.tile_w * k.tile_oc * k.tile_ic, k.tile_ic))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clock", type=float, default=100.0, help="MHz")
    ap.add_argument("--search", type=int, default=16, help="random knob settings tried per layer")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    config = VTAConfig(clock_mhz=args.clock)
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'layer':<5} {'util v1':>7} {'util v2':>7} {'cycles v1':>10} {'cycles v2':>10} {'tuned':>10} "
          f"{'v1/tuned':>8} {'ms @clk':>8} {'Minsn/s':>8} {'GMAC/s sim':>10}")
    for name, (hw, cin, cout, stride) in LAYERS.items():
        shape = ConvShape(cin, hw, hw, cout, 3, 3, stride, 1)
        x = rng.integers(-128, 128, (1, cin, hw, hw), dtype=np.int8)
        w = rng.integers(-128, 128, (cout, cin, 3, 3), dtype=np.int8)
        want = conv_reference(x, w, None, stride, 1, 10, 0, 127)
        space = conv_space(shape, config)
        tried = [default_knobs(space, 1), default_knobs(space, 2)]
        tried += random.Random(name).sample(space, min(args.search, len(space)))
        results, t0, insns = [], time.perf_counter(), 0
        for knobs in tried:
            got, res = run_conv(x, w, None, stride, 1, 10, 0, 127, knobs, config)
            assert np.array_equal(got, want), (name, knobs)
            results.append(res)
            insns += res.instructions
        wall = time.perf_counter() - t0
        macs = shape.oh * shape.ow * cout * cin * 9 * len(tried)
        r1, r2, best = results[0], results[1], min(results, key=lambda r: r.cycles)
        row = {"layer": name, "util_v1": r1.utilization, "util_v2": r2.utilization, "cycles_v1": r1.cycles,
               "cycles_v2": r2.cycles, "cycles_tuned": best.cycles, "ms_tuned": best.seconds * 1e3,
               "insn_per_s": insns / wall, "macs_per_s": macs / wall}
        rows.append(row)
        print(f"{name:<5} {r1.utilization:>7.2f} {r2.utilization:>7.2f} {r1.cycles:>10} {r2.cycles:>10} "
              f"{best.cycles:>10} {r1.cycles / best.cycles:>7.2f}x {best.seconds * 1e3:>8.2f} "
              f"{insns / wall / 1e6:>8.3f} {macs / wall / 1e9:>10.2f}", flush=True)
    total = {k: sum(r[k] for r in rows) for k in ("cycles_v1", "cycles_v2", "cycles_tuned")}
    useful = sum(r["util_v1"] * r["cycles_v1"] for r in rows)
    print(f"all   {useful / total['cycles_v1']:>7.2f} {useful / total['cycles_v2']:>7.2f} "
          f"{total['cycles_v1']:>10} {total['cycles_v2']:>10} {total['cycles_tuned']:>10} "
          f"{total['cycles_v1'] / total['cycles_tuned']:>7.2f}x; median layer v1/tuned "
          f"{statistics.median(r['cycles_v1'] / r['cycles_tuned'] for r in rows):.2f}x")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
