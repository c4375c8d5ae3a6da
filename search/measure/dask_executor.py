"""Measuring on a Dask distributed cluster: `DaskMeasurer` quacks like `Measurer`.

    with make_measurer("dask://scheduler:8786", settings=TimingSettings()) as m:
        results = m.measure(task, inputs)

Candidate code never runs inside a Dask worker process: each Dask task hands its job to a
crash-proof child (`search.measure.workers.Worker`) owned by that Dask worker, so a segfault or a
hang kills the child, not the Dask worker, and comes back as a typed `MeasureResult` exactly as in
the local measurer. Builds go out as parallel Dask tasks; timings also go out as Dask tasks, but
each holds a cluster-wide `distributed.Lock` named after its host while it runs, so two kernels are
never timed at once on one machine (they would each see half of it). As in `Measurer`, a batch's
timings start only after its builds are done. Each host keeps its own object cache, so a run that
lands on another host than its build recompiles the artifact's LLVM IR there (no lowering again).

`distributed` is an optional extra (`pip install "autorelay[dask]"`); it is imported only when a
`DaskMeasurer` is made.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from search.measure.jobs import FaultHook, TimingSettings, build_job, interleaved_job, prime_job, run_job
from search.measure.local import Measurer, _failure
from search.measure.result import BuildResult, ErrorKind, MeasureInput, MeasureResult
from search.measure.workers import Outcome, Worker
from search.task import Task

# ---- the Dask worker's side -------------------------------------------------------------------------
# State of one Dask worker process: an isolated child per Dask thread for builds and feature
# lowering, one child for timings (timings on a host are serialised by the host lock anyway).

_STATE_LOCK = threading.Lock()
_BUILDERS: dict[int, Worker] = {}
_RUNNER: list[Worker] = []
_PRIMED: set[tuple[int | None, str]] = set()


def _allow_children() -> None:
    """Dask starts worker processes as daemons, and multiprocessing forbids daemons to have children.
    Ours are daemons themselves and leave when their pipe closes, so none outlives this process."""
    proc: Any = mp.current_process()
    if proc._config.get("daemon"):
        proc._config["daemon"] = False


def _cache_dir(session: str) -> str:
    path = os.path.join(tempfile.gettempdir(), f"autorelay-dask-{session}")
    os.makedirs(path, exist_ok=True)
    return path


def _builder() -> Worker:
    with _STATE_LOCK:
        w = _BUILDERS.get(threading.get_ident())
        if w is None:
            w = _BUILDERS[threading.get_ident()] = Worker(f"autorelay-dask-build-{len(_BUILDERS)}")
        return w


def _runner() -> Worker:
    with _STATE_LOCK:
        if not _RUNNER:
            _RUNNER.append(Worker("autorelay-dask-run"))
        return _RUNNER[0]


def timing_lock_name(host: str) -> str:
    """The cluster-wide lock a timing holds on `host`."""
    return f"autorelay-timing-{host}"


def remote_call(fn: Callable[..., Any], args: Sequence[Any], timeout: float) -> Outcome:
    """Dask task: run fn(*args) in this thread's isolated child (builds, feature lowering)."""
    _allow_children()
    return _builder().call(fn, args, timeout)


def remote_build(session: str, task: Task, config: Any, hook: FaultHook | None, timeout: float) -> Outcome:
    """Dask task: compile one candidate into this host's object cache."""
    return remote_call(build_job, (task, config, _cache_dir(session), hook), timeout)


def remote_timed(session: str, task: Task, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float,
                 reference_timeout: float) -> Outcome:
    """Dask task: holding this host's timing lock, make sure the runner child has the task's inputs
    and reference (a call of its own, with a long timeout, so the candidate's timeout covers only the
    candidate), then run fn(task, <cache dir>, *args). A failed priming is returned as the outcome,
    its value prefixed with 'reference output'."""
    from distributed import Lock

    _allow_children()
    with Lock(timing_lock_name(socket.gethostname())):
        w = _runner()
        for _ in range(2):  # twice: priming may land on a child that is recycled right after
            if not w.will_restart() and (w.pid, task.key) in _PRIMED:
                break
            out = w.call(prime_job, (task,), reference_timeout)
            if out.status != "ok":
                return Outcome(out.status, f"reference output: {out.value}", out.seconds)
            _PRIMED.add((w.pid, task.key))
        return w.call(fn, (task, *args[:1], _cache_dir(session), *args[1:]), timeout)


