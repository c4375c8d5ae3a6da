"""Offloaded layers at run time: each `vta.*` call of a built model becomes one `VTALayer`.

A layer's instruction stream and DRAM image are made once, at build time, with the weights, bias
and micro-ops in place (`conv_program` / `dense_program` with a zero input); a call copies the image,
writes the input (one image: the core's BATCH is 1, so a batch of N convolutions is N runs) into its
input region in the accelerator's blocked layout, runs the simulator
(functional and cycle-level at once) and reads the int8 result back in NCHW / [M, N]. The host-side
re-layouts are the "driver's" work and run on the CPU; the simulated time of the last call of every
layer is kept, so a model's accelerator time is the sum over its layers (`VTALayer.last`).

Knobs come from the schedule source: the tuned config logged under the layer's workload key on the
accelerator's target (`autorelay.vta.tasks`), else the default rule; the choice and its source are
in the build report, like a CPU kernel's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Function, Op
from autorelay.ir.visitor import post_order
from autorelay.schedule.source import ScheduleSource
from autorelay.vta.config import VTAConfig
from autorelay.vta.conv import ConvKnobs, ConvShape, conv_program, from_blocked, to_blocked
from autorelay.vta.programs import DenseKnobs, Program, dense_program
from autorelay.vta.sim import SimResult, VTAError, simulate
from autorelay.vta.tasks import (
    conv_knobs_from,
    conv_workload,
    conv_workload_key,
    default_conv_knobs,
    default_dense_knobs,
    dense_knobs_from,
    dense_workload,
    dense_workload_key,
    vta_target,
)


@dataclass
class VTALayer:
    """One offloaded layer: call it with its int8 input, get its int8 output."""

    name: str
    program: Program
    config: VTAConfig
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    knobs: ConvKnobs | DenseKnobs
    source: str  # "tuned" | "transferred" | "default"
    key: str
    last: SimResult | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.shape != self.in_shape or x.dtype != np.int8:
            raise VTAError(f"{self.name}: expected int8 {list(self.in_shape)}, got {x.dtype} {list(x.shape)}")
        if len(self.in_shape) == 4 and x.shape[0] > 1:
            return self._batch(x)
        dram = self.program.dram.copy()
        blocked = self._to_device(x)
        dram[: blocked.nbytes] = blocked.reshape(-1).view(np.uint8)  # the input region starts at 0
        self.last = simulate(self.program.insns, dram, self.config)
        return self._from_device(dram)

    def _batch(self, x: np.ndarray) -> np.ndarray:
        """One program run per image; `last` sums the runs (they execute back to back)."""
        one = replace(self, in_shape=(1, *self.in_shape[1:]), out_shape=(1, *self.out_shape[1:]))
        outs, runs = [], []
        for image in x:
            outs.append(one(image[None]))
            runs.append(one.last)
        busy = {k: sum(r.busy[k] for r in runs) for k in runs[0].busy}
        self.last = SimResult(sum(r.cycles for r in runs), busy, sum(r.gemm_cycles for r in runs),
                              sum(r.instructions for r in runs), self.config.clock_mhz)
        return np.concatenate(outs)

    def _to_device(self, x: np.ndarray) -> np.ndarray:
        if len(self.in_shape) == 4:
            return to_blocked(x, self.config.block_in)
        k = math.ceil(x.shape[1] / self.config.block_in) * self.config.block_in
        xp = np.zeros((x.shape[0], k), np.int8)
        xp[:, : x.shape[1]] = x
        return xp

    def _from_device(self, dram: np.ndarray) -> np.ndarray:
        bo, off = self.config.block_out, self.program.out_offset
        if len(self.out_shape) == 4:
            _, o, oh, ow = self.out_shape
            ob = math.ceil(o / bo)
            raw = dram[off: off + ob * oh * ow * bo].view(np.int8)
            return from_blocked(raw.reshape(ob, oh, ow, bo), o).copy()
        m, n = self.out_shape
        nt = math.ceil(n / bo)
        return dram[off: off + m * nt * bo].view(np.int8).reshape(m, nt * bo)[:, :n].copy()

    @property
    def detail(self) -> str:
        return f"vta {self.source}: {self.knobs}"


def _the_call(fn: Function) -> Call:
    calls = [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]
    if len(calls) != 1 or fn.body is not calls[0]:
        raise VTAError(f"an offloaded function must be one vta call, got {[c.op.name for c in calls]}")
    return calls[0]


def _constant(call: Call, index: int, what: str) -> np.ndarray:
    arg = call.args[index]
    if not isinstance(arg, Constant):
        raise VTAError(f"{call.op.name}: the {what} must be a constant (bind the weights first)")
    return np.asarray(arg.data)


def make_layer(fn: Function, hw: VTAConfig, schedules: ScheduleSource | None) -> VTALayer:
    """The offloaded layer for a primitive function holding one `vta.conv2d` / `vta.dense` call
    whose data is the function's parameter and whose weight and bias are constants."""
    c = _the_call(fn)
    w, b = _constant(c, 1, "weight"), _constant(c, 2, "bias")
    in_shape = tuple(int(d) for d in c.args[0].checked_type.shape)
    out_shape = tuple(int(d) for d in c.checked_type.shape)
    a = c.attrs
    epilogue = (int(a["shift"]), int(a["clip_min"]), int(a["clip_max"]))
    if c.op.name == "vta.conv2d":
        shape = ConvShape(in_shape[1], in_shape[2], in_shape[3], w.shape[0], w.shape[2], w.shape[3],
                          int(a["strides"]), int(a["padding"]))
        key = conv_workload_key(shape)
        knobs, source = default_conv_knobs(shape, hw), "default"
        if schedules is not None:
            hit = schedules.lookup(key, str(vta_target(hw)), workload=conv_workload(shape))
            tuned = conv_knobs_from(hit.config, shape, hw) if hit.config is not None else None
            if tuned is not None:  # a transferred config is another shape's: it must fit this one
                knobs, source = tuned, "tuned" if str(hit.kind) == "exact" else "transferred"
        zeros = np.zeros((1, *in_shape[1:]), np.int8)  # one image: the program runs once per image
        prog, _ = conv_program(zeros, w, b, shape.stride, shape.pad, *epilogue, knobs, hw)
        name = f"vta_conv2d_{shape.c}x{shape.h}x{shape.w}_{shape.o}k{shape.kh}s{shape.stride}"
        return VTALayer(name, prog, hw, in_shape, out_shape, knobs, source, key)
    m, k = in_shape
    n = int(w.shape[0])
    key = dense_workload_key(m, n, k)
    dknobs, source = default_dense_knobs(m, n, k, hw), "default"
    if schedules is not None:
        hit = schedules.lookup(key, str(vta_target(hw)), workload=dense_workload(m, n, k))
        tuned_dense = dense_knobs_from(hit.config, m, n, k, hw) if hit.config is not None else None
        if tuned_dense is not None:
            dknobs, source = tuned_dense, "tuned" if str(hit.kind) == "exact" else "transferred"
    prog = dense_program(np.zeros(in_shape, np.int8), w, b, *epilogue, dknobs, hw)
    return VTALayer(f"vta_dense_{m}x{k}_{n}", prog, hw, in_shape, out_shape, dknobs, source, key)


def accelerator_time(layers: list[VTALayer]) -> dict[str, Any]:
    """Simulated totals of the layers' last calls: cycles, seconds at the clock, GEMM utilisation."""
    runs = [layer.last for layer in layers if layer.last is not None]
    cycles = sum(r.cycles for r in runs)
    gemm = sum(r.gemm_cycles for r in runs)
    clock = layers[0].config.clock_mhz if layers else 0.0
    return {"layers": len(runs), "cycles": cycles, "seconds": cycles / (clock * 1e6) if clock else 0.0,
            "utilization": gemm / cycles if cycles else 0.0}


__all__ = ["VTALayer", "accelerator_time", "make_layer"]
