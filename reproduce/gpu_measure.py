"""GPU measurements through the NVPTX backend, each result checked against NumPy before its time
counts: SGEMM (the `cuda_dense` template's default and the best of a random sweep, beside PyTorch's
cuBLAS), a 3-layer MLP launched kernel after kernel on device buffers (beside PyTorch CUDA), and
whole models where `autorelay.build` can build them for `cuda`. `benchmarks/gpu.py` and
`reproduce/experiments/gpu.py` call these; there is no other copy.

Nothing here runs without a GPU: `gpu_unavailable()` says why in one line (the driver's
"no CUDA driver found ..."), and `cuda_models_unsupported()` says why whole models cannot be built
for the GPU yet (asked of `autorelay.build` itself, on a tiny model, so the answer changes when the
builder learns GPU models — no GPU is needed to ask).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from autorelay.codegen.nvptx.driver import CudaDriverError, Driver, open_driver
from autorelay.errors import AutoRelayError, ScheduleError
from autorelay.kernel import KernelCode, emit_kernel, load_kernel
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te import nn
from autorelay.te import tensor as te


def gpu_unavailable() -> str | None:
    """Why nothing can run on a GPU here (one line), or None when the driver opens a device."""
    try:
        open_driver()
    except CudaDriverError as e:
        return str(e).splitlines()[0]
    return None


def cuda_models_unsupported() -> str | None:
    """Why `autorelay.build` cannot build a whole model for `cuda` (None when it can)."""
    import autorelay
    from autorelay.ir import Function, IRModule, TensorType, Var
    from autorelay.op.registry import call

    x = Var("x", TensorType((1, 4), "float32"))
    try:  # on the emulated device: the builder's answer, whether or not a GPU is here
        autorelay.build(IRModule.from_expr(Function((x,), call("nn.relu", x))),
                        target="cuda -arch=sm_80 -device=emulated")
    except AutoRelayError as e:
        return str(e).splitlines()[0]
    return None


def time_kernel(code: KernelCode, arrays: list[np.ndarray], ref: np.ndarray, repeat: int) -> float:
    """ms per launch of `code` on `arrays`, after checking its output against `ref`
    (`GPUModule.run`: device buffers for every parameter and workspace, copied in and back)."""
    module = load_kernel(code).module
    bufs = list(code.func.params) + list(code.func.workspaces)
    host = list(arrays) + [np.zeros(b.shape, b.dtype) for b in bufs[len(arrays):]]
    module.run(host)
    np.testing.assert_allclose(host[len(arrays)], ref, rtol=1e-3, atol=1e-3)
    return module.run(host, repeat)


def torch_cuda() -> Any:
    """torch when it is installed with a usable CUDA device, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_ms(torch: Any, fn: Callable[[], Any], repeat: int) -> float:
    """ms per call of `fn` on the GPU, by CUDA events (after one warm-up call)."""
    fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeat


def sgemm(target: Target, n: int, sweep: int, repeat: int, seed: int = 0) -> dict[str, Any]:
    """C = A W^T for n x n float32: GFLOP/s of the template's default, of the best of `sweep`
    random configs, and of cuBLAS through PyTorch (None without it)."""
    a, w = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="W")
    cdef = te.make_def([a, w], nn.dense(a, w, name="C"))
    rng = np.random.default_rng(seed)
    A, W = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    ref = A @ W.T
    gflop = 2 * n**3 / 1e9
    ms = time_kernel(emit_kernel(cdef, None, target), [A, W], ref, repeat)
    best, best_cfg = ms, "default"
    space, r = template_for(cdef, target=target).space(cdef, target), random.Random(seed)
    for _ in range(sweep):
        cfg = space.sample(r)
        try:
            code = emit_kernel(cdef, cfg, target)
        except ScheduleError:
            continue
        t = time_kernel(code, [A, W], ref, repeat)
        if t < best:
            best, best_cfg = t, str(cfg.as_dict())
    row: dict[str, Any] = {"n": n, "default_gflops": gflop / ms * 1e3, "best_gflops": gflop / best * 1e3,
                           "best_config": best_cfg, "sweep": sweep, "cublas_gflops": None}
    torch = torch_cuda()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS in FP32, as the kernels compute
        ta, tw = torch.from_numpy(A).cuda(), torch.from_numpy(W).cuda()
        row["cublas_gflops"] = gflop / torch_ms(torch, lambda: ta @ tw.T, repeat) * 1e3
    return row


