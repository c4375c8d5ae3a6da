"""Grouped convolutions with narrow groups: whole groups packed into a channel block against blocks
of the group, per kernel and in ResNeXt-50.

    python benchmarks/grouped_conv.py [--target "llvm -mcpu=znver3"] [--threads 2] [--rounds 30]
                                      [--layers 128@56/4,256@28/8] [--model resnext-50 --model-rounds 20]

Kernels: each layer (channels@size/channels per group, stride 1, 3x3) in its forms, default
configs, warm weights, timed alternately (10 calls per sample, the median of `--rounds` samples):
`packed b` (`packed_group_conv2d_nchwc`, groups packed whole into blocks of b, one and two target
vectors) and `blocks of g` (`conv2d_nchwc` in groups, each group's channels one block, which is
how such layers ran before the packed form, with a re-layout from and to the model's blocks around
them, not timed here).

`--model`: the model at 224 px, batch 1, default schedules, built twice in one process as layout
plans: every conv in blocks of one vector with the narrow grouped layers packed, and the same with
those layers in blocks of their group (the old form, re-layouts included). The two are timed call by
call interleaved; the per-round ratio's median and 10th-90th percentiles are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.codegen import resolve_target
from autorelay.kernel import compile_kernel
from autorelay.te import nn, nn_depthwise
from autorelay.te import tensor as te
from autorelay.te.tensor import ComputeDef
from autorelay.transform.layout_plan import LayoutPlan
from autorelay.transform.quantize.layers import layer_calls

RESNEXT_NARROW = "128@56/4,256@28/8"  # ResNeXt-50's first two stages


def _forms(c: int, h: int, g: int, lanes: int) -> dict[str, ComputeDef]:
    out = {}
    for b in sorted({lanes, 2 * lanes}):
        if c % b == 0 and b % g == 0 and b > g:
            x = te.placeholder((1, c // b, h, h, b), name="X")
            w = te.placeholder((c // b, 1, 3, 3, g, b), name="W")
            packed = nn_depthwise.packed_group_conv2d_nchwc(x, w, 1, 1)
            out[f"packed {b}"] = te.make_def([x, w], packed, "packed")
    x = te.placeholder((1, c // g, h, h, g), name="X")
    w = te.placeholder((c // g, 1, 3, 3, g, g), name="W")
    out[f"blocks of {g}"] = te.make_def([x, w], nn.conv2d_nchwc(x, w, 1, 1, groups=c // g), "grouped")
    return out


def time_kernels(target_name: str, threads: int, layers: str, rounds: int) -> None:
    target = resolve_target(target_name, threads)
    rng = np.random.default_rng(0)
    print(f"{target}; default configs, us per call (median of {rounds} samples of 10 calls)")
    for spec in layers.split(","):
        size, g = spec.split("/")
        c, h = (int(v) for v in size.split("@"))
        bound = {}
        for name, cdef in _forms(c, h, int(g), target.vector_lanes()).items():
            arrays = [rng.standard_normal(t.shape).astype("float32") for t in cdef.inputs]
            bound[name] = compile_kernel(cdef, None, target).bind(*arrays)
        samples: dict[str, list[float]] = {n: [] for n in bound}
        for _ in range(rounds):
            for n, k in bound.items():
                samples[n].append(k.time(10))
        flops = 2 * c * int(g) * 9 * h * h
        print(f"{c} channels, {h}x{h}, groups of {g}:")
        for n, s in samples.items():
            t = statistics.median(s)
            print(f"  {n:12s} {t * 1e6:8.1f} us  {flops / t / 1e9:6.1f} GFLOP/s")


def time_model(name: str, threads: int, rounds: int) -> None:
    from search.models import build_model, interleaved_samples, load_model, run_inputs
    from search.pipeline_choice import prepare_plan

    model = load_model(name)
    target = resolve_target("llvm", threads)
    lanes = target.vector_lanes()
    convs = {k: c for k, c in layer_calls(model.mod).items() if k.startswith("conv2d")}
    narrow = {}
    for layer, c in convs.items():
        per_group = model.params[c.args[1].name_hint].shape[1] if c.attrs["groups"] > 1 else 0
        if 0 < per_group < lanes:
            narrow[layer] = per_group
    packed = LayoutPlan.uniform(list(convs), lanes)
    old = LayoutPlan({**packed.blocks, **narrow})
    print(f"{name}: {len(narrow)} grouped layers narrower than {lanes} channels per group: "
          f"{sorted(set(narrow.values()))}")
    exes = [build_model(model, None, prepared=prepare_plan(model, "llvm", threads, p)) for p in (packed, old)]
    samples = interleaved_samples(exes, run_inputs(exes[0], model), rounds=rounds)
    for label, s in zip((f"packed in {lanes}", "blocks of the group"), samples):
        p10, p90 = np.percentile(s, [10, 90]) * 1e3
        print(f"  {label:20s} {statistics.median(s) * 1e3:8.2f} ms [{p10:.2f}-{p90:.2f}]")
    ratio = [b / a for a, b in zip(*samples)]
    print(f"  per-round ratio (blocks of the group / packed): {statistics.median(ratio):.3f} "
          f"[{np.percentile(ratio, 10):.3f}-{np.percentile(ratio, 90):.3f}]")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--layers", default=RESNEXT_NARROW, help="channels@size/channels per group, ...")
    ap.add_argument("--model", help="also time a zoo model's builds (e.g. resnext-50)")
    ap.add_argument("--model-rounds", type=int, default=20)
    args = ap.parse_args(argv)
    time_kernels(args.target, args.threads, args.layers, args.rounds)
    if args.model:
        time_model(args.model, args.threads, args.model_rounds)


if __name__ == "__main__":
    main()
