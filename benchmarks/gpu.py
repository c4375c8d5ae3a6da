"""GPU benchmark: SGEMM and a small model (a 3-layer MLP with softmax) through the NVPTX backend,
timed with CUDA events, each result checked against NumPy before its time counts.

    python benchmarks/gpu.py [--arch sm_90] [--sizes 512,1024,2048] [--sweep 12] [--repeat 50]

SGEMM rows: the heuristic default of the `cuda_dense` template and the best of `--sweep` random
configs, in GFLOP/s, plus PyTorch's cuBLAS when torch with CUDA is installed. The model row: the
MLP's kernels launched back to back on device buffers (no host copies between layers), in ms per
forward, and PyTorch CUDA's. The measurements are `reproduce.gpu_measure`'s (the same as
`autorelay reproduce gpu`). Without a GPU the script prints the driver's one-line reason
("no CUDA driver found …") and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.driver import CudaDriverError, open_driver
from reproduce.gpu_measure import mlp, sgemm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default=None, help="e.g. sm_90 (default: the GPU's)")
    ap.add_argument("--sizes", default="512,1024,2048")
    ap.add_argument("--sweep", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    try:
        drv = open_driver()
    except CudaDriverError as e:
        print(e)
        return 0
    target = resolve_target("cuda" + (f" -arch={args.arch}" if args.arch else ""))
    print(f"target: {target}")
    for n in (int(s) for s in args.sizes.split(",")):
        r = sgemm(target, n, args.sweep, args.repeat)
        cublas = f"  cuBLAS {r['cublas_gflops']:8.1f} GFLOP/s" if r["cublas_gflops"] else ""
        print(f"sgemm {n:5d}  default {r['default_gflops']:8.1f} GFLOP/s  best {r['best_gflops']:8.1f} "
              f"GFLOP/s{cublas}  ({r['best_config']})")
    m = mlp(drv, target, args.repeat)
    torch = f"; PyTorch CUDA {m['torch_ms']:.4f} ms" if m["torch_ms"] else ""
    print(f"mlp batch {m['batch']}: {m['ms']:.4f} ms per forward ({m['kernels']} kernels){torch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
