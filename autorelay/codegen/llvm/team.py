"""A native thread team for parallel loops: workers that spin in machine code between kernels.

Why not a Python thread pool: handing a kernel to a pooled Python thread means waking it from a
futex and passing the GIL, and waiting for it means being woken in turn. On this (virtualised)
2-core host that round trip measured ~120 us per parallel kernel: a 1.4 us kernel took 120 us
on two threads, and MobileNet-v2's 56 kernels lost milliseconds to it. Here the workers wait in
native code (GIL released) by spinning on a status word, so a job reaches them in the time a
cache line takes to move between cores; after `SPIN_LIMIT` idle spins a worker goes back to
Python and sleeps on an Event, so an idle process does not burn a core.

Protocol. A job is `void job(ptr argv, ptr claims, i64 threads, i64 tid, i64 extent, i64 grain)`:
each parallel segment's `_job` thunk, which claims chunks of its loop from the claim block (thread
`tid`'s home range first, then the others', see `parallel`), so any number of threads may run it
and one that starts late just finds fewer chunks left. The caller (thread 0; worker w is thread
w + 1) writes the job into the header and the home ranges into the claim block, *opens* it
(`open` = a new positive generation), runs it itself, *closes* it (`open` = minus the
generation) and waits until `active`, the number of workers inside the job, is zero. A spinning
worker that sees a generation it has not run joins: it increments `active`, re-reads `open`, and
runs the job only if it is still the same generation (otherwise it leaves). Both sides use
sequentially consistent operations, so either the caller sees the worker's increment before it
returns or the worker sees the job closed: no worker is ever inside a job its caller has finished
with, and the next job's claim block is written only once every worker has left the last one.

Why joining rather than handing a job to the workers spinning when it starts: a worker asleep when
a call begins is woken by it and joins it as soon as it is up, so a long kernel is shared from its
first call on. With hand-offs only, a worker woken by a long call spun out its idle limit before that
call ended and slept again, so any kernel longer than that limit ran on one thread whenever the
worker was asleep at its start, and every later call too: dense 1024^3 (12-20 ms a call) on two
threads ran on one (measured on the AVX-512 host, where the idle limit lasts 2-3 ms), and the
tuner, which times a freshly built kernel, measured every such kernel on one thread.

Status words (one per worker, own cache line): SLEEPING 0 -> SPINNING 1 when woken -> SLEEPING 0 by
the worker's compare-and-swap once idle too long or parked; the caller wakes every sleeping worker.

Waking without losing a worker. The caller looks at the status words before it opens the job (the
wake needs Python), so a worker it saw spinning could run out of idle spins in between and sleep
through the call, and a worker it woke could come up, find nothing open yet and sleep again: the
call then ran on fewer threads (and a rendezvous test failed under load). So the caller first
*announces* the call (`PENDING` in the park word, sequentially consistent, before it reads the
status words), `team_run` withdraws the announcement once the job is open, and a worker:
* does not count idle spins towards sleep while a call is pending;
* after its compare-and-swap to SLEEPING, reads the park word and `open` once more, and if a call is
  pending or a new job open (the caller may have read its status just before the swap), returns to
  SPINNING and joins.
Either the caller's read of the status word follows the worker's swap (it sees SLEEPING and wakes
it) or precedes it, and then the announcement precedes the worker's re-read.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import llvmlite.binding as llvm

from autorelay.codegen.llvm.host import init_llvm
from autorelay.codegen.llvm.parallel import END, LINE, NEXT
from autorelay.codegen.llvm.team_ir import (
    _PARK,
    _THREADS,
    PARKED,
    PENDING,
    RECORD,
    SLEEPING,
    SPINNING,
    program_ir,
    team_ir,
)

MAX_WORKERS = 63  # a bound on the team's size, not on the protocol
SPIN_LIMIT = 1 << 17  # idle spins before a worker sleeps (~3 ms on the 2-core Zen 3 host)


class _Native:
    """The JIT-compiled team functions (compiled once per process)."""

    def __init__(self) -> None:
        init_llvm()
        triple = llvm.get_process_triple()
        x86 = triple.startswith(("x86_64", "i686"))
        pause = "  call void @llvm.x86.sse2.pause()" if x86 else ""
        decl = "declare void @llvm.x86.sse2.pause()\n" if x86 else ""
        mod = llvm.parse_assembly(decl + team_ir(pause) + program_ir())
        mod.triple = triple
        mod.verify()
        machine = llvm.Target.from_triple(triple).create_target_machine(opt=2)
        self.engine = llvm.create_mcjit_compiler(mod, machine)
        self.engine.finalize_object()
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.worker = ctypes.CFUNCTYPE(None, ptr, i64, i64)(self.engine.get_function_address("team_worker"))
        run = self.engine.get_function_address("team_run")
        self.run = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, i64, i64)(run)
        program = self.engine.get_function_address("team_program")
        self.program = ctypes.CFUNCTYPE(i64, ptr, ptr, i64, i64, i64)(program)
        announce = self.engine.get_function_address("team_announce")
        self.announce = ctypes.CFUNCTYPE(i64, ptr)(announce)


_NATIVE: _Native | None = None
_TEAMS: dict[int, Team] = {}
_LOCK = threading.Lock()
JOB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, *([ctypes.c_int64] * 4))


@functools.lru_cache(maxsize=4096)
def _job(addr: int) -> ctypes._CFuncPtr:
    return JOB(addr)


def run_alone(job: int, argv: int, extent: int, grain: int) -> None:
    """Run the job thunk at address `job` on the calling thread only (a claim block of its own,
    one home range: the whole loop)."""
    claims = (ctypes.c_int64 * LINE)()
    claims[NEXT], claims[END] = 0, extent
    _job(job)(argv, ctypes.addressof(claims), 1, 0, extent, grain)


class Team:
    """`workers` native-spinning threads that, with the calling thread, run one job at a time."""

    def __init__(self, workers: int, native: _Native):
        self.workers = workers
        self.native = native
        # the header, a status line per worker, then a claim line per thread; every status
        # starts SLEEPING
        self.words = (ctypes.c_int64 * (LINE * 2 * (workers + 1)))()
        self.words[_THREADS] = workers + 1
        self.addr = ctypes.addressof(self.words)
        self.busy = threading.Lock()  # one caller at a time; a concurrent caller runs its job alone
        self.wake = [threading.Event() for _ in range(workers)]
        for w in range(workers):
            threading.Thread(target=self._serve, args=(w,), name=f"autorelay-team-{w}", daemon=True).start()
            self.wake[w].set()

    def _serve(self, w: int) -> None:
        while True:
            self.wake[w].wait()
            self.wake[w].clear()
            self.native.worker(self.addr, w, SPIN_LIMIT)  # returns once idle too long, or parked

    def run(self, job: int, argv: int, extent: int, grain: int) -> None:
        """Run `job` over [0, extent) in chunks of `grain` on the caller and the spinning workers."""
        if not self.busy.acquire(blocking=False):
            run_alone(job, argv, extent, grain)
            return
        try:
            self._wake_sleepers()
            self.native.run(self.addr, job, argv, extent, grain)
        finally:
            self._withdraw()
            self.busy.release()

    def run_program(self, records: int, n: int) -> None:
        """Run the `n` records at address `records` (`RECORD` words each: job thunk, argv, extent,
        grain) in order, each team record on the caller and the workers, in native calls: a
        model's kernels without a return to Python between them, but to wake a worker that fell
        asleep (a long serial stretch outlasts its idle spins), which `team_program` stops for."""
        if not self.busy.acquire(blocking=False):
            self.native.program(self.addr, records, 0, n, 1)
            return
        try:
            done = 0
            while done < n:
                self._wake_sleepers()
                done = self.native.program(self.addr, records, done, n, 0)
        finally:
            self._withdraw()
            self.busy.release()

    def _wake_sleepers(self) -> None:
        """Announce a call (`team_announce`) and wake the workers asleep: a sleeping worker joins
        the running job once it is up."""
        asleep = self.native.announce(self.addr)
        for w in range(self.workers):
            if asleep >> w & 1:
                self.wake[w].set()

    def _withdraw(self) -> None:
        """Withdraw an announcement no job withdrew (a program without team records, an exception):
        left standing, it would keep the workers from ever going to sleep."""
        if self.words[_PARK] == PENDING:
            self.words[_PARK] = 0

    def park(self) -> None:
        """Send spinning workers to sleep now rather than after SPIN_LIMIT (the next call wakes
        them): a benchmark parks them before timing another library, so that library does not
        share its cores with our idle spinners."""
        self.words[_PARK] = PARKED


def _native_locked() -> _Native:
    """The process's compiled team functions (compiled on first use); the caller holds `_LOCK`."""
    global _NATIVE
    if _NATIVE is None:
        _NATIVE = _Native()
    return _NATIVE


def run_program_alone(records: int, n: int) -> None:
    """Run `n` program records (`Team.run_program`) on the calling thread only."""
    with _LOCK:
        native = _native_locked()
    native.program(None, records, 0, n, 1)


def team(workers: int) -> Team:
    """The process's team of `workers` threads (created on first use)."""
    workers = max(1, min(workers, MAX_WORKERS))
    with _LOCK:
        t = _TEAMS.get(workers)
        if t is None:
            t = _TEAMS[workers] = Team(workers, _native_locked())
        return t


def park_all() -> None:
    """Park every team's workers (see `Team.park`)."""
    with _LOCK:
        for t in _TEAMS.values():
            t.park()


def _forget_teams() -> None:
    """In a forked child the team threads do not exist: start from nothing (their status words,
    copied from the parent, would make a caller wait forever for a worker that is not there)."""
    global _LOCK
    _TEAMS.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_teams)

__all__ = ["MAX_WORKERS", "PARKED", "PENDING", "RECORD", "SLEEPING", "SPINNING", "SPIN_LIMIT", "Team",
           "park_all", "run_alone", "run_program_alone", "team"]
