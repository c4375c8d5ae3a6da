"""GFLOP/s of the bf16 conv / dense kernels (bf16 operands, fp32 accumulation) vs the fp32 kernels of
the same shapes, default configs, each pair measured in the same run, best of N calls (spread =
median / best).

    PYTHONPATH=$PWD python benchmarks/bf16.py [--threads 1] [--reps 20] [--target llvm]
                                              [--model resnet-18 --image-size 224]

fp32 is shown twice for convolutions: `fp32_nchw`, the same NCHW layout and register tile as the
bf16 kernel (what bf16 changes by itself), and `fp32_nchwc`, the NCHW16c kernel the fp32 model's
`tune` pipeline uses (the fastest fp32 form). The bf16 kernel's time includes its padding stage,
which also interleaves channel pairs; the fp32 ones include theirs. With AVX512-BF16 the bf16
kernels' inner loop is `vdpbf16ps` (see `autorelay.codegen.llvm.dot`); on other hosts it is the
fp32-convert path and the figures say what that costs.

`--model`: also the whole zoo network, fp32 (`autorelay.build`'s default pipeline, Winograd where it
picks it) vs every layer bf16 (`quantize_model` with `QuantizePlan.uniform("bf16")`, as
`--precision bf16` builds it), default schedules, the two executables called alternately.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from timing import best_and_median

from autorelay.codegen import resolve_target
from autorelay.kernel import compile_kernel
from autorelay.op.bf16 import to_bf16
from autorelay.te import nn
from autorelay.te import tensor as te
from autorelay.te.nn_bf16 import conv2d_nchw_bf16, dense_bf16

CONVS = [(64, 56, 3), (128, 28, 3), (256, 14, 3), (512, 7, 3), (256, 14, 1)]  # C = O, H = W, k
DENSES = [(1, 2048, 1000), (16, 1024, 1024), (64, 512, 512)]  # M, K, N
CB = 16


def _bind(cdef, target, *arrays):
    return compile_kernel(cdef, None, target).bind(*arrays)


def conv(c: int, hw: int, k: int, target, reps: int) -> dict:
    rng = np.random.default_rng(0)
    p = k // 2
    x, w = rng.standard_normal((1, c, hw, hw)), rng.standard_normal((c, c, k, k))
    xb, wb = te.placeholder(x.shape, "uint16", name="X"), te.placeholder(w.shape, "uint16", name="W")
    bf = _bind(te.make_def([xb, wb], conv2d_nchw_bf16(xb, wb, 1, p), "b"), target, to_bf16(x), to_bf16(w))
    xf, wf = te.placeholder(x.shape, name="X"), te.placeholder(w.shape, name="W")
    f32 = _bind(te.make_def([xf, wf], nn.conv2d_nchw(xf, wf, 1, p), "f"), target,
                x.astype(np.float32), w.astype(np.float32))
    xc = te.placeholder((1, c // CB, hw, hw, CB), name="X")
    wc = te.placeholder((c // CB, c // CB, k, k, CB, CB), name="W")
    f32c = _bind(te.make_def([xc, wc], nn.conv2d_nchwc(xc, wc, 1, p), "fc"), target,
                 *(rng.standard_normal(t.shape).astype(np.float32) for t in (xc, wc)))
    flops = 2 * c * c * hw * hw * k * k
    times = {"bf16": best_and_median(bf, reps), "fp32_nchw": best_and_median(f32, reps),
             "fp32_nchwc": best_and_median(f32c, reps)}
    return {"shape": f"conv {c}x{hw}x{hw} k{k}", "flops": flops, "times": times}


def dense(m: int, k: int, n: int, target, reps: int) -> dict:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    ab, bb = te.placeholder((m, k), "uint16", name="A"), te.placeholder((n, k), "uint16", name="B")
    bf = _bind(te.make_def([ab, bb], dense_bf16(ab, bb), "b"), target, to_bf16(a), to_bf16(b))
    af, bfp = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="B")
    f32 = _bind(te.make_def([af, bfp], nn.dense(af, bfp), "f"), target, a.astype(np.float32),
                b.astype(np.float32))
    return {"shape": f"dense {m}x{k}x{n}", "flops": 2 * m * k * n,
            "times": {"bf16": best_and_median(bf, reps), "fp32": best_and_median(f32, reps)}}


def model(name: str, image_size: int, target, reps: int) -> dict:
    import autorelay
    from autorelay.frontend import zoo
    from autorelay.transform.quantize import Calibration, QuantizePlan, quantize_model

    mod, params = zoo.get(name, image_size=image_size)
    inputs = zoo.random_inputs(mod, params, seed=0)
    qmod, qparams = quantize_model(mod, params, Calibration("max", {}), QuantizePlan.uniform("bf16"))
    exes = {"fp32": autorelay.build(mod, target, params=params),
            "bf16": autorelay.build(qmod, target, params=qparams)}
    assert not exes["bf16"].report.fallbacks
    ts: dict[str, list[float]] = {k: [] for k in exes}
    for _ in range(reps + 1):  # alternate, so load from other processes hits both alike
        for k, exe in exes.items():
            t = time.perf_counter()
            exe.run(**inputs)
            ts[k].append(time.perf_counter() - t)
    best = {k: (min(v[1:]), float(np.median(v[1:]))) for k, v in ts.items()}
    err = np.abs(np.asarray(exes["bf16"].run(**inputs)) - np.asarray(exes["fp32"].run(**inputs))).max()
    return {"name": f"{name} {image_size}x{image_size}", "times": best, "err": float(err)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--model", default=None, help="also time this zoo network end to end (e.g. resnet-18)")
    ap.add_argument("--image-size", type=int, default=224)
    a = ap.parse_args()
    target = resolve_target(f"{a.target} -threads={a.threads}")
    print(f"target {target}  avx512bf16={target.has('avx512bf16')}  threads={a.threads}", flush=True)
    rows = [conv(c, hw, k, target, a.reps) for c, hw, k in CONVS]
    rows += [dense(m, k, n, target, a.reps) for m, k, n in DENSES]
    for r in rows:
        cells = [f"{name} {r['flops'] / best / 1e9:7.1f} GFLOP/s (x{med / best:.2f})"
                 for name, (best, med) in r["times"].items()]
        fp32_best = min(best for name, (best, _) in r["times"].items() if name != "bf16")
        ratio = fp32_best / r["times"]["bf16"][0]
        print(f"{r['shape']:>22}: " + "  ".join(cells) + f"  bf16/best-fp32 {ratio:.2f}", flush=True)
    if a.model:
        r = model(a.model, a.image_size, target, a.reps)
        cells = [f"{k} {best * 1e3:.2f} ms (x{med / best:.2f})" for k, (best, med) in r["times"].items()]
        speed = r["times"]["fp32"][0] / r["times"]["bf16"][0]
        print(f"{r['name']}: " + "  ".join(cells) + f"  bf16 speed-up {speed:.2f}  max |bf16 - fp32| "
              f"{r['err']:.3g}", flush=True)


if __name__ == "__main__":
    main()
