"""GOP/s of int8 NCHWc convolutions (ResNet-18 layers, batch 1) vs the fp32 NCHWc kernel, default
configs, same process, best of N calls (spread = median / best).

    PYTHONPATH=$PWD python benchmarks/int8.py [--threads 1 2] [--reps 20]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import best_and_median

from autorelay.codegen import resolve_target
from autorelay.kernel import compile_kernel
from autorelay.te import nn
from autorelay.te import tensor as te
from autorelay.te.nn_int8 import conv2d_nchwc_int8

LAYERS = [(64, 56, 3), (128, 28, 3), (256, 14, 3), (512, 7, 3), (128, 28, 1), (256, 14, 1)]
CB = 16


def run(c: int, hw: int, k: int, threads: int, reps: int) -> dict:
    target = resolve_target(f"llvm -threads={threads}")
    p = k // 2
    rng = np.random.default_rng(0)
    ops = 2 * c * c * hw * hw * k * k
    xq = te.placeholder((1, c // CB, hw, hw, CB), "uint8", name="X")
    wq = te.placeholder((c // CB, c // CB, k, k, CB // 4, CB, 4), "int8", name="W")
    kq = compile_kernel(te.make_def([xq, wq], conv2d_nchwc_int8(xq, wq, 1, p), "q"), None, target)
    bq = kq.bind(rng.integers(0, 256, xq.shape).astype(np.uint8),
                 rng.integers(-128, 128, wq.shape).astype(np.int8))
    xf = te.placeholder((1, c // CB, hw, hw, CB), name="X")
    wf = te.placeholder((c // CB, c // CB, k, k, CB, CB), name="W")
    kf = compile_kernel(te.make_def([xf, wf], nn.conv2d_nchwc(xf, wf, 1, p), "f"), None, target)
    bf = kf.bind(rng.standard_normal(xf.shape).astype(np.float32),
                 rng.standard_normal(wf.shape).astype(np.float32))
    q, f = best_and_median(bq, reps), best_and_median(bf, reps)
    return {"layer": f"{c}x{hw}x{hw} k{k}", "threads": threads, "int8_gops": ops / q[0] / 1e9,
            "int8_spread": q[1] / q[0], "fp32_gops": ops / f[0] / 1e9, "fp32_spread": f[1] / f[0],
            "speedup": f[0] / q[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    for th in a.threads:
        for c, hw, k in LAYERS:
            r = run(c, hw, k, th, a.reps)
            print(f"{r['layer']:>16} t{th}: int8 {r['int8_gops']:7.1f} GOP/s (x{r['int8_spread']:.2f})  "
                  f"fp32 {r['fp32_gops']:7.1f} GOP/s (x{r['fp32_spread']:.2f})  int8/fp32 {r['speedup']:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
