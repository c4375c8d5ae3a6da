"""Kernel benchmarks: GFLOP/s of the default config, of the best config of a sweep, and of
NumPy / PyTorch for the same op, timed in the same process, interleaved, median of repeats.

    python benchmarks/kernels.py [--threads 2] [--sweep 24]
        [--only dense,matmul,bmm,conv,depthwise,winograd,pointwise,pool]
        [--clock cpu]

The machine is shared and noisy, so read the ratio columns: each ratio compares timings taken
alternately within one run. Weight packing (Pack steps) happens once at bind time, as it does
for constant weights in a built model; the NCHWc rows take NCHWc data (the layout a model keeps
between layers after convert_layout), the NCHW rows take plain NCHW data.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

# OpenBLAS keeps a worker thread spinning on a core for ~100 ms after every call. Interleaved with
# our kernels, that spinner steals one of the two cores from whoever runs next, so our 2-thread
# timings would measure numpy's idle thread, not our code. A short spin limit does not slow numpy
# itself (measured: 185 GFLOP/s with it, 165-181 without) — it only stops it from taxing the others.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
# PyTorch's OpenMP workers spin the same way after each call unless told to sleep.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import limit_threads, median_times

from autorelay.codegen.llvm.host import host_target
from autorelay.errors import ScheduleError
from autorelay.kernel import compile_kernel
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te import nn, nn_depthwise
from autorelay.te import tensor as te

try:
    import torch
except ImportError:  # the torch column is optional
    torch = None


CLOCK = time.perf_counter  # --clock cpu: process CPU time, robust to other processes (1 thread only)


def sweep(cdef, target: Target, n: int, arrays: list[np.ndarray], seed: int = 0):
    """Best (seconds, config) among the default and n sampled configs (quick timing)."""
    tmpl = template_for(cdef)
    space = tmpl.space(cdef, target)
    rng = random.Random(seed)
    default = tmpl.default(cdef, target)
    cands = [default]
    idx = list(range(space.size))
    rng.shuffle(idx)
    cands += [space.get(i) for i in idx[:n] if space.get(i) != default]
    best = None
    for cfg in cands:
        try:
            bound = compile_kernel(cdef, cfg, target).bind(*arrays)
        except ScheduleError:
            continue
        t = median_times([bound], 3, 0.01, CLOCK)[0]
        if best is None or t < best[0]:
            best = (t, cfg)
    return best


def row(name: str, flops: float, cdef, arrays, baselines: dict[str, Callable], target: Target, n_sweep: int):
    tmpl = template_for(cdef)
    default_k = compile_kernel(cdef, None, target).bind(*arrays)
    _best_t, best_cfg = sweep(cdef, target, n_sweep, arrays) if n_sweep else (None, None)
    best_k = compile_kernel(cdef, best_cfg, target).bind(*arrays) if best_cfg is not None else default_k
    fns = [default_k, best_k, *baselines.values()]
    times = median_times(fns, 7, clock=CLOCK)
    g = [flops / t / 1e9 for t in times]
    g[1] = max(g[0], g[1])  # the default is one of the swept configs: the better of the two timed here
    cols = {"default": g[0], "best": g[1]}
    cols.update({k: v for k, v in zip(baselines, g[2:])})
    base = "  ".join(f"{k} {v:7.1f}" for k, v in cols.items() if k not in ("default", "best"))
    ratios = "  ".join(
        f"default/{k} {g[0] / cols[k]:4.2f}  best/{k} {g[1] / cols[k]:4.2f}" for k in baselines
    )
    print(f"{name:34s} default {g[0]:7.1f}  best {g[1]:7.1f}  {base}   {ratios}   [{tmpl.name}]", flush=True)
    if best_cfg is not None:
        print(f"{'':34s} best config: {best_cfg.as_dict()}", flush=True)


def bench_dense(target: Target, n_sweep: int, sizes=((1024, 1024, 1024),)) -> None:
    for m, n, k in sizes:
        a = te.placeholder((m, k), name="A")
        w = te.placeholder((n, k), name="W")
        cdef = te.make_def([a, w], nn.dense(a, w), "dense")
        x = np.random.rand(m, k).astype(np.float32)
        y = np.random.rand(n, k).astype(np.float32)
        yt = np.ascontiguousarray(y.T)
        base = {"numpy": lambda x=x, yt=yt: x @ yt}
        if torch is not None:
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            base["torch"] = lambda tx=tx, ty=ty: torch.nn.functional.linear(tx, ty)
        row(f"dense {m}x{n}x{k}", 2.0 * m * n * k, cdef, [x, y], base, target, n_sweep)


def bench_matmul(target: Target, n_sweep: int, size: int = 1024) -> None:
    """`nn.matmul` in each transpose form (a constant weight takes the dense row's form instead,
    by MatmulToDense). NN and TN read B [K, N] as it is; TT's B [N, K] is packed at bind time like
    every weight here (in a model, an activation B is re-laid out per call by a relayout kernel)."""
    m = n = k = size
    for ta, tb in ((False, False), (True, False), (True, True)):
        a = te.placeholder((k, m) if ta else (m, k), name="A")
        b = te.placeholder((n, k) if tb else (k, n), name="B")
        cdef = te.make_def([a, b], nn.matmul(a, b, ta, tb), "matmul")
        x = np.random.rand(*a.shape).astype(np.float32)
        y = np.random.rand(*b.shape).astype(np.float32)
        base = {"numpy": lambda x=x, y=y, ta=ta, tb=tb: (x.T if ta else x) @ (y.T if tb else y)}
        form = f"{'T' if ta else 'N'}{'T' if tb else 'N'}"
        row(f"matmul {form} {m}x{n}x{k}", 2.0 * m * n * k, cdef, [x, y], base, target, n_sweep)


def bench_bmm(target: Target, n_sweep: int) -> None:
    b, m, n, k = 16, 128, 128, 256
    a = te.placeholder((b, m, k), name="A")
    w = te.placeholder((b, n, k), name="B")
    cdef = te.make_def([a, w], nn.batch_matmul(a, w), "bmm")
    x = np.random.rand(b, m, k).astype(np.float32)
    y = np.random.rand(b, n, k).astype(np.float32)
    yt = np.ascontiguousarray(y.transpose(0, 2, 1))
    base = {"numpy": lambda: np.matmul(x, yt)}
    if torch is not None:
        tx, ty = torch.from_numpy(x), torch.from_numpy(yt)
        base["torch"] = lambda: torch.bmm(tx, ty)
    row(f"batch_matmul {b}x{m}x{n}x{k}", 2.0 * b * m * n * k, cdef, [x, y], base, target, n_sweep)


RESNET = [  # (C, H, OC, K, stride, pad) of ResNet-18's convolutions after the stem
    (64, 56, 64, 3, 1, 1),
    (128, 28, 128, 3, 1, 1),
    (256, 14, 256, 3, 1, 1),
    (512, 7, 512, 3, 1, 1),
    (64, 56, 128, 3, 2, 1),
    (64, 56, 128, 1, 2, 0),
    (128, 28, 256, 3, 2, 1),
    (256, 14, 512, 3, 2, 1),
]


def _torch_conv(x: np.ndarray, w: np.ndarray, s: int, p: int, groups: int = 1):
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    return lambda: torch.nn.functional.conv2d(tx, tw, stride=s, padding=p, groups=groups)


def _torch_pool(kind: str, x: np.ndarray, k: int, s: int, p: int):
    tx = torch.from_numpy(x)
    pool = torch.nn.functional.max_pool2d if kind == "max" else torch.nn.functional.avg_pool2d
    return lambda: pool(tx, k, s, p)


def _direct_and_torch(xd, wd, x: np.ndarray, w: np.ndarray, pad: int, target: Target) -> dict[str, Callable]:
    """Baselines of a stride-1 NCHW conv computed another way: the direct NCHW kernel under its
    default schedule, and PyTorch's conv2d when installed."""
    direct = compile_kernel(te.make_def([xd, wd], nn.conv2d_nchw(xd, wd, 1, pad), "conv"), None, target)
    base: dict[str, Callable] = {"direct": direct.bind(x, w)}
    if torch is not None:
        base["torch"] = _torch_conv(x, w, 1, pad)
    return base


