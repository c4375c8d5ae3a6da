"""What the kernel benchmarks share: interleaved median timing and pinning every library to the
same thread count.

Scripts set `OPENBLAS_THREAD_TIMEOUT` themselves, before NumPy is first imported (OpenBLAS reads it
once at load): its idle worker otherwise spins on a core for ~100 ms after each call and slows
whichever kernel is timed next.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from autorelay.codegen.llvm.threads import park_all


def median_times(fns: list[Callable[[], object]], rounds: int, min_time: float = 0.02,
                 clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Median seconds per call of each fn, timed alternately (one batch of each per round, each
    batch at least `min_time` long), so a noisy moment spreads over all of them."""
    for f in fns:
        f()
    batch = []
    for f in fns:
        t0 = clock()
        f()
        batch.append(max(1, int(min_time / max(clock() - t0, 1e-7))))
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for f, n, out in zip(fns, batch, samples):
            t0 = clock()
            for _ in range(n):
                f()
            out.append((clock() - t0) / n)
            park_all()  # our idle workers must not spin through the next library's batch
    return [statistics.median(s) for s in samples]


def best_and_median(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(best, median) seconds of `reps` calls of `fn` after one warm-up call: the kernel GOP/s tables
    report the best and use median / best as the spread."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def limit_threads(threads: int) -> None:
    """Give NumPy's BLAS and PyTorch the thread count AutoRelay's kernels get (where installed)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)
