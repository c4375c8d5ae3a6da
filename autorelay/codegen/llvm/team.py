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
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import llvmlite.binding as llvm

from autorelay.codegen.llvm.host import init_llvm
from autorelay.codegen.llvm.parallel import END, LINE, NEXT

SLEEPING, SPINNING = 0, 1
MAX_WORKERS = 63  # a bound on the team's size, not on the protocol
SPIN_LIMIT = 1 << 17  # idle spins before a worker sleeps (~3 ms on the 2-core Zen 3 host)
# the job header, line 0: fn, argv, threads (workers + 1), extent, grain, park, open, active;
# worker w's status: line w + 1; thread r's home range (the claim block): line threads + r
_FN, _ARGV, _THREADS, _EXTENT, _GRAIN, _PARK, _OPEN, _ACTIVE = range(8)


RECORD = 4  # i64 words of a program record: job thunk, argv, extent, grain


def _program_ir() -> str:
    """`i64 @team_program(ptr %team, ptr %records, i64 %start, i64 %n, i64 %alone)`: run records
    start .. n-1 in order (see `Team.run_program`). A record with an extent above 1 runs on the
    team (`team_run`) unless `alone`; any other (a serial segment: extent 0) runs on the caller
    with a claim block of one range. Before a team record other than the first, a worker found
    asleep stops the program there: it returns that record's index, for the caller to wake the
    worker (which needs Python) and go on from it. Returns n once every record has run."""
    return f"""
define i64 @team_program(ptr %team, ptr %records, i64 %start, i64 %n, i64 %alone) {{
entry:
  %one = alloca [{LINE} x i64], align 64
  %endone = getelementptr i64, ptr %one, i64 {END}
  %nextone = getelementptr i64, ptr %one, i64 {NEXT}
  %solo = icmp ne i64 %alone, 0
  %tp = getelementptr i64, ptr %team, i64 {_THREADS}
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%i1, %next]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %record, label %done
record:
  %base = mul i64 %i, {RECORD}
  %jp = getelementptr i64, ptr %records, i64 %base
  %job = load ptr, ptr %jp, align 8
  %ap = getelementptr i64, ptr %jp, i64 1
  %argv = load ptr, ptr %ap, align 8
  %ep = getelementptr i64, ptr %jp, i64 2
  %ext = load i64, ptr %ep, align 8
  %gp = getelementptr i64, ptr %jp, i64 3
  %gr = load i64, ptr %gp, align 8
  %par = icmp sgt i64 %ext, 1
  %shared = select i1 %solo, i1 false, i1 %par
  br i1 %shared, label %check, label %caller
check:
  %first = icmp eq i64 %i, %start
  br i1 %first, label %onteam, label %scan
scan:
  %tn = load i64, ptr %tp, align 8
  br label %look
look:
  %w = phi i64 [1, %scan], [%w1, %awake]
  %scanned = icmp sge i64 %w, %tn
  br i1 %scanned, label %onteam, label %status
status:
  %sidx = mul i64 %w, {LINE}
  %sp = getelementptr i64, ptr %team, i64 %sidx
  %st = load atomic i64, ptr %sp monotonic, align 8
  %asleep = icmp eq i64 %st, {SLEEPING}
  br i1 %asleep, label %stop, label %awake
awake:
  %w1 = add i64 %w, 1
  br label %look
stop:
  ret i64 %i
onteam:
  call void @team_run(ptr %team, ptr %job, ptr %argv, i64 %ext, i64 %gr)
  br label %next
caller:
  store i64 0, ptr %nextone, align 8
  store i64 %ext, ptr %endone, align 8
  call void %job(ptr %argv, ptr %one, i64 1, i64 0, i64 %ext, i64 %gr)
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret i64 %n
}}
"""


