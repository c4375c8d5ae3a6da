"""The simulated accelerator on ResNet-18's 3x3 convolutions, as GEMMs in im2col form.

For each layer (batch 1; M = output pixels, K = 9 x input channels, N = output channels) this
simulates the int8 GEMM + requantize program (`autorelay.vta.programs`) under the default knobs
with and without virtual threads, and under the best knobs of the layer's space (searched by
simulated cycles: here the "measurement" is the cycle model), and prints GEMM-core utilisation,
cycles, the time at the configured clock, and the simulator's speed. Every run is checked
bit-exact against the integer reference.

    python experiments/vta_gemm.py [--layers 4] [--clock 100] [--search 24]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.vta import VTAConfig
from autorelay.vta.programs import DenseKnobs, dense_reference, dense_space, run_dense

# (name, output H=W, in channels, out channels) of ResNet-18's stride-1 3x3 convolutions
LAYERS = [("C2", 56, 64, 64), ("C6", 28, 128, 128), ("C9", 14, 256, 256), ("C12", 7, 512, 512)]


def default_knobs(m: int, n: int, k: int, config: VTAConfig, vthreads: int) -> DenseKnobs:
    """A plain heuristic: the largest power-of-two tiles whose v slots fit every buffer."""
    best = max((kn for kn in dense_space(m, n, k, config) if kn.vthreads == vthreads),
               key=lambda kn: (kn.tile_m * kn.tile_n * kn.tile_k, kn.tile_k))
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=len(LAYERS))
    p.add_argument("--clock", type=float, default=100.0, help="MHz")
    p.add_argument("--search", type=int, default=24, help="knob settings tried per layer (random)")
    args = p.parse_args()
    config = VTAConfig(clock_mhz=args.clock)
    rng = np.random.default_rng(0)
    print(f"{'layer':<5} {'M x K x N':>16} {'util v1':>8} {'util v2':>8} {'cycles v1':>10} "
          f"{'cycles v2':>10} {'tuned':>10} {'tuned/v1':>8} {'ms @clk':>8} {'insn/s':>8}")
    for name, hw, cin, cout in LAYERS[: args.layers]:
        m, k, n = hw * hw, 9 * cin, cout
        x = rng.integers(-128, 128, (m, k), dtype=np.int8)
        w = rng.integers(-128, 128, (n, k), dtype=np.int8)
        want = dense_reference(x, w, None, 10, 0, 127)
        results = {}
        t0, insns = time.perf_counter(), 0
        for v in (1, 2):
            got, res = run_dense(x, w, None, 10, 0, 127, default_knobs(m, n, k, config, v), config)
            assert np.array_equal(got, want), (name, v)
            results[v], insns = res, insns + res.instructions
        space = dense_space(m, n, k, config)
        best = results[2]
        for kn in random.Random(name).sample(space, min(args.search, len(space))):
            got, res = run_dense(x, w, None, 10, 0, 127, kn, config)
            assert np.array_equal(got, want), (name, kn)
            insns += res.instructions
            best = min(best, res, key=lambda r: r.cycles)
        rate = insns / (time.perf_counter() - t0)
        r1, r2 = results[1], results[2]
        print(f"{name:<5} {f'{m}x{k}x{n}':>16} {r1.utilization:>8.2f} {r2.utilization:>8.2f} "
              f"{r1.cycles:>10} {r2.cycles:>10} {best.cycles:>10} {r1.cycles / best.cycles:>7.2f}x "
              f"{best.seconds * 1e3:>8.2f} {rate:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
