"""GPU benchmark: ResNet-18's conv shapes through `cuda_conv2d`: per layer, ms of the default, of the best
of `--sweep` random configs, of the old `cuda_reduction` and of PyTorch's conv2d (fp32, no TF32), each
output checked against NumPy first (`time_kernel`). No GPU: the driver's one-line reason, exit 0."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorelay.codegen import resolve_target
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel
from autorelay.schedule.templates import template_for, templates
from autorelay.te import nn
from autorelay.te import tensor as te
from reproduce.gpu_measure import gpu_unavailable, time_kernel, torch_cuda, torch_ms

LAYERS = [(3, 224, 64, 7, 2, 3), (64, 56, 64, 3, 1, 1), (64, 56, 128, 3, 2, 1), (64, 56, 128, 1, 2, 0),
          (128, 28, 128, 3, 1, 1), (128, 28, 256, 3, 2, 1), (128, 28, 256, 1, 2, 0), (256, 14, 256, 3, 1, 1),
          (256, 14, 512, 3, 2, 1), (256, 14, 512, 1, 2, 0), (512, 7, 512, 3, 1, 1)]


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Vectorised NCHW conv: strided windows, one tensordot (BLAS) over (c, kh, kw)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.tensordot(win, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)


def layer(target, torch, n: int, c: int, h: int, k: int, ks: int, s: int, p: int, sweep: int, repeat: int):
    """One line for a layer of `n` x `c` x `h` x `h` inputs, `k` outputs, `ks` x `ks` kernels, stride `s`,
    padding `p` (LAYERS lists (c, h, k, ks, s, p)): the default, the best of the sweep, the old, PyTorch."""
    x, w = te.placeholder((n, c, h, h), name="X"), te.placeholder((k, c, ks, ks), name="W")
    cdef = te.make_def([x, w], nn.conv2d_nchw(x, w, s, p))
    X, W = (np.random.default_rng(0).standard_normal(t.shape, np.float32) for t in (x, w))
    ref = np.ascontiguousarray(conv_ref(X, W, s, p))
    tmpl, torch_s = template_for(cdef, target=target), "-"
    best = ms = time_kernel(emit_kernel(cdef, None, target), [X, W], ref, repeat)
    best_cfg, space, r = "default", tmpl.space(cdef, target), random.Random(n * 1000 + c + k)
    for _ in range(sweep):
        cfg = space.sample(r)
        try:
            t = time_kernel(emit_kernel(cdef, cfg, target), [X, W], ref, repeat)
        except ScheduleError:  # e.g. more threads or shared memory than a block may have
            continue
        best, best_cfg = (t, str(cfg.as_dict())) if t < best else (best, best_cfg)
    old = time_kernel(emit_kernel(cdef, templates()["cuda_reduction"].default(cdef, target), target),
                      [X, W], ref, max(1, repeat // 4))
    if torch is not None:
        torch.backends.cudnn.allow_tf32 = False  # fp32 against fp32
        tx, tw, conv = torch.from_numpy(X).cuda(), torch.from_numpy(W).cuda(), torch.nn.functional.conv2d
        torch_s = f"{torch_ms(torch, lambda: conv(tx, tw, stride=s, padding=p), repeat):.4f}"
    return (f"n={n:2d} {c:3d}x{h:3d}->{k:3d} k{ks}s{s} [{tmpl.name}] default {ms:.4f} ms  best {best:.4f} ms"
            f"  cuda_reduction {old:.4f} ms  torch {torch_s} ms  ({best_cfg})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split(".")[0])
    for flag, default in (("--batches", "1,32"), ("--sweep", 8), ("--repeat", 20)):
        ap.add_argument(flag, type=type(default), default=default)
    args = ap.parse_args(argv)
    if why := gpu_unavailable():  # the driver's "no CUDA driver found ..."
        print(why)
        return 0
    target, torch = resolve_target("cuda"), torch_cuda()
    print(f"target: {target}")
    for n, shape in ((int(b), sh) for b in args.batches.split(",") for sh in LAYERS):
        print(layer(target, torch, n, *shape, args.sweep, args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
