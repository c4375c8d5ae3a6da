"""`autorelay tune|compile|run --target vta`: a zoo model on the simulated accelerator.

The model is quantized for the accelerator (`scheme="vta"`: int8, power-of-two scales; calibrated
like `--precision int8`), partitioned (`autorelay.vta.partition`), and then:

* tune: every distinct offloaded convolution is a `VTAConvTask` (a dense layer a `VTADenseTask`);
  the task scheduler divides `--trials` between them (weighted by how often each runs) and the
  measurement is simulated time, logged under the accelerator's target (`vta -hw=<digest>`), so a
  rerun resumes from the log;
* compile / run: `autorelay.build(..., target="vta")` with the log's knobs for every offloaded
  layer (the build report says "vta tuned" or "vta default") and the CPU part compiled for the host.

The CPU part is not tuned here (its kernels use the log's CPU schedules when present); `run`
reports the host's wall time, which includes simulating the accelerator, and the simulated
accelerator time of one inference separately.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.ir.expr import Call
from autorelay.ir.visitor import post_order
from autorelay.transform import bind_params
from autorelay.transform.util import op_name
from search.models import Model


@dataclass
class AcceleratorModel:
    """A zoo model quantized for the accelerator, with its weights bound and its layers partitioned."""

    model: Model  # the quantized model (weights as parameters), what `autorelay.build` takes
    partitioned: Any  # IRModule: weights bound, offloadable layers as vta.* calls
    report: Any  # PartitionReport
    hw: Any  # VTAConfig
    note: str


def prepare_for_accelerator(args: argparse.Namespace, model: Model) -> AcceleratorModel:
    from autorelay.target import parse_target
    from autorelay.transform.quantize import calibrate, quantizable_layers, quantize_model
    from autorelay.vta.build import hardware_of
    from autorelay.vta.partition import partition
    from search.quantize_cli import calibration_data

    if args.precision not in ("fp32", "int8"):
        raise ValueError("--target vta quantizes every layer it can for the accelerator (int8); "
                         f"--precision {args.precision} is not supported there")
    hw = hardware_of(parse_target(args.target))
    data = calibration_data(args, model, default_random=8)
    calib = calibrate(model.mod, model.params, data.batches, method=args.method, progress=False)
    qmod, qparams = quantize_model(model.mod, model.params, calib, scheme="vta")
    parted, report = partition(bind_params(qmod, qparams), hw)
    layers = len(quantizable_layers(model.mod))
    note = (f"quantized for the accelerator (int8, power-of-two scales; calibrated {args.method} on "
            f"{data.source}): {report.offloaded} of {layers} layers offloaded")
    return AcceleratorModel(Model(f"{model.name}[vta]", qmod, dict(qparams), model.inputs), parted, report,
                            hw, note)


def accelerator_tasks(acc: AcceleratorModel) -> tuple[list[Any], list[float]]:
    """One tuning task per distinct offloaded convolution or dense shape, and how often each runs."""
    from autorelay.vta.conv import ConvShape
    from search.vta_tuning import vta_conv_task, vta_dense_task

    convs: Counter[ConvShape] = Counter()
    denses: Counter[tuple[int, int, int]] = Counter()
    for node in post_order(acc.partitioned["main"].body):
        if op_name(node) not in ("vta.conv2d", "vta.dense"):
            continue
        assert isinstance(node, Call)
        x, w = node.args[0].checked_type.shape, node.args[1].checked_type.shape
        if op_name(node) == "vta.dense":
            denses[(int(x[0]), int(w[0]), int(x[1]))] += 1
            continue
        convs[ConvShape(int(x[1]), int(x[2]), int(x[3]), int(w[0]), int(w[2]), int(w[3]),
                        int(node.attrs["strides"]), int(node.attrs["padding"]))] += int(x[0])
    tasks = [vta_conv_task(s, acc.hw, f"vta_conv{s.c}x{s.h}->{s.o}_k{s.kh}s{s.stride}") for s in convs]
    tasks += [vta_dense_task(m, n, k, acc.hw) for m, n, k in denses]
    return tasks, [float(c) for c in (*convs.values(), *denses.values())]


def tune(args: argparse.Namespace, model: Model) -> int:
    from search.models import open_db
    from search.tune import tune_tasks
    from search.vta_tuning import VTAMeasurer

    acc = prepare_for_accelerator(args, model)
    print(acc.note)
    tasks, weights = accelerator_tasks(acc)
    if not tasks:
        print("nothing to tune: no layer of this model runs on the accelerator")
        return 0
    t0 = time.perf_counter()
    db, _ = open_db(args.db)
    with db:
        results = tune_tasks(tasks, weights, args.tuner, args.trials, db, VTAMeasurer(), seed=args.seed)
    print(f"{'task':<28} {'runs':>4} {'trials':>6} {'default us':>11} {'tuned us':>9} {'speedup':>7}")
    for t, w, r in zip(tasks, weights, results):
        print(f"{t.name:<28} {int(w):>4} {r.trials + r.resumed:>6} {r.default_cost * 1e6:>11.1f} "
              f"{r.best_cost * 1e6:>9.1f} {r.speedup:>6.2f}x")
    default = sum(w * r.default_cost for w, r in zip(weights, results))
    best = sum(w * r.best_cost for w, r in zip(weights, results))
    print(f"offloaded layers, simulated at {acc.hw.clock_mhz:g} MHz: default {default * 1e3:.3f} ms, "
          f"tuned {best * 1e3:.3f} ms ({default / best if best else 0:.2f}x) in "
          f"{time.perf_counter() - t0:.1f} s; logged under {tasks[0].target}")
    return 0


def build(args: argparse.Namespace, model: Model, threads: int) -> tuple[Any, AcceleratorModel, float]:
    """The executable for `--target vta` with the log's knobs, and the build time."""
    import autorelay
    from autorelay.codegen import resolve_target
    from autorelay.vta.tasks import vta_target
    from search.models import open_db

    acc = prepare_for_accelerator(args, model)
    t0 = time.perf_counter()
    db, _ = open_db(args.db)
    with db:
        source = db.schedule_source(str(resolve_target("llvm", threads)))
        device = db.schedule_source(str(vta_target(acc.hw)))
        exe = autorelay.build(acc.model.mod, args.target, params=acc.model.params, schedules=source,
                              threads=threads, device_schedules=device)
    return exe, acc, time.perf_counter() - t0


