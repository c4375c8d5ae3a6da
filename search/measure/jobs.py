"""The functions measurement workers run (module level, so they pickle by name).

`build_job` compiles a candidate (`autorelay.kernel.emit_kernel` + `load_kernel`, the one compile
seam) to the shared on-disk object cache and returns its loop-IR features and `KernelCode`;
`run_job` loads that code from the cache (skipping LLVM's optimiser), checks its output against
the task's reference, then times it; `interleaved_job` times several candidates round-robin in one
process so that machine noise hits them alike. Worker-side state (task inputs, reference outputs)
is cached per task key, so a reused worker pays for them once.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.errors import ScheduleError
from autorelay.kernel import BoundKernel, Kernel, KernelCode, emit_kernel, load_kernel
from autorelay.schedule.space import Config
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef
from search.features import code_features
from search.measure.result import BuildResult, ErrorKind, MeasureResult
from search.task import Task

# A fault hook is called in the worker as hook(stage, config, outputs): stage "build" before
# compiling (outputs empty) and "run" after the checked first call, before the reference check.
# It exists to produce crashes, hangs and wrong answers on purpose (tests, chaos runs).
FaultHook = Callable[[str, Config, Sequence[np.ndarray]], None]


@dataclass(frozen=True)
class TimingSettings:
    """How a candidate is timed: `warmup` untimed calls, then `repeat` timings of `number` calls
    each, `number` raised until one timing lasts at least `min_repeat_ms`. `cold_constants`: a
    CPU kernel's constant inputs (a model's weights) are evicted from the caches before each timed
    call, as a model's inference finds them (see `autorelay.codegen.llvm.cache_evict`); tasks
    without constants (standalone workloads) are timed back to back either way."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 20.0
    warmup: int = 1
    timeout: float = 10.0
    cold_constants: bool = True


_TASKS: dict[str, Task] = {}


def _task(task: Task) -> Task:
    """The worker's cached copy (inputs and reference computed once per worker)."""
    cached = _TASKS.get(task.key)
    if cached is None:
        if len(_TASKS) > 16:
            _TASKS.clear()
        cached = _TASKS[task.key] = task
    return cached


def compile_candidate(task: Task, config: Config, cache_dir: str) -> tuple[Kernel, KernelCode]:
    """Emit and load one candidate through the one compile seam (the object lands in `cache_dir`,
    so the runner loads it from there instead of emitting again)."""
    code = emit_kernel(task.cdef, config, task.target)
    return load_kernel(code, cache_dir), code


def emit_job(cdefs: Sequence[ComputeDef], config: Config | None, target: Target,
             cache_dir: str) -> tuple[KernelCode, ...] | None:
    """Emit and compile (the objects into `cache_dir`) the kernels of one schedule choice of a
    model build (`search.kernel_prefetch`); None when the scheduler refuses it (the build meets
    the same refusal and handles it). The computes are left out of the answer: they carry the
    layer's weights, and the parent has them."""
    try:
        codes = [emit_kernel(c, config, target) for c in cdefs]
    except ScheduleError:
        return None
    for code in codes:
        load_kernel(code, cache_dir)
    return tuple(dataclasses.replace(code, cdef=None) for code in codes)


def prime_job(task: Task) -> bool:
    """Compute (and cache in this worker) the task's inputs and reference outputs."""
    _task(task).expected()
    return True


def build_job(task: Task, config: Config, cache_dir: str, hook: FaultHook | None = None) -> BuildResult:
    t0 = time.perf_counter()
    try:
        if hook is not None:
            hook("build", config, ())
        _, code = compile_candidate(task, config, cache_dir)
    except ScheduleError as e:
        return BuildResult(ErrorKind.ILLEGAL_SCHEDULE, str(e), time.perf_counter() - t0)
    except Exception as e:  # anything else while lowering/compiling is a compile error
        return BuildResult(ErrorKind.COMPILE_ERROR, f"{type(e).__name__}: {e}", time.perf_counter() - t0)
    feats = code_features(code, config)  # for cuda: with the registers ptxas reports for its PTX
    # without its compute, which carries the layer's weights (megabytes, pickled to the tuner and
    # again to the runner); both have the task, and `run_job` puts the task's compute back
    light = dataclasses.replace(code, cdef=None)
    return BuildResult(ErrorKind.NONE, "", time.perf_counter() - t0, feats, light)