def close_session(session: str) -> None:
    """Run on every worker at close: stop the children and drop the session's object cache."""
    with _STATE_LOCK:
        for w in [*_BUILDERS.values(), *_RUNNER]:
            w.close()
        _BUILDERS.clear()
        _RUNNER.clear()
        _PRIMED.clear()
    shutil.rmtree(os.path.join(tempfile.gettempdir(), f"autorelay-dask-{session}"), ignore_errors=True)


# ---- the client's side --------------------------------------------------------------------------------


def parse_dask_address(executor: str) -> str:
    """'dask://HOST:PORT' -> 'tcp://HOST:PORT' (a clear error for anything else)."""
    rest = executor[len("dask://"):] if executor.startswith("dask://") else None
    host, _, port = (rest or "").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise ValueError(f"executor {executor!r}: expected dask://HOST:PORT (e.g. dask://127.0.0.1:8786)")
    return f"tcp://{host}:{port}"


def _gather(futures: list[Any], deadline: float) -> list[Outcome]:
    """Outcomes of `futures` in order, waiting at most `deadline` seconds: a task that errored (its
    Dask worker died, say) becomes a crash, one still unfinished a timeout (and is cancelled)."""
    from distributed import wait

    t0 = time.perf_counter()
    with contextlib.suppress(TimeoutError):
        wait(futures, timeout=deadline)
    outs: list[Outcome] = []
    for f in futures:
        if f.status == "finished":
            outs.append(f.result())
        elif f.status == "error":
            e = f.exception()
            msg = f"dask task failed ({type(e).__name__}: {e})"
            outs.append(Outcome("crash", msg, time.perf_counter() - t0))
        else:
            f.cancel()
            outs.append(Outcome("timeout", f"no answer from the cluster within {deadline:g} s ({f.status})",
                                time.perf_counter() - t0))
    return outs


class DaskPool:
    """The builder's pool as tuners see it (`workers`, `map`): feature lowering on the cluster."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def workers(self) -> list[str]:
        return list(self.client.scheduler_info().get("workers", {})) or ["?"]

    def map(self, fn: Callable[..., Any], arg_list: Sequence[Sequence[Any]], timeout: float) -> list[Outcome]:
        futs = [self.client.submit(remote_call, fn, tuple(a), timeout, pure=False) for a in arg_list]
        return _gather(futs, timeout * max(1, len(futs)) + 30.0)

    def close(self) -> None:
        """Nothing to stop: the children belong to the cluster's workers (`DaskMeasurer.close`)."""