def run(args: argparse.Namespace, model: Model, threads: int) -> tuple[Any, str]:
    """Build, run once on the model's inputs (the simulator runs every offloaded layer), and a
    summary line with the host's wall time and the accelerator's simulated time."""
    from search.models import run_inputs

    exe, acc, seconds = build(args, model, threads)
    inputs = run_inputs(exe, acc.model)
    t0 = time.perf_counter()
    out = exe(*inputs)
    wall = time.perf_counter() - t0
    sim = exe.accelerator_time()
    finite = bool(np.all(np.isfinite(np.asarray(out if not isinstance(out, tuple) else out[0]))))
    line = (f"{acc.note}\n{model.name} on vta: built in {seconds:.1f} s; one inference {wall:.2f} s of host "
            f"time (simulation included); accelerator {sim['cycles']} cycles = {sim['seconds'] * 1e3:.3f} ms "
            f"at {acc.hw.clock_mhz:g} MHz over {sim['layers']} layers, GEMM utilisation "
            f"{sim['utilization']:.2f}; outputs finite: {finite}")
    return exe, line


def is_accelerator(target: str) -> bool:
    from autorelay.target import parse_target

    return parse_target(target).kind == "vta"


__all__ = ["AcceleratorModel", "accelerator_tasks", "build", "is_accelerator", "prepare_for_accelerator",
           "run", "tune"]