def _team_ir(pause: str) -> str:
    status = (f"  %sw = add i64 %w, 1\n  %sidx = mul i64 %sw, {LINE}\n"
              "  %st = getelementptr i64, ptr %team, i64 %sidx\n")
    header = "\n".join(
        f"  %{n}p = getelementptr i64, ptr %team, i64 {i}"
        for n, i in (("fn", _FN), ("argv", _ARGV), ("threads", _THREADS), ("ext", _EXTENT), ("grain", _GRAIN),
                     ("park", _PARK), ("open", _OPEN), ("active", _ACTIVE))
    ) + (  # the claim block (`parallel`) follows the header and status lines
        f"\n  %tn = load i64, ptr %threadsp, align 8\n  %cbase = mul i64 %tn, {LINE}\n"
        "  %claims = getelementptr i64, ptr %team, i64 %cbase"
    )
    return f"""
define void @team_worker(ptr %team, i64 %w, i64 %limit) {{
entry:
{status}{header}
  store atomic i64 {SPINNING}, ptr %st release, align 8
  br label %loop
loop:
  %spins = phi i64 [0, %entry], [0, %run], [%spins, %leave], [%spins1, %idle], [0, %sleep]
  %last = phi i64 [0, %entry], [%o, %run], [%last, %leave], [%last, %idle], [%last, %sleep]
  %o = load atomic i64, ptr %openp acquire, align 8
  %isopen = icmp sgt i64 %o, 0
  %fresh = icmp ne i64 %o, %last
  %new = and i1 %isopen, %fresh
  br i1 %new, label %join, label %check
join:
  %a0 = atomicrmw add ptr %activep, i64 1 seq_cst, align 8
  %o2 = load atomic i64, ptr %openp seq_cst, align 8
  %same = icmp eq i64 %o2, %o
  br i1 %same, label %run, label %leave
run:
  %fn = load ptr, ptr %fnp, align 8
  %argv = load ptr, ptr %argvp, align 8
  %ext = load i64, ptr %extp, align 8
  %gr = load i64, ptr %grainp, align 8
  call void %fn(ptr %argv, ptr %claims, i64 %tn, i64 %sw, i64 %ext, i64 %gr)
  %a1 = atomicrmw sub ptr %activep, i64 1 release, align 8
  br label %loop
leave:
  %a2 = atomicrmw sub ptr %activep, i64 1 release, align 8
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

define void @team_run(ptr %team, ptr %job, ptr %argvv, i64 %extent, i64 %grain) {{
entry:
{header}
  store ptr %job, ptr %fnp, align 8
  store ptr %argvv, ptr %argvp, align 8
  store i64 %extent, ptr %extp, align 8
  store i64 %grain, ptr %grainp, align 8
  br label %init
init:
  %r = phi i64 [0, %entry], [%r1, %init]
  %line = mul i64 %r, {LINE}
  %nextr = getelementptr i64, ptr %claims, i64 %line
  %endr = getelementptr i64, ptr %nextr, i64 {END}
  %lo0 = mul i64 %r, %extent
  %lo = sdiv i64 %lo0, %tn
  %r1 = add i64 %r, 1
  %hi0 = mul i64 %r1, %extent
  %hi = sdiv i64 %hi0, %tn
  store i64 %lo, ptr %nextr, align 8
  store i64 %hi, ptr %endr, align 8
  %filled = icmp sge i64 %r1, %tn
  br i1 %filled, label %go, label %init
go:
  %closed = load i64, ptr %openp, align 8
  %gen = sub i64 1, %closed
  store atomic i64 %gen, ptr %openp seq_cst, align 8
  call void %job(ptr %argvv, ptr %claims, i64 %tn, i64 0, i64 %extent, i64 %grain)
  %shut = sub i64 0, %gen
  store atomic i64 %shut, ptr %openp seq_cst, align 8
  br label %wait
wait:
  %n = load atomic i64, ptr %activep seq_cst, align 8
  %busy = icmp ne i64 %n, 0
  br i1 %busy, label %relax, label %done
relax:
{pause}
  br label %wait
done:
  ret void
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
        mod = llvm.parse_assembly(decl + _team_ir(pause) + _program_ir())
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
            if self.words[_PARK]:
                self.words[_PARK] = 0
            self._wake_sleepers()
            self.native.run(self.addr, job, argv, extent, grain)
        finally:
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
            if self.words[_PARK]:
                self.words[_PARK] = 0
            done = 0
            while done < n:
                self._wake_sleepers()
                done = self.native.program(self.addr, records, done, n, 0)
        finally:
            self.busy.release()

    def _wake_sleepers(self) -> None:
        for w in range(self.workers):  # a sleeping worker joins the running job once it wakes
            if self.words[LINE * (w + 1)] == SLEEPING:
                self.wake[w].set()

    def park(self) -> None:
        """Send spinning workers to sleep now rather than after SPIN_LIMIT (the next call wakes
        them): a benchmark parks them before timing another library, so that library does not
        share its cores with our idle spinners."""
        self.words[_PARK] = 1


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
