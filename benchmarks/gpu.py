"""GPU benchmark: SGEMM, a small MLP and whole zoo models through the NVPTX backend, timed with
CUDA events, each result checked (against NumPy, or the CPU build for models) before its time
counts, beside PyTorch on the same GPU (FP32: TF32 off on both sides).

    python benchmarks/gpu.py [--arch sm_90] [--sizes 1024,4096] [--sweep 12] [--repeat 50]
                             [--models resnet-18] [--batches 1,32] [--db URL] [--profile]
                             [--tune-trials 300] [--tune-sgemm-trials N]

SGEMM rows: the heuristic default of the `cuda_dense` template and the best of `--sweep` random
configs, in GFLOP/s, beside cuBLAS (`torch.matmul`). The MLP row: its kernels launched back to back
on device buffers. Model rows: `autorelay.build(..., target="cuda")` with the templates' defaults,
or the best schedules of the tuning log `--db` (what `autorelay tune --target cuda` wrote, or what
`--tune-trials` tunes first, printing the measurement throughput); device
ms per forward with the input on the device, as PyTorch eager is timed, and ms per call with the
host copies. The measurements are `reproduce.gpu_measure`'s (the same as `autorelay reproduce
gpu`). Without a GPU the script prints the driver's one-line reason ("no CUDA driver found …")
and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.driver import CudaDriverError, open_driver
from reproduce.gpu_measure import mlp, model_ms, sgemm, tune_sgemm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default=None, help="e.g. sm_90 (default: the GPU's)")
    ap.add_argument("--sizes", default="1024,4096", help="SGEMM sizes ('' for none)")
    ap.add_argument("--sweep", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--models", default="resnet-18", help="zoo models ('' for none)")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--db", default=None, help="tuning log whose best schedules the models use")
    ap.add_argument("--profile", action="store_true", help="print each model's per-kernel device times")
    ap.add_argument("--tune-trials", type=int, default=0,
                    help="first tune each model at batch 1 with XGBoost for this many measurements into --db "
                         "(default: a fresh log in a temporary folder), then time the tuned builds")
    ap.add_argument("--tune-sgemm-trials", type=int, default=0,
                    help="also tune the largest SGEMM with XGBoost for this many measurements")
    args = ap.parse_args(argv)
    try:
        drv = open_driver()
    except CudaDriverError as e:
        print(e)
        return 0
    target = resolve_target("cuda" + (f" -arch={args.arch}" if args.arch else ""))
    print(f"target: {target}")
    for n in (int(s) for s in args.sizes.split(",") if s):
        r = sgemm(target, n, args.sweep, args.repeat)
        cublas = ""
        if r["cublas_gflops"]:
            cublas = (f"  cuBLAS {r['cublas_gflops']:8.1f} GFLOP/s  "
                      f"best/cuBLAS {r['best_gflops'] / r['cublas_gflops']:.2f}")
        print(f"sgemm {n:5d}  default {r['default_gflops']:8.1f} GFLOP/s  best {r['best_gflops']:8.1f} "
              f"GFLOP/s{cublas}  ({r['best_config']})", flush=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.tune_sgemm_trials and sizes:
        t = tune_sgemm(target, max(sizes), args.tune_sgemm_trials)
        print(f"sgemm {t['n']} tuned ({t['trials']} trials, {t['seconds']:.0f} s, "
              f"{t['candidates_per_s']:.2f} candidates/s measured): best {t['best_gflops']:.1f} GFLOP/s, "
              f"default {t['default_gflops']:.1f} ({t['best_config']}; errors {t['errors'] or '-'})",
              flush=True)
    m = mlp(drv, target, args.repeat)
    torch = f"; PyTorch CUDA {m['torch_ms']:.4f} ms" if m["torch_ms"] else ""
    print(f"mlp batch {m['batch']}: {m['ms']:.4f} ms per forward ({m['kernels']} kernels){torch}", flush=True)
    models = [s for s in args.models.split(",") if s]
    db = args.db
    if args.tune_trials and models:
        db = db or f"sqlite:///{tempfile.mkdtemp(prefix='autorelay-gpu-')}/tuning.db"
        for name in models:
            tune_model_on_gpu(name, target, db, args.tune_trials)
    source = None
    if db:
        import tuning_db

        source = tuning_db.open(db).schedule_source(str(target))
    for name in models:
        for batch in (int(b) for b in args.batches.split(",")):
            r = model_ms(name, target, args.repeat, batch=batch, schedules=source, profile=args.profile)
            torch = ""
            if r["torch_ms"]:
                ratio = r["torch_ms"] / r["ms"]
                torch = f"  PyTorch eager {r['torch_ms']:.3f} ms  PyTorch/AutoRelay {ratio:.2f}x"
            print(f"{name} batch {batch}: {r['ms']:.3f} ms device ({r['call_ms']:.3f} ms per call with "
                  f"copies; {r['kernels']} kernels, {r['host_steps']} host steps; max rel err "
                  f"{r['max_rel_err']:.1e} vs {r['checked_against']}; built in {r['build_s']:.1f} s){torch}",
                  flush=True)
            if args.profile:
                print(r["report"], flush=True)
    return 0


def tune_model_on_gpu(name: str, target: object, db: str, trials: int) -> None:
    """`autorelay tune --target cuda` of one model at batch 1, with its measurement throughput."""
    from search.model_tuning import tune_model
    from search.models import load_model

    res = tune_model(load_model(name), trials=trials, db=db, target=str(target), compare=False)
    rate = res.new_trials / res.seconds if res.seconds else 0.0
    print(f"{name} tuned: {res.new_trials} new trials in {res.seconds:.0f} s ({rate:.2f} candidates/s "
          f"measured, builds and checks included)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
