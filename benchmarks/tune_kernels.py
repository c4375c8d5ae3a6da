"""Tuning benchmark: the model-based tuner (XGBoost + annealing) vs random search on dense 1024^3
and a ResNet-18 3x3 convolution (NCHWc, 64x56x56 -> 64), measured for real.

    python benchmarks/tune_kernels.py [--trials 64] [--tuners xgb,random] [--threads 2]
                                      [--only dense,conv,resnet]

(`resnet`: each of ResNet-18's 3x3 convolutions as the built model runs them: Winograd F(2x2, 3x3)
for the stride-1 ones, direct NCHW for the stride-2 ones; GFLOP/s count the direct convolution's
multiply-adds for both.)

For each workload and tuner: a fresh tuning log, `tune_task` with the given trial budget, then the
tuned kernel, the template default and the baseline (NumPy matmul / PyTorch conv2d) re-timed
interleaved in this process (median of rounds). Prints GFLOP/s and ratios, trials, tuning wall
time, trials needed to reach 95% of the best speed found, and measurement throughput (candidates
measured per second of measurement, builds included).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

# OpenBLAS's idle worker spins on a core for ~100 ms after each numpy call; interleaved re-timing
# would charge that to whichever kernel runs next (see benchmarks/timing.py).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import limit_threads, median_times

import tuning_db
from autorelay.codegen.llvm.host import host_target
from autorelay.ir.attrs import Attrs
from autorelay.kernel import compile_kernel
from autorelay.op.winograd import conv_reference
from autorelay.target import Target
from autorelay.te import nn, winograd
from autorelay.te import tensor as te
from search.measure import Measurer, TimingSettings
from search.task import Task, kernel_task
from search.tune import tune_task
from search.tuners import make_tuner

try:
    import torch
except ImportError:
    torch = None


def dense_ref(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ w.astype(np.float64).T


def conv_nchwc_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHWc conv via NCHW im2col in float64 (independent of the compute DSL)."""
    n, cb, h, wd, icb = x.shape
    ocb_n, _, kh, kw, _, ocb = w.shape
    xn = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * icb, h, wd).astype(np.float64)
    wn = w.transpose(0, 5, 1, 4, 2, 3).reshape(ocb_n * ocb, cb * icb, kh, kw).astype(np.float64)
    xp = np.pad(xn, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    out = np.einsum("nchwij,ocij->nohw", win, wn, optimize=True)
    oc = out.shape[1]
    return out.reshape(n, oc // ocb, ocb, out.shape[2], out.shape[3]).transpose(0, 1, 3, 4, 2)


def conv_nchw_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64), optimize=True)


# ResNet-18's 3x3 convolutions (batch 1, 224 px): in channels, size, out channels, stride
RESNET18_3X3 = [(64, 56, 64, 1), (64, 56, 128, 2), (128, 28, 128, 1), (128, 28, 256, 2),
                (256, 14, 256, 1), (256, 14, 512, 2), (512, 7, 512, 1)]


