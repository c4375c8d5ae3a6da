"""Run a parallel segment across threads: the calling thread takes one chunk, pool threads the
rest. ctypes releases the GIL for the duration of a foreign call, so chunks run concurrently."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="autorelay-kernel")
        return pool


def chunks(extent: int, threads: int) -> list[tuple[int, int]]:
    n = max(1, min(threads, extent))
    base, extra = divmod(extent, n)
    out, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def run_parallel(fn: Callable[..., None], args: tuple, extent: int, threads: int) -> None:
    """Call fn(*args, begin, end) over [0, extent) split into `threads` contiguous chunks."""
    parts = chunks(extent, threads)
    if len(parts) == 1:
        fn(*args, 0, extent)
        return
    pool = _pool(len(parts) - 1)
    futures = [pool.submit(fn, *args, b, e) for b, e in parts[1:]]
    fn(*args, *parts[0])
    for f in futures:
        f.result()
