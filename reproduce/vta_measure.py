"""The accelerator's measurements: one convolution with and without virtual threads, and ResNet-18
split between the CPU and the simulated accelerator. `reproduce/experiments/vta.py` and the
scripts `experiments/vta_conv.py` / `experiments/vta_resnet.py` call these; there is no other copy.

Virtual threads (VTA's latency hiding) split a tile's buffers into two halves so one thread's loads
overlap the other's GEMMs. Halving the buffers also halves the largest tile that fits, so the
comparison is made three ways: the default knobs (largest tile, one thread), the two-thread knobs
(largest tile that fits twice), and that same smaller tile with one thread — the last pair isolates
what the overlap alone buys, the first pair what a user gets by flipping the knob.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autorelay.vta.config import VTAConfig
from autorelay.vta.conv import ConvKnobs, ConvShape, conv_program, conv_reference, conv_space, run_conv
from autorelay.vta.sim import SimResult, simulate

LO, HI = 0, 127  # the requantize epilogue of a conv + relu layer: shift, then clip


def requantize_shift(s: ConvShape) -> int:
    """A shift that keeps most outputs of random int8 data inside (LO, HI): the accumulator of
    `c*kh*kw` products of uniform int8 values has a standard deviation of about 128**2/3 *
    sqrt(c*kh*kw); shifted to about 64. (A fixed shift saturates the deep layers' outputs, and a
    saturated output hides a wrong sum from the bit-exact check.)"""
    return max(0, round(math.log2(128**2 / 3 * math.sqrt(s.c * s.kh * s.kw) / 64)))


def largest_knobs(space: list[ConvKnobs], vthreads: int) -> ConvKnobs | None:
    """The default rule (most reuse per load, larger input chunks first) among `vthreads` knobs,
    in the default loop order and rounding: this experiment compares thread counts alone."""
    base = ConvKnobs()
    fitting = [k for k in space
               if k.vthreads == vthreads and (k.order, k.rounding) == (base.order, base.rounding)]
    if not fitting:
        return None
    return max(fitting, key=lambda k: (k.tile_h * k.tile_w * k.tile_oc * k.tile_ic, k.tile_ic))


def resnet18_convs(image: int) -> list[tuple[ConvShape, int]]:
    """ResNet-18's convolutions after the stem at input size `image` (the ones the partitioner can
    offload: 16 or more input channels), with how often each shape occurs, in network order.

    Derived from the architecture (stem /4; four stages of two basic blocks; a stride-2 stage opens
    with a 3x3/2 conv and a 1x1/2 shortcut) so a reduced image size gives the reduced layers."""
    out: dict[ConvShape, int] = {}
    side, cin = image // 4, 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        first = ConvShape(cin, side, side, cout, 3, 3, stride, 1)
        side_out = first.oh
        inner = ConvShape(cout, side_out, side_out, cout, 3, 3, 1, 1)
        shapes = [first, inner]
        if stride != 1:
            shapes.append(ConvShape(cin, side, side, cout, 1, 1, stride, 0))
        shapes += [inner, inner]
        for s in shapes:
            out[s] = out.get(s, 0) + 1
        side, cin = side_out, cout
    return list(out.items())


def layer_name(s: ConvShape) -> str:
    return f"{s.c}x{s.h}x{s.w}->{s.o} k{s.kh}s{s.stride}"


@dataclass(frozen=True)
class KnobRun:
    """One lowering of the layer, simulated."""

    knobs: ConvKnobs
    cycles: int
    utilization: float
    busy: dict[str, int]  # cycles each module (load, compute, store) was busy
    exact: bool | None  # output == the integer reference (None: cycle model only, not checked)

    def as_dict(self, prefix: str) -> dict[str, Any]:
        return {f"{prefix}_knobs": str(self.knobs), f"{prefix}_cycles": self.cycles,
                f"{prefix}_util": self.utilization, f"{prefix}_exact": self.exact,
                **{f"{prefix}_busy_{m}": int(c) for m, c in self.busy.items()}}


def _run(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: ConvShape, knobs: ConvKnobs, hw: VTAConfig,
         want: np.ndarray | None) -> KnobRun:
    shift = requantize_shift(s)
    if want is None:  # cycle model alone: the same timeline, no data moved
        prog, _ = conv_program(x, w, b, s.stride, s.pad, shift, LO, HI, knobs, hw)
        res: SimResult = simulate(prog.insns, prog.dram, hw, functional=False)
        exact = None
    else:
        got, res = run_conv(x, w, b, s.stride, s.pad, shift, LO, HI, knobs, hw)
        exact = bool(np.array_equal(got, want))
    return KnobRun(knobs, res.cycles, res.utilization, dict(res.busy), exact)


def measure_layer(s: ConvShape, hw: VTAConfig, *, seed: int = 0, functional: bool = True) -> dict[str, Any]:
    """Cycles and GEMM utilisation of `s` with the default knobs (v1), the largest two-thread knobs
    (v2) and v2's tile on one thread (v1_same); functional runs are checked bit for bit against
    `conv_reference`."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, s.c, s.h, s.w), dtype=np.int8)
    w = rng.integers(-128, 128, (s.o, s.c, s.kh, s.kw), dtype=np.int8)
    b = rng.integers(-(1 << 12), 1 << 12, (s.o,), dtype=np.int32)
    t0 = time.perf_counter()
    want = conv_reference(x, w, b, s.stride, s.pad, requantize_shift(s), LO, HI) if functional else None
    space = conv_space(s, hw)
    v1, v2 = largest_knobs(space, 1), largest_knobs(space, 2)
    if v1 is None:
        raise ValueError(f"{layer_name(s)}: no knob setting fits the accelerator's buffers")
    row: dict[str, Any] = {"layer": layer_name(s), "space": len(space), "clock_mhz": hw.clock_mhz,
                           "macs": s.oh * s.ow * s.o * s.c * s.kh * s.kw, "functional": functional,
                           "clipped": None if want is None else float(np.mean((want == LO) | (want == HI)))}
    row.update(_run(x, w, b, s, v1, hw, want).as_dict("v1"))
    if v2 is not None:
        row.update(_run(x, w, b, s, v2, hw, want).as_dict("v2"))
        row.update(_run(x, w, b, s, replace(v2, vthreads=1), hw, want).as_dict("v1_same"))
    row["sim_s"] = time.perf_counter() - t0
    return row


