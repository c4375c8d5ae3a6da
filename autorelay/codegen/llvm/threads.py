"""Run a parallel segment across threads: the calling thread and the process's native team
(`team.py`) claim chunks of the parallel loop, each from its own home range first, then from the
others' (`parallel`), until the loop is exhausted.

Every parallel segment has a job thunk `<segment>_job(argv, claims, threads, tid, extent, grain)`
(see `parallel`) that reads its buffer addresses from the array `argv` and claims chunks with an
atomic add in native code, so a chunk costs an atomic add and a kernel call costs one ctypes
call, whatever the thread count.

Why chunks rather than one fixed slice per thread: the machine is shared, and a statically split
loop finishes when its *slowest* slice does. With one core busy (another process, or a BLAS
library's worker spin-waiting after its last call), a static 2-way split of dense 1024^3 ran no
faster than one thread: the slice on the busy core took twice as long while the other core idled
after its half. With several chunks per home range the free core, done with its own, takes the
rest of the busy one's. Chunks stay contiguous ranges of the outer loop, so each one still walks
memory in order.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import NamedTuple

from autorelay.codegen.llvm.team import RECORD, park_all, run_alone, run_program_alone, team

__all__ = ["Record", "chunk_size", "grain", "pack_records", "park_all", "pointer_array", "run_job",
           "run_program"]

# chunks per thread: claiming one costs an atomic add, so finer chunks even out the threads'
# finishing times better (with home ranges, 4 and 32 chunks per thread profiled the same on
# MobileNet-v2: 3.56 and 3.54 ms summed over its kernels)
CHUNKS_PER_THREAD = 32

def grain(extent: int, threads: int) -> int:
    """Iterations per dynamically scheduled chunk of a parallel loop of `extent` iterations."""
    return max(1, extent // (max(1, threads) * CHUNKS_PER_THREAD))


def run_job(job: int, argv: int, extent: int, threads: int) -> None:
    """Run the job thunk at address `job` over its loop's `extent` iterations; `argv` is the
    address of the kernel's array of buffer pointers (kept alive by the caller)."""
    if threads <= 1 or extent <= 1:
        run_alone(job, argv, extent, extent)
        return
    team(threads - 1).run(job, argv, extent, grain(extent, threads))


class Record(NamedTuple):
    """One kernel segment as a native program runs it (`team.RECORD` words, in this order)."""

    job: int  # its job thunk's address
    argv: int  # the address of its array of buffer pointers
    extent: int  # its parallel loop's extent (0: a serial segment)
    grain: int  # iterations per claimed chunk (`chunk_size`)


def chunk_size(extent: int, threads: int) -> int:
    """A record's grain: `grain` on a team, the whole loop in one chunk on one thread."""
    return grain(extent, threads) if threads > 1 else max(1, extent)


def pack_records(records: Sequence[Record]) -> ctypes.Array:
    """The records as the C array `run_program` reads (kept alive by the caller)."""
    return (ctypes.c_int64 * max(1, RECORD * len(records)))(*(w for r in records for w in r))


def run_program(records: int, n: int, threads: int) -> None:
    """Run `n` program records from address `records` in order (`team.Team.run_program`): on the
    calling thread alone for one thread, else with the process's team."""
    if threads <= 1:
        run_program_alone(records, n)
        return
    team(threads - 1).run_program(records, n)


def pointer_array(addresses: tuple[int, ...]) -> ctypes.Array:
    """A C array of the buffer addresses, the `argv` of a job thunk."""
    return (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
