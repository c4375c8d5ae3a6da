"""Tuning the simulated accelerator's conv2d and dense knobs with the CPU's tuners, cost model and
tuning log.

A `VTAConvTask` (and likewise a `VTADenseTask`: tile_m, tile_n, tile_k, vthreads) offers what
`search.tune.tune_task` and the tuners read of a task — a knob space
(`tile_h`, `tile_w`, `tile_oc`, `tile_ic`, `vthreads`, loop `order`, `rounding`: see
`autorelay.vta.conv`) addressable by index, a default, a workload
key and a target — and its own features for the XGBoost model (`features_of`: the knobs and what
they imply for the buffers and the instruction stream). The "measurement" is the cycle model:
`VTAMeasurer` lowers a candidate, simulates it on the task's fixed random data, refuses it unless it
is bit-exact against the integer reference, and reports the simulated time at the configured
clock. Results land in the tuning log under a `vta` target whose name carries a digest of every
hardware parameter (`vta_target`), so another accelerator configuration is another target; an
interrupted tune resumes from the log like a CPU one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from autorelay.schedule.space import Config, Knob, Space
from autorelay.target import Target
from autorelay.vta.config import VTAConfig
from autorelay.vta.conv import (
    ORDERS,
    ROUNDINGS,
    ConvKnobs,
    ConvShape,
    conv_fits,
    conv_reference,
    load_counts,
    run_conv,
)
from autorelay.vta.programs import DenseKnobs, dense_reference, dense_space, run_dense, tile_sizes
from autorelay.vta.sim import VTAError
from autorelay.vta.tasks import (
    CONV_CHOICE_KNOBS,
    CONV_TILE_KNOBS,
    DENSE_KNOBS,
    DENSE_TEMPLATE,
    conv_blocks,
    conv_workload,
    conv_workload_key,
    default_conv_knobs,
    default_dense_knobs,
    dense_workload,
    dense_workload_key,
    vta_target,
)
from autorelay.vta.tasks import CONV_TEMPLATE as TEMPLATE
from search.measure.result import ErrorKind, MeasureInput, MeasureResult

SHIFT, LO, HI = 10, 0, 127  # the requantize epilogue measured with every candidate (relu)


@dataclass(eq=False, kw_only=True)
class _VTATask:
    """What `tune_task` and the tuners read of a task, shared by the conv and dense tasks."""

    name: str
    hw: VTAConfig
    target: Target
    space: Space
    default: Config
    key: str
    workload: dict[str, Any]
    template: str
    seed: int = 0
    _data: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    # knobs a config logged before they existed lacks, and the value it was measured with
    knob_defaults: ClassVar[dict[str, Any]] = {}

    def config(self, index: int) -> Config:
        return self.space.get(index)

    def index(self, config: Config) -> int:
        try:
            return self.space.index(config)
        except (ValueError, KeyError):
            return -1

    def config_from_json(self, d: dict[str, Any]) -> Config:
        cfg = Config.from_json(d)
        values = {**self.knob_defaults, **cfg.as_dict()}
        return Config(cfg.template, tuple((k.name, values[k.name]) for k in self.space.knobs))


@dataclass(eq=False, kw_only=True)
class VTAConvTask(_VTATask):
    shape: ConvShape
    template: str = TEMPLATE
    knob_defaults: ClassVar[dict[str, Any]] = {k: getattr(ConvKnobs(), k) for k in CONV_CHOICE_KNOBS}

    def knobs(self, config: Config) -> ConvKnobs:
        values = {**self.knob_defaults, **config.as_dict()}
        return ConvKnobs(*(int(values[k]) for k in CONV_TILE_KNOBS),
                         *(str(values[k]) for k in CONV_CHOICE_KNOBS))

    def fits(self, knobs: ConvKnobs) -> bool:
        return conv_fits(self.shape, knobs, self.hw)

    def run(self, knobs: ConvKnobs) -> tuple[np.ndarray, Any]:
        d, s = self.data(), self.shape
        return run_conv(d["x"], d["w"], None, s.stride, s.pad, SHIFT, LO, HI, knobs, self.hw)

    def data(self) -> dict[str, np.ndarray]:
        """Fixed random int8 input and weights, and the integer reference output (computed once)."""
        if not self._data:
            s, rng = self.shape, np.random.default_rng(self.seed)
            x = rng.integers(-128, 128, (1, s.c, s.h, s.w), dtype=np.int8)
            w = rng.integers(-128, 128, (s.o, s.c, s.kh, s.kw), dtype=np.int8)
            self._data.update(x=x, w=w, want=conv_reference(x, w, None, s.stride, s.pad, SHIFT, LO, HI))
        return self._data

    def features_of(self, config: Config) -> tuple[float, ...] | None:
        """Knobs (log2, or the choice's index) and what they imply: buffer occupancy, tile and chunk
        counts, uops per GEMM, and how many chunks load inputs / weights once reuse is counted."""
        k, s, c = self.knobs(config), self.shape, self.hw
        if not conv_fits(s, k, c):
            return None
        ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
        rows, cols = (k.tile_h - 1) * s.stride + s.kh, (k.tile_w - 1) * s.stride + s.kw
        tiles = math.ceil(s.oh / k.tile_h) * math.ceil(s.ow / k.tile_w) * math.ceil(ob / k.tile_oc)
        chunks = tiles * math.ceil(ib / k.tile_ic)
        inp = k.tile_ic * rows * cols * k.vthreads / c.depth("inp")
        wgt = k.tile_oc * k.tile_ic * s.kh * s.kw * k.vthreads / c.depth("wgt")
        acc = k.tile_oc * (k.tile_h * k.tile_w + 1) * k.vthreads / c.depth("acc")
        gemm = k.tile_oc * k.tile_ic * s.kh * s.kw * k.tile_h * k.tile_w
        halo = rows * cols / max(1, k.tile_h * k.tile_w * s.stride * s.stride)
        inp_loads, wgt_loads = load_counts(s, k, c)
        return tuple(float(v) for v in (*(math.log2(getattr(k, n)) for n in CONV_TILE_KNOBS),
                                         ORDERS.index(k.order), ROUNDINGS.index(k.rounding),
                                         inp, wgt, acc, math.log2(tiles), math.log2(chunks),
                                         math.log2(gemm), halo, math.log2(1 + inp_loads),
                                         math.log2(1 + wgt_loads)))


def vta_conv_task(shape: ConvShape, hw: VTAConfig | None = None, name: str | None = None) -> VTAConvTask:
    hw = hw or VTAConfig()
    ob, ib = conv_blocks(shape, hw)
    extents = {"tile_h": shape.oh, "tile_w": shape.ow, "tile_oc": ob, "tile_ic": ib}
    space = Space(TEMPLATE, (*(Knob(n, tuple(tile_sizes(e))) for n, e in extents.items()),
                             Knob("vthreads", (1, 2)), Knob("order", ORDERS), Knob("rounding", ROUNDINGS)))
    best = default_conv_knobs(shape, hw)
    default = Config(TEMPLATE, tuple((k.name, getattr(best, k.name)) for k in space.knobs))
    return VTAConvTask(name=name or f"vta_conv{shape.c}x{shape.h}->{shape.o}", shape=shape, hw=hw,
                       target=vta_target(hw), space=space, default=default, key=conv_workload_key(shape),
                       workload=conv_workload(shape))


@dataclass(eq=False, kw_only=True)
class VTADenseTask(_VTATask):
    """An offloaded dense layer [M, K] x [N, K]: knobs tile_m (rows), tile_n / tile_k (blocks of
    output and reduction channels) and virtual threads."""

    m: int
    n: int
    k: int
    template: str = DENSE_TEMPLATE

    def knobs(self, config: Config) -> DenseKnobs:
        return DenseKnobs(*(int(config[k]) for k in DENSE_KNOBS))

    def fits(self, knobs: DenseKnobs) -> bool:
        return knobs in dense_space(self.m, self.n, self.k, self.hw)

    def data(self) -> dict[str, np.ndarray]:
        if not self._data:
            rng = np.random.default_rng(self.seed)
            x = rng.integers(-128, 128, (self.m, self.k), dtype=np.int8)
            w = rng.integers(-128, 128, (self.n, self.k), dtype=np.int8)
            self._data.update(x=x, w=w, want=dense_reference(x, w, None, SHIFT, LO, HI))
        return self._data

    def run(self, knobs: DenseKnobs) -> tuple[np.ndarray, Any]:
        d = self.data()
        return run_dense(d["x"], d["w"], None, SHIFT, LO, HI, knobs, self.hw)

    def features_of(self, config: Config) -> tuple[float, ...] | None:
        """Knobs (log2), buffer occupancy and tile counts."""
        kn, c = self.knobs(config), self.hw
        if not self.fits(kn):
            return None
        nt, kt = math.ceil(self.n / c.block_out), math.ceil(self.k / c.block_in)
        tiles = math.ceil(self.m / kn.tile_m) * math.ceil(nt / kn.tile_n)
        return tuple(float(v) for v in (*(math.log2(getattr(kn, f)) for f in DENSE_KNOBS),
                                         kn.tile_m * kn.tile_k * kn.vthreads / c.depth("inp"),
                                         kn.tile_n * kn.tile_k * kn.vthreads / c.depth("wgt"),
                                         math.log2(tiles), math.log2(tiles * math.ceil(kt / kn.tile_k))))


def vta_dense_task(m: int, n: int, k: int, hw: VTAConfig | None = None,
                   name: str | None = None) -> VTADenseTask:
    hw = hw or VTAConfig()
    extents = {"tile_m": m, "tile_n": math.ceil(n / hw.block_out), "tile_k": math.ceil(k / hw.block_in)}
    space = Space(DENSE_TEMPLATE, (*(Knob(f, tuple(tile_sizes(e))) for f, e in extents.items()),
                                   Knob("vthreads", (1, 2, 4))))
    best = default_dense_knobs(m, n, k, hw)
    default = Config(DENSE_TEMPLATE, tuple((kn.name, getattr(best, kn.name)) for kn in space.knobs))
    return VTADenseTask(name=name or f"vta_dense{m}x{k}->{n}", m=m, n=n, k=k, hw=hw, target=vta_target(hw),
                        space=space, default=default, key=dense_workload_key(m, n, k),
                        workload=dense_workload(m, n, k))


class VTAMeasurer:
    """`search.measure.Measurer`'s interface over the cycle model (deterministic, in process)."""

    builder = type("NoPool", (), {"pool": None})()  # no worker pool: features are computed in process

    def measure(self, task: VTAConvTask, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        return [self._one(task, inp.config) for inp in inputs]

    def remeasure(self, task: VTAConvTask, inputs: Sequence[MeasureInput],
                  rounds: int = 5) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            r = self._one(task, inp.config)
            out.append(MeasureResult(r.costs * rounds, r.error, r.message) if r.costs else r)
        return out

    def _one(self, task: VTAConvTask | VTADenseTask, config: Config) -> MeasureResult:
        knobs = task.knobs(config)
        if not task.fits(knobs):  # type: ignore[arg-type]
            return MeasureResult.failed(ErrorKind.ILLEGAL_SCHEDULE, f"{knobs} does not fit on chip")
        d = task.data()
        try:
            got, res = task.run(knobs)  # type: ignore[arg-type]
        except VTAError as e:  # the program itself is wrong: deadlock, overflow, out of range
            return MeasureResult.failed(ErrorKind.RUNTIME_CRASH, str(e))
        except (ValueError, IndexError, KeyError, ArithmeticError) as e:  # the lowering failed on it
            return MeasureResult.failed(ErrorKind.COMPILE_ERROR, f"{knobs}: {type(e).__name__}: {e}")
        if not np.array_equal(got, d["want"]):
            return MeasureResult.failed(ErrorKind.WRONG_ANSWER, f"{knobs}: output differs from the reference")
        return MeasureResult((res.seconds,), extra={"cycles": res.cycles, "utilization": res.utilization})

    def close(self) -> None:
        pass


__all__ = ["VTAConvTask", "VTADenseTask", "VTAMeasurer", "vta_conv_task", "vta_dense_task", "vta_target"]
