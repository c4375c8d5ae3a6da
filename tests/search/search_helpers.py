"""Shared helpers for the search tests: tiny workloads with NumPy oracles, a fault-injecting hook
(module level so it pickles into measurement workers), and a synthetic measurer for tuner tests."""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass

import numpy as np

from autorelay.target import Target
from autorelay.te import nn
from autorelay.te import tensor as te
from search.measure.result import MeasureResult
from search.task import Task, kernel_task


def dense_ref(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ w.astype(np.float64).T


def dense_task(m: int = 16, n: int = 24, k: int = 32, target: Target | None = None) -> Task:
    a, w = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="W")
    cdef = te.make_def([a, w], nn.dense(a, w), "dense")
    return kernel_task(cdef, target, reference=dense_ref, name=f"dense{m}x{n}x{k}")


@dataclass(frozen=True)
class Faults:
    """Injects a fault into candidates whose `knob` has a planned value: 'segv' (the worker kills
    itself with SIGSEGV mid-run), 'hang' (sleeps forever), 'wrong' (corrupts one output element),
    'compile' (raises while building)."""

    plan: tuple[tuple[object, str], ...]
    knob: str = "tile_m"

    def __call__(self, stage: str, config, outputs) -> None:  # type: ignore[no-untyped-def]
        mode = dict(self.plan).get(config[self.knob])
        if stage == "build" and mode == "compile":
            raise RuntimeError("injected compile failure")
        if stage != "run":
            return
        if mode == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "wrong":
            outputs[0].flat[3] += 1.0


SWEET = {"tile_m": 4, "tile_n_vectors": 2, "unroll_k": 2, "outer": "m"}


def synthetic_cost(task: Task, index: int) -> float:
    """A smooth cost of the knob *values* (so it means the same on similar workloads), with one
    optimum at SWEET — for tuner tests without timing noise."""
    cfg = task.config(index)
    pen = 0.0
    for name, v in cfg.values:
        want = SWEET.get(name)
        if isinstance(v, int) and isinstance(want, int):
            pen += (math.log2(v) - math.log2(want)) ** 2
        elif want is not None:
            pen += 0.0 if v == want else 0.5
    return 1e-3 * (1.0 + pen)


class SyntheticMeasurer:
    """Quacks like Measurer; costs come from `synthetic_cost`, failures from a set of indices."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.measured: list[int] = []
        self.builder = type("B", (), {"pool": None})()

    def measure(self, task: Task, inputs) -> list[MeasureResult]:  # type: ignore[no-untyped-def]
        from search.measure.result import ErrorKind

        out = []
        for inp in inputs:
            self.measured.append(inp.index)
            if inp.index in self.fail:
                out.append(MeasureResult.failed(ErrorKind.ILLEGAL_SCHEDULE, "synthetic failure"))
            else:
                out.append(MeasureResult((synthetic_cost(task, inp.index),) * 3))
        return out

    def remeasure(self, task: Task, inputs, rounds: int = 5) -> list[MeasureResult]:  # type: ignore[no-untyped-def]
        return [MeasureResult((synthetic_cost(task, i.index) if i.index >= 0 else math.inf,) * rounds)
                if i.index >= 0 else MeasureResult((2e-3,) * rounds) for i in inputs]


def slow_dense_ref(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """An oracle slower than a candidate's timeout (like a naive loop nest on a big workload)."""
    time.sleep(1.5)
    return dense_ref(a, w)


def dies_at_start(conn) -> None:  # type: ignore[no-untyped-def]
    """A worker main loop that exits before it is ready (a worker that cannot start)."""
    os._exit(3)


@dataclass(frozen=True)
class FailsFirstStart:
    """A worker main loop that fails the first start (marked by creating `flag`), then serves."""

    flag: str

    def __call__(self, conn) -> None:  # type: ignore[no-untyped-def]
        from search.measure.workers import _serve

        try:
            fd = os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            _serve(conn)
            return
        os.close(fd)
        os._exit(3)
