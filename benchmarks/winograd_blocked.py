"""Winograd in channel blocks against the direct blocked convolution, on ResNet-18's stride-1 3x3
layers: each kernel's default config (and with `--sweep N`, the best of N sampled configs),
timed warm (back to back) and cold (its weights evicted from the caches before each call, as a
model's inference finds them), kernels alternating call by call, medians of `--repeat` calls.

    python benchmarks/winograd_blocked.py [--threads 2] [--sweep 0] [--repeat 15] [--layers 64@56,128@28]
                                          [--units]

With `--units`, F(4x4) is also timed under every fused unit its space offers (`unit` (r, g): r tile
rows x g output blocks per parallel unit; (0, 0) the three stages apart), the other knobs the default's.

All inputs and weights are in blocks of the target's vector width; the direct kernel is
`conv2d_nchwc`, the Winograd ones `conv2d_winograd_nchwc` at F(2x2) and F(4x4). Read the ratios:
the kernels are timed in one process on the same, possibly noisy, machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.codegen.llvm.host import host_target
from autorelay.errors import ScheduleError
from autorelay.kernel import BoundKernel, compile_kernel
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from autorelay.te import nn, winograd
from autorelay.te import tensor as te
from autorelay.te.tensor import ComputeDef

RESNET_3X3 = [(64, 56), (128, 28), (256, 14), (512, 7)]  # (channels, output size), stride 1


def _blocked(x: np.ndarray, b: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _forms(c: int, h: int, block: int, rng: np.random.Generator) -> dict[str, tuple[ComputeDef, list]]:
    """The direct and the two Winograd kernels of one layer, with their (blocked) arrays."""
    x = rng.standard_normal((1, c, h, h), dtype=np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    xb = te.placeholder((1, c // block, h, h, block), name="X")
    wb = te.placeholder((c // block, c // block, 3, 3, block, block), name="W")
    wa = w.reshape(c // block, block, c // block, block, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    forms = {"direct": (te.make_def([xb, wb], nn.conv2d_nchwc(xb, wb, 1, 1), "direct"),
                        [_blocked(x, block), np.ascontiguousarray(wa)])}
    for tile in winograd.TILE_SIZES:
        u = winograd.block_weight_np(winograd.weight_transform_np(w, tile), block)
        ud = te.placeholder(u.shape, name="U")
        cdef = te.make_def([xb, ud], winograd.conv2d_winograd_nchwc(xb, ud, 1), "winograd")
        forms[f"F({tile}x{tile})"] = (cdef, [_blocked(x, block), u])
    return forms


def _timer(kernel: BoundKernel, cold: bool) -> Callable[[], float]:
    weight = [kernel.inputs[1]]  # evicted before each call when cold, as a model's weights are
    return lambda: kernel.time(1, cold=weight if cold else ())


def _unit_forms(forms: dict[str, tuple[ComputeDef, list]], target
                ) -> dict[str, tuple[ComputeDef, list, Config]]:
    """F(4x4) under each unit of its space (the other knobs its default's), named `F4 (r, g)`."""
    cdef, arrays = forms["F(4x4)"]
    tmpl = template_for(cdef)
    base = tmpl.default(cdef, target).as_dict()
    return {f"F4 {unit}": (cdef, arrays, Config(tmpl.name, tuple({**base, "unit": unit}.items())))
            for unit in tmpl.space(cdef, target).knob("unit").values}


def _alternating(timers: list[Callable[[], float]], repeat: int) -> list[float]:
    samples: list[list[float]] = [[] for _ in timers]
    for _ in range(repeat):
        for t, out in zip(timers, samples):
            out.append(t())
    return [statistics.median(s) for s in samples]


def _candidates(cdef: ComputeDef, target, sweep: int, seed: int) -> list:
    tmpl = template_for(cdef)
    space = tmpl.space(cdef, target)
    picks = list(range(len(space)))
    random.Random(seed).shuffle(picks)
    return [tmpl.default(cdef, target)] + [space.get(i) for i in picks[:sweep]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sweep", type=int, default=0, help="configs sampled per kernel besides the default")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--layers", default=",".join(f"{c}@{h}" for c, h in RESNET_3X3),
                    help="channels@size of stride-1 3x3 layers")
    ap.add_argument("--units", action="store_true", help="also time F(4x4) under every fused unit")
    args = ap.parse_args(argv)
    target = host_target(args.threads)
    block = target.vector_lanes()
    rng = np.random.default_rng(0)
    print(f"{target}; blocks of {block}; us per call, median of {args.repeat} (cold: weights evicted)")
    for spec in args.layers.split(","):
        c, h = (int(v) for v in spec.split("@"))
        kernels = {}
        forms = _forms(c, h, block, rng)
        for name, (cdef, arrays, cfg) in (_unit_forms(forms, target) if args.units else {}).items():
            k = compile_kernel(cdef, cfg, target).bind(*arrays)
            k()
            kernels[name] = (0.0, cfg, k)
        for name, (cdef, arrays) in forms.items():
            best = None
            for cfg in _candidates(cdef, target, args.sweep, c):
                try:
                    k = compile_kernel(cdef, cfg, target).bind(*arrays)
                except ScheduleError:
                    continue
                k()
                t = _alternating([_timer(k, True)], 5)[0]
                if best is None or t < best[0]:
                    best = (t, cfg, k)
            kernels[name] = best
        names = sorted(kernels, key=lambda n: n != "direct")  # the direct kernel first: the ratios' base
        ks = [kernels[n][2] for n in names]
        warm = _alternating([_timer(k, False) for k in ks], args.repeat)
        cold = _alternating([_timer(k, True) for k in ks], args.repeat)
        print(f"{c} channels, {h}x{h}:")
        for n, tw, tc in zip(names, warm, cold):
            print(f"  {n:12s} warm {tw * 1e6:7.0f}  cold {tc * 1e6:7.0f}  direct/this (cold) "
                  f"{cold[0] / tc:5.2f}   {kernels[n][1].as_dict()}", flush=True)


if __name__ == "__main__":
    main()
