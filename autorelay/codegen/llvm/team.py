"""A native thread team for parallel loops: workers that spin in machine code between kernels.

Why not a Python thread pool: handing a kernel to a pooled Python thread means waking it from a
futex and passing the GIL, and waiting for it means being woken in turn. On this (virtualised)
2-core host that round trip measured ~120 us per parallel kernel: a 1.4 us kernel took 120 us
on two threads, and MobileNet-v2's 56 kernels lost milliseconds to it. Here the workers wait in
native code (GIL released) by spinning on a status word, so a job reaches them in the time a
cache line takes to move between cores; after `SPIN_LIMIT` idle spins a worker goes back to
Python and sleeps on an Event, so an idle process does not burn a core (a sleeping worker is
woken for the next call and joins the calls after it).

Protocol (one status word per worker, on its own cache line): SLEEPING 0 -> SPINNING 1 (the worker,
when woken) -> ASSIGNED 2 (the caller, by compare-and-swap from SPINNING, after writing the job)
-> SPINNING 1 (the worker, job done) ... -> SLEEPING 0 (the worker, by compare-and-swap from
SPINNING, once idle too long or parked). The caller runs its share of the job itself, then waits for
exactly the workers it assigned. A job is `void job(ptr argv, ptr next, i64 extent, i64 grain)`:
each parallel segment's `_job` thunk, which claims chunks of its loop from the shared counter
`next` (see `emit.parallel_driver`), so an assigned worker that starts late just finds fewer
chunks left.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import llvmlite.binding as llvm

from autorelay.codegen.llvm.host import init_llvm

SLEEPING, SPINNING, ASSIGNED = 0, 1, 2
MAX_WORKERS = 63  # the caller's mask of assigned workers is one i64
LINE = 8  # i64 words per cache line: each status word gets its own line
SPIN_LIMIT = 1 << 17  # idle spins before a worker sleeps (~3 ms on the 2-core Zen 3 host)
# the job header: fn, argv, next, extent, grain, park — line 0; worker w's status — line w + 1
_FN, _ARGV, _NEXT, _EXTENT, _GRAIN, _PARK = range(6)


def _team_ir(pause: str) -> str:
    status = (f"  %sw = add i64 %w, 1\n  %sidx = mul i64 %sw, {LINE}\n"
              "  %st = getelementptr i64, ptr %team, i64 %sidx\n")
    header = "\n".join(
        f"  %{n}p = getelementptr i64, ptr %team, i64 {i}"
        for n, i in (("fn", _FN), ("argv", _ARGV), ("next", _NEXT), ("ext", _EXTENT), ("grain", _GRAIN),
                     ("park", _PARK))
    )
    job = (
        "  %fn = load ptr, ptr %fnp, align 8\n  %argv = load ptr, ptr %argvp, align 8\n"
        "  %ext = load i64, ptr %extp, align 8\n  %gr = load i64, ptr %grainp, align 8\n"
        "  call void %fn(ptr %argv, ptr %nextp, i64 %ext, i64 %gr)\n"
    )
    return f"""
define void @team_worker(ptr %team, i64 %w, i64 %limit) {{
entry:
{status}{header}
  store atomic i64 {SPINNING}, ptr %st release, align 8
  br label %loop
loop:
  %spins = phi i64 [0, %entry], [0, %run], [%spins1, %idle], [0, %sleep]
  %s = load atomic i64, ptr %st acquire, align 8
  %assigned = icmp eq i64 %s, {ASSIGNED}
  br i1 %assigned, label %run, label %check
run:
{job}  store atomic i64 {SPINNING}, ptr %st release, align 8
  br label %loop
check:
  %pk = load atomic i64, ptr %parkp monotonic, align 8
  %nap = icmp ne i64 %pk, 0
  br i1 %nap, label %sleep, label %count
count:
  %spins1 = add i64 %spins, 1
  %more = icmp slt i64 %spins1, %limit
  br i1 %more, label %idle, label %sleep
idle:
{pause}
  br label %loop
sleep:
  %r = cmpxchg ptr %st, i64 {SPINNING}, i64 {SLEEPING} acq_rel acquire, align 8
  %slept = extractvalue {{ i64, i1 }} %r, 1
  br i1 %slept, label %out, label %loop
out:
  ret void
}}

