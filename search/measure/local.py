"""Local measurement: a builder pool that compiles candidates in parallel, and a runner that times
them one at a time in an isolated worker.

Builds share an on-disk object cache with the runner, so the runner's worker loads each compiled
candidate without re-running LLVM. Timings never overlap each other or the builds (the machine has
two cores: two kernels timed at once would each see half a machine), so `Measurer.measure` builds a
batch in parallel, then times the survivors serially.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any

from search.measure.jobs import FaultHook, TimingSettings, build_job, interleaved_job, prime_job, run_job
from search.measure.result import BuildResult, ErrorKind, MeasureInput, MeasureResult
from search.measure.scratch import make_scratch_dir
from search.measure.workers import Outcome, WorkerPool
from search.task import Task


def _failure(out: Outcome, stage: str) -> MeasureResult:
    if out.status == "timeout":
        return MeasureResult.failed(ErrorKind.TIMEOUT, f"{stage}: {out.value}", run_s=out.seconds)
    if out.status == "crash":
        return MeasureResult.failed(ErrorKind.RUNTIME_CRASH, f"{stage}: {out.value}", run_s=out.seconds)
    kind = ErrorKind.COMPILE_ERROR if stage == "build" else ErrorKind.RUNTIME_CRASH
    return MeasureResult.failed(kind, f"{stage}: {out.value}", run_s=out.seconds)


class LocalBuilder:
    """Compiles candidates in `workers` processes; returns a BuildResult (or failure) per input."""

    def __init__(self, cache_dir: str, workers: int = 2, timeout: float = 60.0) -> None:
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.pool = WorkerPool(workers, "autorelay-build")

    def build(self, task: Task, inputs: Sequence[MeasureInput],
              hook: FaultHook | None = None) -> list[BuildResult | MeasureResult]:
        jobs = [(task, inp.config, self.cache_dir, hook) for inp in inputs]
        outs = self.pool.map(build_job, jobs, self.timeout)
        return [o.value if o.status == "ok" else _failure(o, "build") for o in outs]

    def close(self) -> None:
        self.pool.close()


class LocalRunner:
    """Times candidates serially in one worker process (replaced when a candidate kills it)."""

    def __init__(self, cache_dir: str, settings: TimingSettings | None = None,
                 reference_timeout: float = 300.0) -> None:
        self.cache_dir = cache_dir
        self.settings = settings or TimingSettings()
        self.pool = WorkerPool(1, "autorelay-run")
        self.reference_timeout = reference_timeout
        self._ready: set[tuple[int | None, str]] = set()  # (worker pid, task key) with inputs + reference

    def _prime(self, task: Task) -> MeasureResult | None:
        """Have the worker compute the task's inputs and reference output in a call of its own, with
        a long timeout (a naive reference loop nest can take seconds): then a candidate's timeout
        covers only the candidate. A failure here is returned for the candidate."""
        w = self.pool.workers[0]
        for _ in range(2):  # twice: priming may land on a worker that is recycled right after
            if not w.will_restart() and (w.pid, task.key) in self._ready:
                return None
            out = w.call(prime_job, (task,), self.reference_timeout)
            if out.status != "ok":
                return _failure(out, "reference output")
            self._ready.add((w.pid, task.key))
        return None

    def run(self, task: Task, inp: MeasureInput, hook: FaultHook | None = None,
            code: Any = None) -> MeasureResult:
        failed = self._prime(task)
        if failed is not None:
            return failed
        args = (task, inp.config, self.cache_dir, self.settings, hook, code)
        out = self.pool.workers[0].call(run_job, args, self.settings.timeout)
        return out.value if out.status == "ok" else _failure(out, "run")

    def interleaved(self, task: Task, inputs: Sequence[MeasureInput], rounds: int) -> list[MeasureResult]:
        failed = self._prime(task)
        if failed is not None:
            return [failed] * len(inputs)
        s = self.settings
        timeout = s.timeout * (1 + len(inputs)) + rounds * len(inputs) * s.min_repeat_ms / 1e3
        out = self.pool.workers[0].call(interleaved_job, (task, [i.config for i in inputs], self.cache_dir,
                                                          self.settings, rounds), timeout)
        if out.status == "ok":
            return out.value
        return [_failure(out, "interleaved run")] * len(inputs)

    def close(self) -> None:
        self.pool.close()


class Measurer:
    """Builder + runner sharing a private object cache: `measure(task, inputs)` -> results in order."""

    def __init__(self, build_workers: int = 2, settings: TimingSettings | None = None,
                 build_timeout: float = 60.0, hook: FaultHook | None = None) -> None:
        self.cache_dir = make_scratch_dir()
        self.builder = LocalBuilder(self.cache_dir, build_workers, build_timeout)
        self.runner = LocalRunner(self.cache_dir, settings)
        self.hook = hook

    @property
    def settings(self) -> TimingSettings:
        return self.runner.settings

    def measure(self, task: Task, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        builds = self.builder.build(task, inputs, self.hook)
        results: list[MeasureResult] = []
        for inp, b in zip(inputs, builds):
            if isinstance(b, MeasureResult):
                results.append(b)
            elif b.error is not ErrorKind.NONE:
                results.append(MeasureResult.failed(b.error, b.message, build_s=b.build_s))
            else:
                r = self.runner.run(task, inp, self.hook, b.code)
                results.append(MeasureResult(r.costs, r.error, r.message, b.build_s, r.run_s,
                                             {**r.extra, "features": b.features}))
        return results

    def remeasure(self, task: Task, inputs: Sequence[MeasureInput], rounds: int = 5) -> list[MeasureResult]:
        return self.runner.interleaved(task, inputs, rounds)

    def close(self) -> None:
        self.builder.close()
        self.runner.close()
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if os.path.isdir(getattr(self, "cache_dir", "")):
            shutil.rmtree(self.cache_dir, ignore_errors=True)