class DaskBuilder:
    """Compiles candidates as parallel Dask tasks; same results as `LocalBuilder.build`."""

    def __init__(self, client: Any, session: str, timeout: float = 60.0) -> None:
        self.client, self.session, self.timeout = client, session, timeout
        self.pool = DaskPool(client)

    def build(self, task: Any, inputs: Sequence[MeasureInput],
              hook: FaultHook | None = None) -> list[BuildResult | MeasureResult]:
        futs = [self.client.submit(remote_build, self.session, task, inp.config, hook, self.timeout,
                                   pure=False) for inp in inputs]
        slots = max(1, len(self.pool.workers))
        outs = _gather(futs, self.timeout * (len(futs) // slots + 1) + 30.0)
        return [o.value if o.status == "ok" else _failure(o, "build") for o in outs]

    def close(self) -> None:
        self.pool.close()


class DaskMeasurer:
    """`Measurer`'s interface on a Dask cluster: `measure`, `remeasure`, `close`, `settings`,
    `builder.pool`. `cluster` is a 'dask://HOST:PORT' address, a `distributed.Client`, or a cluster
    object (`LocalCluster`, ...); a client made here is closed by `close`, a given one is not."""

    def __init__(self, cluster: Any, settings: TimingSettings | None = None, build_timeout: float = 60.0,
                 hook: FaultHook | None = None, reference_timeout: float = 300.0,
                 connect_timeout: float = 30.0) -> None:
        try:
            from distributed import Client
        except ImportError as e:
            raise ValueError("the Dask executor needs the optional extra: pip install 'autorelay[dask]' "
                             f"(importing distributed failed: {e})") from e
        if isinstance(cluster, str):
            self.client, self._own = Client(parse_dask_address(cluster), timeout=connect_timeout), True
        elif isinstance(cluster, Client):
            self.client, self._own = cluster, False
        elif hasattr(cluster, "scheduler_address"):
            self.client, self._own = Client(cluster, timeout=connect_timeout), True
        else:
            raise TypeError(f"DaskMeasurer needs a dask://HOST:PORT address, a Client or a cluster, "
                            f"got {type(cluster).__name__}")
        self.session = uuid.uuid4().hex[:12]
        self.settings = settings or TimingSettings()
        self.reference_timeout = reference_timeout
        self.hook = hook
        self.builder = DaskBuilder(self.client, self.session, build_timeout)

    def _timed(self, task: Any, calls: list[tuple[Callable[..., Any], tuple[Any, ...], float]],
               ) -> list[Outcome]:
        """Submit timed jobs (fn, args after the task, timeout); each holds its host's timing lock."""
        futs = [self.client.submit(remote_timed, self.session, task, fn, args, timeout,
                                   self.reference_timeout, pure=False) for fn, args, timeout in calls]
        deadline = self.reference_timeout + sum(t + 5.0 for _, _, t in calls) + 30.0
        return _gather(futs, deadline)

    def measure(self, task: Task, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        builds = self.builder.build(task, inputs, self.hook)
        results: list[MeasureResult | None] = []
        todo: list[tuple[int, BuildResult]] = []
        for i, b in enumerate(builds):
            if isinstance(b, MeasureResult):
                results.append(b)
            elif b.error is not ErrorKind.NONE:
                results.append(MeasureResult.failed(b.error, b.message, build_s=b.build_s))
            else:
                results.append(None)
                todo.append((i, b))
        calls = [(run_job, (inputs[i].config, self.settings, self.hook, b.code), self.settings.timeout)
                 for i, b in todo]
        for (i, b), out in zip(todo, self._timed(task, calls)):
            if out.status != "ok":
                r = _stage_failure(out)
                results[i] = MeasureResult.failed(r.error, r.message, b.build_s, r.run_s)
            else:
                r = out.value
                results[i] = MeasureResult(r.costs, r.error, r.message, b.build_s, r.run_s,
                                           {**r.extra, "features": b.features})
        return [r for r in results if r is not None]

    def remeasure(self, task: Task, inputs: Sequence[MeasureInput], rounds: int = 5) -> list[MeasureResult]:
        """All `inputs` timed round-robin in one job on one host (`interleaved_job`)."""
        s = self.settings
        timeout = s.timeout * (1 + len(inputs)) + rounds * len(inputs) * s.min_repeat_ms / 1e3
        out = self._timed(task, [(interleaved_job, ([i.config for i in inputs], s, rounds), timeout)])[0]
        if out.status == "ok":
            return out.value
        return [_stage_failure(out, "interleaved run")] * len(inputs)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a cluster already gone has nothing left to clean
            self.client.run(close_session, self.session)
        if self._own:
            self.client.close()

    def __enter__(self) -> DaskMeasurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stage_failure(out: Outcome, stage: str = "run") -> MeasureResult:
    """A failed timed job as a result; a failed priming keeps `_failure`'s wording for it."""
    text, prefix = str(out.value), "reference output: "
    if text.startswith(prefix):
        return _failure(Outcome(out.status, text[len(prefix):], out.seconds), "reference output")
    return _failure(out, stage)


def make_measurer(executor: str | None = None, build_workers: int = 2, settings: TimingSettings | None = None,
                  build_timeout: float = 60.0, hook: FaultHook | None = None) -> Measurer | DaskMeasurer:
    """The measurer an `--executor` value names: None or 'local' -> this machine's `Measurer`
    (`build_workers` build processes); 'dask://HOST:PORT' -> a `DaskMeasurer` on that scheduler."""
    if executor is None or executor == "local":
        return Measurer(build_workers, settings, build_timeout, hook)
    if executor.startswith("dask://"):
        return DaskMeasurer(executor, settings, build_timeout, hook)
    raise ValueError(f"unknown executor {executor!r}: use 'local' or dask://HOST:PORT")


__all__ = ["DaskBuilder", "DaskMeasurer", "DaskPool", "make_measurer", "parse_dask_address"]