def search_cycles(s: ConvShape, knobs: Sequence[ConvKnobs], hw: VTAConfig, seed: int = 0) -> list[int]:
    """Cycles of each knob setting by the cycle model alone (no data moved: the timing of a
    program does not depend on its values), for searching a layer's space."""
    rng = np.random.default_rng(seed)
    x = np.zeros((1, s.c, s.h, s.w), np.int8)
    w = rng.integers(-3, 3, (s.o, s.c, s.kh, s.kw)).astype(np.int8)
    b = np.zeros((s.o,), np.int32)
    return [_run(x, w, b, s, k, hw, None).cycles for k in knobs]


def _offloaded_cpu_seconds(cpu_report: Any, vta_report: Any) -> float:
    """The CPU-only build's time in the convolutions the vta build offloads: its conv kernels whose
    workload the vta build does not also run on the CPU (the stem and the last conv stay there)."""
    kept = {r.workload_key for r in vta_report.rows if r.kind == "kernel"}
    return sum(r.seconds or 0.0 for r in cpu_report.rows
               if r.kind == "kernel" and "conv2d" in r.name and r.workload_key not in kept)


def measure_resnet18(*, image: int, inputs: int, threads: int, db: Any = None, repeat: int = 5,
                     hw: VTAConfig | None = None, seed: int = 0) -> dict[str, Any]:
    """ResNet-18 int8 (the accelerator's quantization scheme), batch 1, built for the CPU alone and
    for `vta`; outputs compared bit for bit on `inputs` random images (the CPU int8 build is the
    integer reference); the offloaded layers' simulated time at the clock vs the CPU's time in the
    same layers (profiled). Schedules (CPU and accelerator) come from `db` when it has them."""
    import autorelay
    from autorelay.codegen import resolve_target
    from autorelay.transform.quantize import calibrate, quantize_model
    from autorelay.vta.runtime import accelerator_time
    from autorelay.vta.tasks import vta_target
    from search.models import load_model
    from search.quant_data import random_batches

    hw = hw or VTAConfig()
    t0 = time.perf_counter()
    model = load_model("resnet-18", image_size=image)
    data = random_batches(model, 2, seed=seed)
    cal = calibrate(model.mod, model.params, data.batches, method="max", progress=False)
    qmod, qparams = quantize_model(model.mod, model.params, cal, scheme="vta")
    host = resolve_target("llvm", threads)
    cpu_src = db.schedule_source(str(host)) if db is not None else None
    dev_src = db.schedule_source(str(vta_target(hw))) if db is not None else None
    common = {"params": qparams, "schedules": cpu_src, "threads": threads}
    cpu = autorelay.build(qmod, "llvm", **common)
    vta = autorelay.build(qmod, "vta", device_schedules=dev_src, **common)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed + 1)
    shape = model.inputs[next(iter(model.inputs))].shape
    xs = [rng.standard_normal(shape).astype("float32") for _ in range(inputs)]
    t1 = time.perf_counter()
    exact = sum(int(np.array_equal(vta(x), cpu(x))) for x in xs)
    sim_s = (time.perf_counter() - t1) / max(1, inputs)
    acc = accelerator_time(vta.vta_layers)  # of the last input's run
    cpu_report = cpu.profile(xs[0], repeat=repeat)
    vta_report = vta.profile(xs[0], repeat=1)
    rest = sum(r.seconds or 0.0 for r in vta_report.rows if r.kind != "external")
    offloaded_cpu = _offloaded_cpu_seconds(cpu_report, vta_report)
    return {"image": image, "inputs": inputs, "exact": exact, "threads": threads, "clock_mhz": hw.clock_mhz,
            "offloaded": vta.partition.offloaded, "int8_layers": len(vta.partition.layers),
            "acc_cycles": acc["cycles"], "acc_ms": acc["seconds"] * 1e3, "acc_util": acc["utilization"],
            "cpu_offloaded_ms": offloaded_cpu * 1e3, "cpu_total_ms": cpu_report.total_seconds * 1e3,
            "vta_cpu_rest_ms": rest * 1e3,
            "knob_sources": sorted({layer.source for layer in vta.vta_layers}),
            "layers": [{"name": layer.name, "knobs": str(layer.knobs), "cycles": layer.last.cycles,
                        "util": layer.last.utilization} for layer in vta.vta_layers if layer.last],
            "build_s": build_s, "sim_s_per_inference": sim_s}


__all__ = ["KnobRun", "largest_knobs", "layer_name", "measure_layer", "measure_resnet18", "requantize_shift",
           "resnet18_convs", "search_cycles"]
