"""Reusable worker processes that survive their jobs' crashes and hangs.

Spawning a process per candidate costs more than measuring it, so each `Worker` is a long-lived
child that runs jobs sent over a pipe. The parent waits with a deadline: a job that overruns gets
its worker SIGKILLed (a hang becomes a TIMEOUT), a worker that dies mid-job (a segfaulting kernel)
is reported as a crash with its signal; either way the worker is replaced lazily on the next call.
Workers are forked from a forkserver that has already imported the compiler, so a replacement
starts in milliseconds rather than re-importing NumPy and LLVM; and a worker is recycled after
`max_jobs` jobs so JIT-compiled modules do not accumulate forever.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from autorelay.errors import AutoRelayError

_PRELOAD = ["search.measure.jobs"]
_CTX_LOCK = threading.Lock()
_CTX: Any = None


def _context() -> Any:
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            _CTX = ctx
        return _CTX


class WorkerStartError(AutoRelayError):
    """Measurement workers cannot be started (no processes, no memory, a broken installation).
    An infrastructure failure, not a candidate's: nothing is logged for the candidates."""


START_TRIES = 3  # a failed start is retried (a transient fork failure); then WorkerStartError
START_TIMEOUT_S = 60.0  # a fresh worker must say it is ready within this (imports are preloaded)


def _exit_with_tuner() -> None:
    """Exit this worker as soon as the tuner that started it is gone. A worker busy in a long job
    would otherwise notice only at its next pipe read, and run on at full speed for as long as the
    job takes. The forkserver is no help: it outlives the tuner while any worker holds its
    "client alive" pipe, so the watch is on multiprocessing's parent sentinel, which reads as
    closed once the tuner exits, however it died."""
    parent = mp.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        mp.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-tuner", daemon=True).start()


def _serve(conn: Connection) -> None:
    """Child main loop: say "ready", then run (fn, args) requests until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _exit_with_tuner()
    try:
        conn.send(("ready", os.getpid()))
    except (BrokenPipeError, OSError):
        return
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", fn(*args))
        except BaseException as e:
            reply = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


@dataclass(frozen=True)
class Outcome:
    """How a job ended: 'ok' (value is its result), 'error' (an exception in the job; value is its
    text), 'crash' (the worker died; value says how) or 'timeout' (the worker was killed)."""

    status: str
    value: Any
    seconds: float = 0.0


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker exited"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with status {code}"


class Worker:
    """One child process, used by one parent thread at a time."""

    def __init__(self, name: str, max_jobs: int = 200, serve: Callable[[Connection], None] = _serve) -> None:
        self.name = name
        self.max_jobs = max_jobs
        self.serve = serve  # the child's main loop (tests pass one that fails to start)
        self._proc: Any = None
        self._conn: Connection | None = None
        self._jobs = 0
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def will_restart(self) -> bool:
        """Whether the next call starts a fresh process (none yet, dead, or due for recycling)."""
        return self._proc is None or not self._proc.is_alive() or self._jobs >= self.max_jobs

    def _start(self) -> None:
        """Start the child and wait for its "ready"; retried, then WorkerStartError. Without the
        handshake a worker that dies while starting looked like a crash of the candidate it was
        sent, and that config was logged as a failure and never tried again."""
        why = ""
        for attempt in range(START_TRIES):
            if attempt:
                time.sleep(0.1 * 2**attempt)  # back off: a transient fork/memory shortage may pass
            try:
                why = self._try_start()
            except OSError as e:  # fork or pipe failure (EAGAIN, ENOMEM, EMFILE)
                why = f"{type(e).__name__}: {e}"
            if not why:
                self.starts += 1
                return
            self._kill()
        raise WorkerStartError(f"measurement worker {self.name} cannot start ({START_TRIES} tries): {why}")

    def _try_start(self) -> str:
        """Start one child; "" once it said ready, else why not."""
        ctx = _context()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=self.serve, args=(child,), name=self.name, daemon=True)
        self._proc, self._conn, self._jobs = None, parent, 0
        try:
            proc.start()
        finally:
            child.close()
        self._proc = proc
        try:
            if parent.poll(START_TIMEOUT_S) and parent.recv()[0] == "ready":
                return ""
        except (EOFError, OSError):
            pass
        proc.join(1)
        return _describe_exit(proc.exitcode) if proc.exitcode is not None else "no ready signal"

    @property
    def restarts(self) -> int:
        """Processes started after the first (crash, timeout or recycling replacements)."""
        return max(0, self.starts - 1)

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.is_alive():
            with contextlib.suppress(ProcessLookupError):  # it may exit on its own meanwhile
                os.kill(proc.pid, signal.SIGKILL)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return None
        proc.join(5)
        return proc.exitcode

    def call(self, fn: Callable[..., Any], args: Sequence[Any], timeout: float) -> Outcome:
        """Run fn(*args) in the child; never raises for the job's own failures."""
        if self.will_restart():
            self._kill()
            self._start()
        assert self._conn is not None
        self._jobs += 1
        t0 = time.perf_counter()
        try:
            self._conn.send((fn, tuple(args)))
            ready = self._conn.poll(timeout)
        except (BrokenPipeError, EOFError, OSError):
            ready = True
        if not ready:
            self._kill()
            msg = f"no answer within {timeout:g} s; worker killed"
            return Outcome("timeout", msg, time.perf_counter() - t0)
        try:
            status, value = self._conn.recv()
        except (EOFError, OSError, ConnectionResetError):
            assert self._proc is not None
            self._proc.join(5)
            code = self._proc.exitcode
            self._kill()
            return Outcome("crash", _describe_exit(code), time.perf_counter() - t0)
        return Outcome(status, value, time.perf_counter() - t0)

    def close(self) -> None:
        self._kill()


class WorkerPool:
    """N workers; `map` runs jobs on them concurrently (one thread per worker) in input order."""

    def __init__(self, size: int, name: str = "autorelay-worker", max_jobs: int = 200) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {size}")
        self.workers = [Worker(f"{name}-{i}", max_jobs) for i in range(size)]

    def map(self, fn: Callable[..., Any], arg_list: Sequence[Sequence[Any]], timeout: float) -> list[Outcome]:
        results: list[Outcome | None] = [None] * len(arg_list)
        todo: queue.Queue[int] = queue.Queue()
        for i in range(len(arg_list)):
            todo.put(i)

        failures: list[BaseException] = []

        def drain(w: Worker) -> None:
            while not failures:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = w.call(fn, arg_list[i], timeout)
                except BaseException as e:  # WorkerStartError: the caller must see it, not a result
                    failures.append(e)
                    return

        active = self.workers[: max(1, min(len(self.workers), len(arg_list)))]
        if len(active) == 1:
            drain(active[0])
        else:
            threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in active]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if failures:
            raise failures[0]
        return [r if r is not None else Outcome("crash", "job was never run") for r in results]

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.workers)

    def close(self) -> None:
        for w in self.workers:
            w.close()