def winograd_ref(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The op's NumPy Winograd (float64 inside): the kernel's input U is random, not a transform of
    a 3x3 weight, so a direct convolution cannot check it; the algorithm in NumPy can."""
    return conv_reference(Attrs({"padding": (1, 1, 1, 1)}), x.astype(np.float64), u.astype(np.float64))


def resnet_conv_tasks(target: Target) -> list[tuple[Task, Callable[[], object] | None, str]]:
    """ResNet-18's 3x3 convs with the compute and template the built model uses."""
    out = []
    for c, h, oc, s in RESNET18_3X3:
        xd = te.placeholder((1, c, h, h), name="X")
        if s == 1:
            ud = te.placeholder((16, oc, c), name="U")
            cdef = te.make_def([xd, ud], winograd.conv2d_winograd_nchw(xd, ud, 1), "conv")
            task = kernel_task(cdef, target, name=f"conv winograd {c}x{h}x{h}->{oc} k3 s1",
                               reference=winograd_ref)
            task.flops = 2.0 * oc * c * 9 * h * h  # the direct convolution's, for comparable GFLOP/s
        else:
            wd = te.placeholder((oc, c, 3, 3), name="W")
            task = kernel_task(te.make_def([xd, wd], nn.conv2d_nchw(xd, wd, s, 1), "conv"), target,
                               name=f"conv NCHW {c}x{h}x{h}->{oc} k3 s{s}",
                               reference=functools.partial(conv_nchw_ref, stride=s, pad=1))
        base = None
        if torch is not None:  # timing only: the values do not matter
            tx = torch.from_numpy(task.inputs()[0])
            tw = torch.from_numpy(np.random.default_rng(0).standard_normal((oc, c, 3, 3), dtype=np.float32))
            base = functools.partial(torch.nn.functional.conv2d, tx, tw, stride=s, padding=1)
        out.append((task, base, "torch"))
    return out


def dense_task(target: Target) -> tuple[Task, Callable[[], object] | None, str]:
    a, w = te.placeholder((1024, 1024), name="A"), te.placeholder((1024, 1024), name="W")
    task = kernel_task(te.make_def([a, w], nn.dense(a, w), "dense"), target, name="dense 1024^3",
                       reference=dense_ref)
    x, y = task.inputs()
    yt = np.ascontiguousarray(y.T)
    return task, (lambda: x @ yt), "numpy"


def conv_task(target: Target) -> tuple[Task, Callable[[], object] | None, str]:
    c, h, oc, k, s, p = 64, 56, 64, 3, 1, 1
    lanes = target.vector_lanes()
    icb, ocb = min(c, lanes), min(oc, 2 * lanes)
    xd = te.placeholder((1, c // icb, h, h, icb), name="X")
    wd = te.placeholder((oc // ocb, c // icb, k, k, icb, ocb), name="W")
    task = kernel_task(te.make_def([xd, wd], nn.conv2d_nchwc(xd, wd, s, p), "conv"), target,
                       name="conv 64x56x56->64 k3",
                       reference=functools.partial(conv_nchwc_ref, stride=s, pad=p))
    base = None
    if torch is not None:
        xc, wc = task.inputs()
        tx = torch.from_numpy(np.ascontiguousarray(xc.transpose(0, 1, 4, 2, 3).reshape(1, c, h, h)))
        tw = torch.from_numpy(np.ascontiguousarray(wc.transpose(0, 5, 1, 4, 2, 3).reshape(oc, c, k, k)))
        base = lambda: torch.nn.functional.conv2d(tx, tw, stride=s, padding=p)
    return task, base, "torch"


class TimedMeasurer(Measurer):
    """Counts candidates and seconds spent measuring them (builds + timings)."""

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.count, self.seconds = 0, 0.0

    def measure(self, task, inputs):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = super().measure(task, inputs)
        self.seconds += time.perf_counter() - t0
        self.count += len(inputs)
        return out


def bench(task: Task, baseline: Callable[[], object] | None, base_name: str, tuners: list[str], trials: int,
          batch: int) -> None:
    gf = task.flops / 1e9
    rows = []
    settings = TimingSettings(number=1, repeat=3, min_repeat_ms=40.0, warmup=1, timeout=20.0)
    for name in tuners:
        db = tuning_db.open("sqlite://")
        with TimedMeasurer(build_workers=2, settings=settings) as m:
            t0 = time.perf_counter()
            tuner = make_tuner(name, task, seed=0)
            res = tune_task(task, tuner, trials, db, m, batch=batch, top_k=3, rounds=5)
            wall = time.perf_counter() - t0
            thr = m.count / m.seconds if m.seconds else 0.0
        best = min(res.curve) if res.curve else float("inf")
        to95 = next((k for k, c in enumerate(res.curve, 1) if best / c >= 0.95), None)
        rows.append((name, res, wall, thr, to95))
        print(f"  {name:7s} trials {res.trials:4d}  tuning {wall:6.1f} s  to-95% {to95}  "
              f"measure {thr:4.2f} cand/s  search-best {gf / res.best_cost_search:7.1f} GFLOP/s  "
              f"re-measured {gf / res.best_cost:7.1f}  errors {res.errors or '-'}", flush=True)
        print(f"          best config {res.best_config.as_dict() if res.best_config else None}", flush=True)
    ins = task.inputs()
    fns = [compile_kernel(task.cdef, None, task.target).bind(*ins)]
    labels = ["default"]
    for name, res, *_ in rows:
        fns.append(compile_kernel(task.cdef, res.best_config, task.target).bind(*ins))
        labels.append(f"tuned-{name}")
    if baseline is not None:
        fns.append(baseline)
        labels.append(base_name)
    times = median_times(fns, rounds=9, min_time=0.05)
    g = {lbl: gf / t for lbl, t in zip(labels, times)}
    line = "  ".join(f"{lbl} {v:6.1f}" for lbl, v in g.items())
    print(f"  fresh interleaved re-time, GFLOP/s: {line}", flush=True)
    if baseline is not None:
        ratios = "  ".join(f"{lbl}/{base_name} {v / g[base_name]:4.2f}"
                           for lbl, v in g.items() if lbl != base_name)
        print(f"  ratios: {ratios}", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tuners", default="xgb,random")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="dense,conv")
    args = ap.parse_args(argv)
    target = host_target(threads=args.threads)
    limit_threads(args.threads)
    print(f"target {target.cpu} ({target.vector_bits}-bit vectors), {args.threads} threads, "
          f"{args.trials} trials per tuner", flush=True)
    tuners = args.tuners.split(",")
    only = args.only.split(",")
    jobs = []
    for key, make in (("dense", dense_task), ("conv", conv_task)):
        if key in only:
            jobs.append(make(target))
    if "resnet" in only:
        jobs += resnet_conv_tasks(target)
    for task, base, base_name in jobs:
        print(f"{task.name}: space {len(task.space)} configs, {task.flops / 1e9:.2f} GFLOP", flush=True)
        bench(task, base, base_name, tuners, args.trials, args.batch)


if __name__ == "__main__":
    main()
