"""GPU benchmark: SGEMM and a small model (a 3-layer MLP with softmax) through the NVPTX backend,
timed with CUDA events, each result checked against NumPy before its time counts.

    python benchmarks/gpu.py [--arch sm_90] [--sizes 512,1024,2048] [--sweep 12] [--repeat 50]

SGEMM rows: the heuristic default of the `cuda_dense` template and the best of `--sweep` random
configs, in GFLOP/s, plus PyTorch's cuBLAS when torch with CUDA is installed. The model row: the
MLP's kernels launched back to back on device buffers (no host copies between layers), in ms per
forward. Without a GPU the script prints the driver's one-line reason ("no CUDA driver found …")
and exits 0.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorelay.codegen import resolve_target
from autorelay.codegen.nvptx.driver import CudaDriverError, Driver, open_driver
from autorelay.codegen.nvptx.runtime import GPUModule
from autorelay.errors import ScheduleError
from autorelay.kernel import KernelCode, emit_kernel, load_kernel
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te import nn
from autorelay.te import tensor as te


def _buffers(drv: Driver, code: KernelCode, arrays: list[np.ndarray]) -> tuple[list[int], list[np.ndarray]]:
    """Device buffers for every parameter and workspace (inputs copied in), and host outputs."""
    bufs = list(code.func.params) + list(code.func.workspaces)
    host = list(arrays) + [np.zeros(b.shape, b.dtype) for b in bufs[len(arrays):]]
    ptrs = [drv.alloc(h.nbytes) for h in host]
    for p, h in zip(ptrs, host):
        drv.to_device(p, h.ctypes.data, h.nbytes)
    return ptrs, host


def time_kernel(drv: Driver, code: KernelCode, arrays: list[np.ndarray], ref: np.ndarray,
                repeat: int) -> float:
    """ms per launch of `code` on `arrays`, after checking its output against `ref`."""
    module: GPUModule = load_kernel(code).module
    ptrs, host = _buffers(drv, code, arrays)
    try:
        module.launch_all(ptrs)
        drv.synchronize()
        out = host[len(arrays)]
        drv.to_host(out.ctypes.data, ptrs[len(arrays)], out.nbytes)
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
        return drv.time_ms(lambda: module.launch_all(ptrs), repeat)
    finally:
        for p in ptrs:
            drv.free(p)


def sgemm(drv: Driver, target: Target, n: int, sweep: int, repeat: int) -> None:
    a, w = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="W")
    cdef = te.make_def([a, w], nn.dense(a, w, name="C"))
    rng = np.random.default_rng(0)
    A, W = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    ref = A @ W.T
    gflop = 2 * n**3 / 1e9
    tmpl = template_for(cdef, target=target)
    ms = time_kernel(drv, emit_kernel(cdef, None, target), [A, W], ref, repeat)
    best, best_cfg, space, r = ms, "default", tmpl.space(cdef, target), random.Random(0)
    for _ in range(sweep):
        cfg = space.sample(r)
        try:
            code = emit_kernel(cdef, cfg, target)
        except ScheduleError:
            continue
        t = time_kernel(drv, code, [A, W], ref, repeat)
        if t < best:
            best, best_cfg = t, str(cfg.as_dict())
    line = f"sgemm {n:5d}  default {gflop / ms * 1e3:8.1f} GFLOP/s  best {gflop / best * 1e3:8.1f} GFLOP/s"
    try:
        import torch

        if torch.cuda.is_available():
            ta, tw = torch.from_numpy(A).cuda(), torch.from_numpy(W).cuda()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ta @ tw.T
            start.record()
            for _ in range(repeat):
                ta @ tw.T
            stop.record()
            torch.cuda.synchronize()
            line += f"  cuBLAS {gflop / (start.elapsed_time(stop) / repeat) * 1e3:8.1f} GFLOP/s"
    except ImportError:
        pass
    print(f"{line}  ({best_cfg})")


def mlp(drv: Driver, target: Target, repeat: int, batch: int = 64) -> None:
    """784 -> 512 (relu) -> 256 (relu) -> 10 (softmax): four kernels on device buffers."""
    rng = np.random.default_rng(1)
    dims = [784, 512, 256, 10]
    ws = [(rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32) for i, o in itertools.pairwise(dims)]
    bs = [rng.standard_normal((o,), np.float32) * 0.1 for o in dims[1:]]
    x = rng.standard_normal((batch, dims[0]), np.float32)
    layers = []
    for k, (w, b) in enumerate(zip(ws, bs)):
        xi, wi, bi = (te.placeholder(s, name=n) for n, s in (("X", (batch, w.shape[1])), ("W", w.shape),
                                                              ("B", b.shape)))
        d = nn.dense(xi, wi, bi, name=f"fc{k}")
        out = d if k == len(ws) - 1 else nn.relu(d)
        layers.append(emit_kernel(te.make_def([xi, wi, bi], out), None, target))
    sm_in = te.placeholder((batch, dims[-1]), name="X")
    layers.append(emit_kernel(te.make_def([sm_in], nn.softmax(sm_in)), None, target))
    mods = [load_kernel(code).module for code in layers]
    # device buffers: activations shared between consecutive layers
    acts = [drv.alloc(batch * d * 4) for d in dims] + [drv.alloc(batch * dims[-1] * 4)]
    params = []
    for arr in [*ws, *bs, x]:
        p = drv.alloc(arr.nbytes)
        drv.to_device(p, arr.ctypes.data, arr.nbytes)
        params.append(p)
    wp, bp, xp = params[:3], params[3:6], params[6]
    calls = [[xp if k == 0 else acts[k], wp[k], bp[k], acts[k + 1]] for k in range(3)]
    calls.append([acts[3], acts[4]])
    for code, ptrs in zip(layers, calls):  # workspaces (softmax's row statistics)
        ptrs += [drv.alloc(max(1, int(np.prod(b.shape)) * 4)) for b in code.func.workspaces]

    def forward() -> None:
        for mod, ptrs in zip(mods, calls):
            mod.launch_all(ptrs)

    forward()
    drv.synchronize()
    out = np.empty((batch, dims[-1]), np.float32)
    drv.to_host(out.ctypes.data, acts[4], out.nbytes)
    h = x
    for k, (w, b) in enumerate(zip(ws, bs)):
        h = h @ w.T + b
        h = np.maximum(h, 0) if k < 2 else h
    e = np.exp(h - h.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-3, atol=1e-5)
    print(f"mlp batch {batch}: {drv.time_ms(forward, repeat):.4f} ms per forward ({len(mods)} kernels)")


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
        sgemm(drv, target, n, args.sweep, args.repeat)
    mlp(drv, target, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