define i64 @team_run(ptr %team, i64 %workers, ptr %job, ptr %argvv, i64 %extent, i64 %grain) {{
entry:
{header}
  store ptr %job, ptr %fnp, align 8
  store ptr %argvv, ptr %argvp, align 8
  store i64 0, ptr %nextp, align 8
  store i64 %extent, ptr %extp, align 8
  store i64 %grain, ptr %grainp, align 8
  br label %assign
assign:
  %w = phi i64 [0, %entry], [%w1, %offer]
  %mask = phi i64 [0, %entry], [%mask1, %offer]
  %more = icmp slt i64 %w, %workers
  br i1 %more, label %offer, label %self
offer:
{status}  %r = cmpxchg ptr %st, i64 {SPINNING}, i64 {ASSIGNED} acq_rel monotonic, align 8
  %ok = extractvalue {{ i64, i1 }} %r, 1
  %bit = shl i64 1, %w
  %with = or i64 %mask, %bit
  %mask1 = select i1 %ok, i64 %with, i64 %mask
  %w1 = add i64 %w, 1
  br label %assign
self:
  call void %job(ptr %argvv, ptr %nextp, i64 %extent, i64 %grain)
  br label %wait
wait:
  %v = phi i64 [0, %self], [%v1, %joined]
  %left = icmp slt i64 %v, %workers
  br i1 %left, label %check, label %done
check:
  %vbit = shl i64 1, %v
  %mine = and i64 %mask, %vbit
  %ismine = icmp ne i64 %mine, 0
  br i1 %ismine, label %poll, label %joined
poll:
  %vw = add i64 %v, 1
  %vidx = mul i64 %vw, {LINE}
  %vst = getelementptr i64, ptr %team, i64 %vidx
  %vs = load atomic i64, ptr %vst acquire, align 8
  %busy = icmp eq i64 %vs, {ASSIGNED}
  br i1 %busy, label %relax, label %joined
relax:
{pause}
  br label %poll
joined:
  %v1 = add i64 %v, 1
  br label %wait
done:
  ret i64 %mask
}}
"""


class _Native:
    """The JIT-compiled team functions (compiled once per process)."""

    def __init__(self) -> None:
        init_llvm()
        triple = llvm.get_process_triple()
        x86 = triple.startswith(("x86_64", "i686"))
        pause = "  call void @llvm.x86.sse2.pause()" if x86 else ""
        decl = "declare void @llvm.x86.sse2.pause()\n" if x86 else ""
        mod = llvm.parse_assembly(decl + _team_ir(pause))
        mod.triple = triple
        mod.verify()
        machine = llvm.Target.from_triple(triple).create_target_machine(opt=2)
        self.engine = llvm.create_mcjit_compiler(mod, machine)
        self.engine.finalize_object()
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.worker = ctypes.CFUNCTYPE(None, ptr, i64, i64)(self.engine.get_function_address("team_worker"))
        run = self.engine.get_function_address("team_run")
        self.run = ctypes.CFUNCTYPE(i64, ptr, i64, ptr, ptr, i64, i64)(run)


_NATIVE: _Native | None = None
_TEAMS: dict[int, Team] = {}
_LOCK = threading.Lock()
JOB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


@functools.lru_cache(maxsize=4096)
def _job(addr: int) -> ctypes._CFuncPtr:
    return JOB(addr)


def run_alone(job: int, argv: int, extent: int, grain: int) -> None:
    """Run the job thunk at address `job` on the calling thread only (its own chunk counter)."""
    counter = ctypes.c_int64(0)
    _job(job)(argv, ctypes.addressof(counter), extent, grain)


class Team:
    """`workers` native-spinning threads that, with the calling thread, run one job at a time."""

    def __init__(self, workers: int, native: _Native):
        self.workers = workers
        self.native = native
        self.words = (ctypes.c_int64 * (LINE * (workers + 1)))()  # every status starts SLEEPING
        self.addr = ctypes.addressof(self.words)
        self.busy = threading.Lock()  # one caller at a time; a concurrent caller runs its job alone
        self.wake = [threading.Event() for _ in range(workers)]
        self.all_assigned = (1 << workers) - 1
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
        if self.words[_PARK]:
            self.words[_PARK] = 0
        try:
            assigned = self.native.run(self.addr, self.workers, job, argv, extent, grain)
        finally:
            self.busy.release()
        if assigned != self.all_assigned:  # some were asleep: wake them for the calls that follow
            for w in range(self.workers):
                if not assigned >> w & 1:
                    self.wake[w].set()

    def park(self) -> None:
        """Send spinning workers to sleep now rather than after SPIN_LIMIT (the next call wakes
        them): a benchmark parks them before timing another library, so that library does not
        share its cores with our idle spinners."""
        self.words[_PARK] = 1


def team(workers: int) -> Team:
    """The process's team of `workers` threads (created on first use)."""
    global _NATIVE
    workers = max(1, min(workers, MAX_WORKERS))
    with _LOCK:
        t = _TEAMS.get(workers)
        if t is None:
            if _NATIVE is None:
                _NATIVE = _Native()
            t = _TEAMS[workers] = Team(workers, _NATIVE)
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