def _blocked(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW data as NCHW{b}c."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _blocked_weight(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """OIHW weights as OIHW{ib}i{ob}o (depthwise: ib = 1)."""
    oc, ic, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(oc // ob, ob, ic // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def _blocked_def(declare: Callable, stride: int, pad: int, x: np.ndarray, w: np.ndarray,
                 blocks: tuple[int, int, int]) -> tuple[te.ComputeDef, list[np.ndarray]]:
    """`declare(X, W, stride, pad)` on NCHW{b}c data and OIHW{ib}i{ob}o weights (`blocks` = (b, ib,
    ob)), with `x` and `w` (NCHW, OIHW) packed to match."""
    b, ib, ob = blocks
    arrays = [_blocked(x, b), _blocked_weight(w, ib, ob)]
    xd, wd = te.placeholder(arrays[0].shape, name="X"), te.placeholder(arrays[1].shape, name="W")
    return te.make_def([xd, wd], declare(xd, wd, stride, pad), "blocked"), arrays


def bench_conv(target: Target, n_sweep: int, layouts=("nchwc", "nchw")) -> None:
    for c, h, oc, k, s, p in RESNET:
        oh = (h + 2 * p - k) // s + 1
        flops = 2.0 * oc * oh * oh * c * k * k
        x = np.random.rand(1, c, h, h).astype(np.float32)
        w = np.random.rand(oc, c, k, k).astype(np.float32)
        base = {"torch": _torch_conv(x, w, s, p)} if torch is not None else {}
        label = f"{c}x{h}x{h}->{oc} k{k} s{s}"
        if "nchwc" in layouts:
            lanes = target.vector_lanes()
            icb, ocb = min(c, lanes), min(oc, 2 * lanes)
            cdef, arrays = _blocked_def(nn.conv2d_nchwc, s, p, x, w, (icb, icb, ocb))
            row(f"conv NCHWc {label}", flops, cdef, arrays, base, target, n_sweep)
        if "nchw" in layouts:
            xd = te.placeholder((1, c, h, h), name="X")
            wd = te.placeholder((oc, c, k, k), name="W")
            cdef = te.make_def([xd, wd], nn.conv2d_nchw(xd, wd, s, p), "conv")
            row(f"conv NCHW  {label}", flops, cdef, [x, w], base, target, n_sweep)


VGG_3X3 = [(64, 224), (128, 112), (256, 56), (512, 28), (512, 14)]  # (C = OC, H) of VGG-16's 3x3 convs


def bench_winograd(target: Target, n_sweep: int) -> None:
    """Stride-1 3x3 convolutions by Winograd F(2x2, 3x3), next to the direct NCHW kernel's default
    schedule and PyTorch; GFLOP/s count the direct convolution's multiply-adds (effective rate)."""
    from autorelay.te import winograd

    shapes = [(c, h) for c, h, oc, k, s, _ in RESNET if k == 3 and s == 1 and c == oc] + VGG_3X3
    for c, h in shapes:
        flops = 2.0 * c * c * h * h * 9
        x = np.random.rand(1, c, h, h).astype(np.float32)
        w = (np.random.rand(c, c, 3, 3).astype(np.float32) - 0.5) / c
        xd, wd = te.placeholder((1, c, h, h), name="X"), te.placeholder((c, c, 3, 3), name="W")
        base = _direct_and_torch(xd, wd, x, w, 1, target)
        ud = te.placeholder((16, c, c), name="U")
        cdef = te.make_def([xd, ud], winograd.conv2d_winograd_nchw(xd, ud, 1), "winograd")
        u = winograd.weight_transform_np(w)
        arrays = [{"X": x, "U": u}[t.name] for t in cdef.inputs]
        row(f"winograd {c}x{h}x{h}", flops, cdef, arrays, base, target, n_sweep)


MOBILENET_DW = [  # (C, H, stride) of MobileNet-v2's depthwise convolutions
    (32, 112, 1),
    (96, 112, 2),
    (144, 56, 1),
    (144, 56, 2),
    (192, 28, 1),
    (384, 14, 1),
    (576, 14, 2),
    (960, 7, 1),
]


def bench_depthwise(target: Target, n_sweep: int) -> None:
    """Depthwise 3x3 convolutions: the NCHW8c template (one vector per tap) next to the NCHW
    template's default schedule and PyTorch (NCHW); the NCHW template's own row follows."""
    lanes = target.vector_lanes()
    for c, h, s in MOBILENET_DW:
        oh = (h + 2 - 3) // s + 1
        flops = 2.0 * c * oh * oh * 9
        x = np.random.rand(1, c, h, h).astype(np.float32)
        w = np.random.rand(c, 1, 3, 3).astype(np.float32)
        xd, wd = te.placeholder((1, c, h, h), name="X"), te.placeholder((c, 1, 3, 3), name="W")
        cdef = te.make_def([xd, wd], nn_depthwise.depthwise_conv2d_nchw(xd, wd, s, 1), "dw")
        base = {"nchw": compile_kernel(cdef, None, target).bind(x, w)}
        if torch is not None:
            base["torch"] = _torch_conv(x, w, s, 1, groups=c)
        blocked, arrays = _blocked_def(nn_depthwise.depthwise_conv2d_nchwc, s, 1, x, w, (lanes, 1, lanes))
        row(f"depthwise NCHW8c {c}x{h}x{h} s{s}", flops, blocked, arrays, base, target, n_sweep)
        row(f"depthwise NCHW   {c}x{h}x{h} s{s}", flops, cdef, [x, w], base, target, n_sweep)


MOBILENET_1X1 = [  # (C, OC, H) of MobileNet-v2's pointwise convolutions, expand and project
    (16, 96, 112),
    (24, 144, 56),
    (144, 24, 56),
    (32, 192, 28),
    (64, 384, 14),
    (384, 64, 14),
    (960, 160, 7),
    (320, 1280, 7),
]


def bench_pointwise(target: Target, n_sweep: int) -> None:
    """1x1 convolutions: on NCHW data the pointwise GEMM template, on NCHW8c data the direct
    NCHWc template (register tiles over several output blocks), each next to the direct NCHW
    kernel's default schedule and PyTorch."""
    lanes = target.vector_lanes()
    for c, oc, h in MOBILENET_1X1:
        x = np.random.rand(1, c, h, h).astype(np.float32)
        w = np.random.rand(oc, c, 1, 1).astype(np.float32)
        xd, wd = te.placeholder((1, c, h, h), name="X"), te.placeholder((oc, c, 1, 1), name="W")
        base = _direct_and_torch(xd, wd, x, w, 0, target)
        flops = 2.0 * c * oc * h * h
        cdef = te.make_def([xd, wd], nn.conv2d_1x1_nchw(xd, wd), "pointwise")
        row(f"pointwise NCHW   {c}->{oc} {h}x{h}", flops, cdef, [x, w], base, target, n_sweep)
        blocked, arrays = _blocked_def(nn.conv2d_nchwc, 1, 0, x, w, (lanes, lanes, lanes))
        row(f"pointwise NCHW8c {c}->{oc} {h}x{h}", flops, blocked, arrays, base, target, n_sweep)


POOLS = [  # (kind, C, H, window, stride, padding): Inception's pool branch, ResNet's stem, VGG's
    ("max", 64, 32, 3, 1, 1),
    ("max", 64, 112, 3, 2, 1),
    ("max", 64, 224, 2, 2, 0),
    ("max", 512, 28, 2, 2, 0),
    ("avg", 256, 28, 3, 1, 1),
]


def _pool_def(kind: str, c: int, h: int, k: int, s: int, p: int, block: int) -> te.ComputeDef:
    """The pooling op's own compute on NCHW{block}c data."""
    from autorelay.ir.types import TensorType
    from autorelay.op.check import infer_op_type
    from autorelay.op.pool_compute import pool_compute
    from autorelay.op.registry import get

    name, shape = f"nn.{kind}_pool2d", (1, c // block, h, h, block)
    attrs = dict(pool_size=k, strides=s, padding=p, layout=f"NCHW{block}c")
    out_type = infer_op_type(name, [TensorType(shape)], **attrs)
    x = te.placeholder(shape, name="X")
    return te.make_def([x], pool_compute(kind == "avg")([x], get(name).make_attrs(attrs), out_type), "pool")


def bench_pool(target: Target, n_sweep: int) -> None:
    """Windowed pooling of NCHW8c data: `pool2d_nchwc` next to the generic reduction template's
    default schedule (which scheduled these kernels before) and PyTorch's pooling of NCHW data."""
    from autorelay.schedule.templates.base import templates

    generic = templates()["reduction"]
    for kind, c, h, k, s, p in POOLS:
        x = np.random.rand(1, c, h, h).astype(np.float32)
        cdef = _pool_def(kind, c, h, k, s, p, 8)
        arrays = [_blocked(x, 8)]
        steps = generic.steps(cdef, generic.default(cdef, target), target)
        base: dict[str, Callable] = {"generic": compile_kernel(cdef, steps, target).bind(*arrays)}
        if torch is not None:
            base["torch"] = _torch_pool(kind, x, k, s, p)
        oh = (h + 2 * p - k) // s + 1
        row(f"{kind}pool NCHW8c {c}x{h}x{h} k{k} s{s}", float(c * oh * oh * k * k), cdef, arrays, base,
            target, n_sweep)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sweep", type=int, default=24, help="configs sampled per workload besides the default")
    ap.add_argument("--only", default="dense,matmul,bmm,conv,depthwise,winograd,pointwise,pool")
    ap.add_argument("--layouts", default="nchwc,nchw")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time, which other processes on a shared machine do not inflate "
        "(meaningful with --threads 1 only)",
    )
    args = ap.parse_args(argv)
    global CLOCK
    if args.clock == "cpu":
        if args.threads != 1:
            ap.error("--clock cpu needs --threads 1 (spinning library threads would count as work)")
        CLOCK = time.process_time
    target = host_target(threads=args.threads)
    limit_threads(args.threads)
    print(
        f"target {target.cpu} ({target.vector_bits}-bit vectors), {args.threads} threads; "
        f"torch {'present' if torch is not None else 'missing (column skipped)'}",
        flush=True,
    )
    only = set(args.only.split(","))
    if "dense" in only:
        bench_dense(target, args.sweep)
    if "matmul" in only:
        bench_matmul(target, args.sweep)
    if "bmm" in only:
        bench_bmm(target, args.sweep)
    if "conv" in only:
        bench_conv(target, args.sweep, tuple(args.layouts.split(",")))
    if "depthwise" in only:
        bench_depthwise(target, args.sweep)
    if "winograd" in only:
        bench_winograd(target, args.sweep)
    if "pointwise" in only:
        bench_pointwise(target, args.sweep)
    if "pool" in only:
        bench_pool(target, args.sweep)


if __name__ == "__main__":
    main()
