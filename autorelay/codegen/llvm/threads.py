"""Run a parallel segment across threads: the calling thread and `threads - 1` pool threads pull
chunks of the parallel loop from a shared counter until the range is exhausted.

`run_driver` is the fast path for kernels built by `build_kernel`: each thread makes one ctypes
call into the segment's generated driver, which claims chunks with an atomic add in native code
(so chunks can be fine). `run_parallel` claims chunks in Python, one ctypes call per chunk (~a
few us each), for callers that only hold the segment function itself.

ctypes releases the GIL for the duration of a foreign call (CFUNCTYPE), so chunks run
concurrently; a thread holds the GIL only for the few microseconds between two chunks.

Why chunks are handed out dynamically rather than one fixed slice per thread: the machine is
shared, and a statically split loop finishes when its *slowest* slice does. With one core busy
(another process, or a BLAS library's worker spin-waiting after its last call), a static 2-way
split of dense 1024^3 ran no faster than one thread: the slice on the busy core took twice as
long while the other core idled after its half. With several chunks per thread the free core
simply takes more of them. Chunks stay contiguous ranges of the outer loop, so each one still
walks memory in order.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()

# chunks per thread (Python dispatch): enough for a free core to absorb a busy core's share, few
# enough that the per-chunk cost (a GIL round trip and a ctypes call, ~2-5 us) stays far below
# a chunk's work
CHUNKS_PER_THREAD = 8


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="autorelay-kernel")
        return pool


def chunks(extent: int, threads: int) -> list[tuple[int, int]]:
    """[0, extent) split into min(threads, extent) contiguous ranges of near-equal size."""
    n = max(1, min(threads, extent))
    base, extra = divmod(extent, n)
    out, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def grain(extent: int, threads: int) -> int:
    """Iterations per dynamically scheduled chunk of a parallel loop of `extent` iterations."""
    return max(1, extent // (max(1, threads) * CHUNKS_PER_THREAD))


def run_parallel(fn: Callable[..., None], args: tuple, extent: int, threads: int) -> None:
    """Call fn(*args, begin, end) over chunks covering [0, extent), on up to `threads` threads."""
    n = max(1, min(threads, extent))
    if n == 1:
        fn(*args, 0, extent)
        return
    step = grain(extent, n)
    starts = itertools.count(0, step)  # next() on it is atomic under the GIL

    def work() -> None:
        for begin in starts:
            if begin >= extent:
                return
            fn(*args, begin, min(begin + step, extent))

    futures = [_pool(n - 1).submit(work) for _ in range(n - 1)]
    work()
    for f in futures:
        f.result()


# chunks per thread when the counter lives in native code: claiming one costs an atomic add, so
# finer chunks even out the threads' finishing times better
DRIVER_CHUNKS_PER_THREAD = 32


def run_driver(driver: Callable[..., None], args: tuple, extent: int, threads: int) -> None:
    """Run a segment's generated driver `driver(*args, &next, extent, grain)` on up to `threads`
    threads (the caller included); the drivers share the chunk counter `next`."""
    n = max(1, min(threads, extent))
    step = max(1, extent // (n * DRIVER_CHUNKS_PER_THREAD))
    counter = ctypes.c_int64(0)  # alive until every driver has returned (joined below)
    addr = ctypes.addressof(counter)
    futures = [_pool(n - 1).submit(driver, *args, addr, extent, step) for _ in range(n - 1)] if n > 1 else []
    driver(*args, addr, extent, step)
    for f in futures:
        f.result()