def _prepare(task: Task, config: Config, cache_dir: str, hook: FaultHook | None,
             code: KernelCode | None = None) -> BoundKernel | MeasureResult:
    """Load, bind, run once and check one candidate; a MeasureResult when it fails."""
    if code is not None and code.cdef is None:  # a build result's code (see `build_job`)
        code = dataclasses.replace(code, cdef=task.cdef)
    try:
        kernel = load_kernel(code, cache_dir) if code is not None else compile_candidate(
            task, config, cache_dir)[0]
    except ScheduleError as e:
        return MeasureResult.failed(ErrorKind.ILLEGAL_SCHEDULE, str(e))
    except Exception as e:
        return MeasureResult.failed(ErrorKind.COMPILE_ERROR, f"{type(e).__name__}: {e}")
    bound = kernel.bind(*task.inputs())
    for o in bound.outputs:  # a kernel that skips elements must not pass on leftovers
        if o.dtype.kind == "f":
            o.fill(np.nan)
        elif o.dtype.kind in "iu":
            o.fill(np.iinfo(o.dtype).max)
    bound()
    if hook is not None:
        hook("run", config, bound.outputs)
    msg = task.check(bound.outputs)
    if msg is not None:
        return MeasureResult.failed(ErrorKind.WRONG_ANSWER, msg)
    return bound


def _calibrate(bound: BoundKernel, s: TimingSettings) -> int:
    """Warm up, then grow `number` until `number` calls last at least `min_repeat_ms` (a single
    cold call overestimates the cost, so the estimate is re-checked rather than trusted)."""
    for _ in range(s.warmup):
        bound()
    number = s.number
    goal = s.min_repeat_ms / 1000.0
    for _ in range(8):
        t = _time(bound, number, s) * number
        if t >= goal:
            break
        number = max(number * 2, math.ceil(number * goal / max(t, 1e-9) * 1.2))
    return number


def _time(bound: BoundKernel, number: int, s: TimingSettings) -> float:
    """Seconds per call: wall clock on the CPU (constants evicted first, with `cold_constants`),
    device time (CUDA events) for GPU kernels."""
    if s.cold_constants and isinstance(bound, BoundKernel):
        return bound.time(number, cold=bound.constant_inputs())
    return bound.time(number)


def run_job(task: Task, config: Config, cache_dir: str, settings: TimingSettings,
            hook: FaultHook | None = None, code: KernelCode | None = None) -> MeasureResult:
    return time_candidate(_task(task), config, cache_dir, settings, hook, code)


def time_candidate(task: Task, config: Config, cache_dir: str, settings: TimingSettings,
                   hook: FaultHook | None = None, code: KernelCode | None = None) -> MeasureResult:
    """Compile (or load `code`), check and time one candidate in this process: a runner worker's
    job, or a search timing a kernel the way the tuner would, without a worker pool."""
    t0 = time.perf_counter()
    got = _prepare(task, config, cache_dir, hook, code)
    if isinstance(got, MeasureResult):
        return MeasureResult.failed(got.error, got.message, run_s=time.perf_counter() - t0)
    number = _calibrate(got, settings)
    costs = tuple(_time(got, number, settings) for _ in range(settings.repeat))
    return MeasureResult(costs, ErrorKind.NONE, "", 0.0, time.perf_counter() - t0, {"number": number})


def interleaved_job(task: Task, configs: Sequence[Config], cache_dir: str, settings: TimingSettings,
                    rounds: int) -> list[MeasureResult]:
    """Time every candidate once per round, rotating the order each round, so a noisy moment
    spreads over all of them instead of flattering whichever happened to run in a quiet one."""
    task = _task(task)
    prepared: list[Any] = [_prepare(task, c, cache_dir, None) for c in configs]
    live = [i for i, p in enumerate(prepared) if not isinstance(p, MeasureResult)]
    numbers = {i: _calibrate(prepared[i], settings) for i in live}
    costs: dict[int, list[float]] = {i: [] for i in live}
    for r in range(rounds):
        order = live[r % len(live):] + live[: r % len(live)] if live else []
        for i in order:
            costs[i].append(_time(prepared[i], numbers[i], settings))
    return [p if isinstance(p, MeasureResult)
            else MeasureResult(tuple(costs[i]), extra={"number": numbers[i]})
            for i, p in enumerate(prepared)]


def features_job(task: Task, configs: Sequence[Config]) -> list[tuple[float, ...] | None]:
    """Loop-IR features of configs lowered (not compiled) in a worker; None for illegal ones."""
    from search.tuners.model_based import lower_features

    return [lower_features(task, c) for c in configs]
