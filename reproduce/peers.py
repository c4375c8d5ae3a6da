"""Timing peers fairly: each backend in its own process, one at a time, in alternating blocks.

Why: timed call by call in one process, the peers disturb each other — PyTorch's and ONNX
Runtime's idle worker threads spin (or sleep and must be woken) on the same cores AutoRelay's
thread team needs, and which one ran last decides the caches. So every backend gets a worker
process that builds it once and then, when asked, runs a block of calls and reports each call's
time. The parent asks one worker at a time, rotating the order every round; while one runs, the
others wait in a blocking pipe read (no spinning: OMP_WAIT_POLICY=PASSIVE, ORT's spinning off,
AutoRelay's team parked after each block). A block lasts about `block_s`, so a noisy moment hits
one block of one backend, and the spread of the block medians shows it.

    results = time_isolated({"autorelay": make_ours, "torch": make_torch}, rounds=10)
    results["autorelay"].median_ms, results["autorelay"].spread_ms   # (p10, p90) of block medians
    paired_ratio(results["autorelay"], results["torch"])   # (median, p10, p90) of per-round ratios

The host's speed drifts over minutes (10-30% on the project's shared 2-core machine), which widens
every peer's spread alike; one round's blocks run within a second or two of each other, so the
ratio of two peers' block medians in the same round cancels most of the drift. `paired_ratio`
reports those per-round ratios: the figure to read when two builds differ by a few percent.

A factory is a module-level function (it is sent to the worker by name) returning
(callable running one inference, its output as a NumPy array).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Factory = Callable[..., tuple[Callable[[], Any], np.ndarray]]


@dataclass
class PeerTiming:
    name: str
    block_medians_s: list[float] = field(default_factory=list)
    block_rounds: list[int] = field(default_factory=list)  # the round of each block median
    calls: list[float] = field(default_factory=list)
    output: np.ndarray | None = None
    error: str = ""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.calls) * 1e3 if self.calls else float("nan")

    @property
    def spread_ms(self) -> tuple[float, float]:
        """(10th, 90th) percentile of the block medians, in ms: how much the latency moved."""
        if not self.block_medians_s:
            return float("nan"), float("nan")
        lo, hi = np.percentile(self.block_medians_s, [10, 90])
        return float(lo) * 1e3, float(hi) * 1e3


def paired_ratio(a: PeerTiming, b: PeerTiming) -> tuple[float, float, float]:
    """(median, p10, p90) of `a`'s block median over `b`'s in each round both were timed (< 1: `a`
    is faster); NaNs when they share no round."""
    theirs = dict(zip(b.block_rounds, b.block_medians_s))
    ratios = [t / theirs[r] for r, t in zip(a.block_rounds, a.block_medians_s) if r in theirs]
    if not ratios:
        return float("nan"), float("nan"), float("nan")
    lo, hi = np.percentile(ratios, [10, 90])
    return statistics.median(ratios), float(lo), float(hi)


def _worker(conn: Any, factory: Factory, args: tuple) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        run, output = factory(*args)
        for _ in range(3):  # warm-up: first-call allocations, caches, thread start
            run()
    except Exception as e:  # reported by the parent as this peer's error, not a crash of the run
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", np.asarray(output)))
    park = _parker()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        seconds = msg
        times: list[float] = []
        t_end = time.perf_counter() + seconds
        while not times or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        park()
        conn.send(times)


def _parker() -> Callable[[], None]:
    """AutoRelay's thread team parks (stops spinning) between blocks; other peers have none."""
    try:
        from autorelay.codegen.llvm.threads import park_all
    except ImportError:
        return lambda: None
    return park_all


def time_isolated(factories: dict[str, tuple[Factory, tuple]], rounds: int = 10,
                  block_s: float = 0.25) -> dict[str, PeerTiming]:
    """Time each peer in its own process, alternating blocks (see the module docstring)."""
    ctx = mp.get_context("spawn")
    peers: dict[str, tuple[Any, Any]] = {}
    out = {name: PeerTiming(name) for name in factories}
    for name, (factory, args) in factories.items():  # built one after another: builds do not overlap
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, factory, args), daemon=True)
        proc.start()
        child.close()  # the worker holds the only other end: its death is an EOF here
        try:
            status, payload = _receive(parent, proc)
        except PeerDied as e:
            out[name].error = str(e)
            continue
        if status == "error":
            out[name].error = payload
            proc.join()
            continue
        out[name].output = payload
        peers[name] = (proc, parent)
    try:
        for r in range(rounds):
            names = list(peers)
            order = names[r % len(names):] + names[: r % len(names)] if names else []
            for name in order:
                proc, conn = peers[name]
                try:
                    conn.send(block_s)
                    times = _receive(conn, proc)
                except (PeerDied, OSError) as e:  # this peer is out; the others go on
                    out[name].error = f"during timing: {e}"
                    del peers[name]
                    continue
                out[name].calls.extend(times)
                out[name].block_medians_s.append(statistics.median(times))
                out[name].block_rounds.append(r)
    finally:
        for proc, conn in peers.values():
            with contextlib.suppress(OSError):
                conn.send(None)
            proc.join(timeout=10)
    return out


class PeerDied(RuntimeError):
    """A worker process ended without answering (a crash in native code, a kill)."""


def _receive(conn: Any, proc: Any) -> Any:
    """The worker's next message; `PeerDied` (with its exit code) when it died instead of answering."""
    try:
        return conn.recv()
    except EOFError:
        proc.join(timeout=10)
        raise PeerDied(f"the worker process died (exit code {proc.exitcode})") from None


__all__ = ["PeerTiming", "paired_ratio", "time_isolated"]