def tune_sgemm(target: Target, n: int, trials: int, build_workers: int = 8, seed: int = 0) -> dict[str, Any]:
    """Tune C = A W^T (n x n float32) with the XGBoost tuner for `trials` measurements on the GPU
    (candidates built as PTX in `build_workers` processes, each checked against NumPy and timed
    with CUDA events in an isolated runner): the best GFLOP/s after the interleaved re-measure,
    the default's, and the measurement throughput (candidates per second, builds included)."""
    import time

    import tuning_db
    from search.measure import Measurer, TimingSettings
    from search.task import kernel_task
    from search.tune import tune_task
    from search.tuners import make_tuner

    a, w = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="W")
    task = kernel_task(te.make_def([a, w], nn.dense(a, w, name="C")), target, name=f"sgemm{n}", seed=seed)
    settings = TimingSettings(number=1, repeat=3, min_repeat_ms=20.0, warmup=1, timeout=20.0)
    with Measurer(build_workers=build_workers, settings=settings) as m:
        t0 = time.perf_counter()
        res = tune_task(task, make_tuner("xgb", task, seed=seed), trials, tuning_db.open("sqlite://"), m,
                        batch=16, top_k=3, rounds=5)
        wall = time.perf_counter() - t0
    gflop = 2 * n**3 / 1e9
    return {"n": n, "trials": res.trials, "best_gflops": gflop / res.best_cost,
            "default_gflops": gflop / res.default_cost, "seconds": wall,
            "candidates_per_s": res.trials / wall if wall else 0.0, "errors": dict(res.errors),
            "best_config": str(res.best_config.as_dict()) if res.best_config else None}


def mlp(drv: Driver, target: Target, repeat: int, batch: int = 64, seed: int = 1) -> dict[str, Any]:
    """784 -> 512 (relu) -> 256 (relu) -> 10 (softmax): four kernels on device buffers, ms per
    forward (checked against NumPy), beside the same network in PyTorch CUDA (None without it)."""
    rng = np.random.default_rng(seed)
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
    row: dict[str, Any] = {"batch": batch, "kernels": len(mods), "ms": drv.time_ms(forward, repeat),
                           "torch_ms": None}
    torch = torch_cuda()
    if torch is not None:
        f = torch.nn.functional
        tw, tb = [torch.from_numpy(w).cuda() for w in ws], [torch.from_numpy(b).cuda() for b in bs]
        tx = torch.from_numpy(x).cuda()

        def torch_forward() -> Any:
            y = f.relu(f.linear(f.relu(f.linear(tx, tw[0], tb[0])), tw[1], tb[1]))
            return torch.softmax(f.linear(y, tw[2], tb[2]), dim=1)

        with torch.no_grad():
            row["torch_ms"] = torch_ms(torch, torch_forward, repeat)
    return row


def model_ms(name: str, target: Target, repeat: int, seed: int = 0, batch: int = 1,
             schedules: Any = None, profile: bool = False) -> dict[str, Any]:
    """A zoo model at `batch` built for the GPU by `autorelay.build` (`schedules`: a tuning log's
    source, or None for the templates' defaults), checked against PyTorch's output where torch with
    CUDA is installed, else against the CPU build: device ms per forward with the input on the
    device (`ms`, what PyTorch's CUDA timing measures) and ms per call as a user calls it, host
    copies in and out included (`call_ms`); beside the same graph in PyTorch eager on the GPU
    (cuDNN, TF32 off: both sides compute in FP32). `profile`: the build report with each kernel's
    device time (`report`)."""
    import time

    import autorelay
    from search.models import load_model

    model = load_model(name, batch_size=batch)
    shape = model.inputs[next(iter(model.inputs))].shape
    x = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    t0 = time.perf_counter()
    exe = autorelay.build(model.mod, target=target, params=model.params, schedules=schedules)
    build_s = time.perf_counter() - t0
    got = np.asarray(exe(x))
    exe(x)
    t0 = time.perf_counter()
    for _ in range(repeat):
        exe(x)
    call_ms = (time.perf_counter() - t0) / repeat * 1e3
    row: dict[str, Any] = {"model": name, "batch": batch, "ms": exe.device_ms(x, repeat=repeat),
                           "call_ms": call_ms, "build_s": build_s,
                           "kernels": sum(1 for r in exe.report.rows if r.kind == "kernel"),
                           "host_steps": sum(1 for r in exe.report.rows if r.kind != "kernel"),
                           "torch_ms": None}
    torch = torch_cuda()
    if torch is not None:
        from reproduce.baselines import torch_module  # the same graph op by op in torch.nn.functional

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        net, _ = torch_module(model.mod, model.params)
        net.weights = {k: v.cuda() for k, v in net.weights.items()}
        tx = torch.from_numpy(x).cuda()
        with torch.no_grad():
            want = net(tx).cpu().numpy()
            row["torch_ms"] = torch_ms(torch, lambda: net(tx), repeat)
        row["checked_against"] = "PyTorch CUDA"
    else:
        want = np.asarray(autorelay.build(model.mod, target="llvm", params=model.params)(x))
        row["checked_against"] = "the CPU build"
    row["max_rel_err"] = float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
    if profile:
        row["report"] = str(exe.profile(x, repeat=5))
    return row


__all__ = [
    "cuda_models_unsupported",
    "gpu_unavailable",
    "mlp",
    "model_ms",
    "sgemm",
    "time_kernel",
    "torch_cuda",
    "torch_ms",
    "tune_sgemm",
]
