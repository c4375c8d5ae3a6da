"""How a parallel loop is shared (`autorelay.codegen.llvm.parallel`): every iteration runs exactly
once, whatever the thread count, extent and grain; a thread claims its own home range first, in
order, and then the others' (work stealing).

The segment under test is written by hand: for each iteration i of [begin, end) it increments
`counts[i]` and stores in `order[i]` the value of a shared ticket counter, so the test sees how
often and in which order each iteration ran."""

from __future__ import annotations

import ctypes
import itertools
import time

import llvmlite.binding as llvm
import numpy as np
import pytest

from autorelay.codegen.llvm import team as T
from autorelay.codegen.llvm.host import init_llvm
from autorelay.codegen.llvm.parallel import END, LINE, NEXT, home_range, job_name, job_thunk, parallel_driver

pytestmark = pytest.mark.cpu

_SEGMENT = """
define void @probe(ptr noalias %b0, ptr noalias %b1, ptr noalias %b2, i64 %begin, i64 %end) {
entry:
  %empty = icmp sge i64 %begin, %end
  br i1 %empty, label %done, label %body
body:
  %i = phi i64 [%begin, %entry], [%i1, %body]
  %ticket = atomicrmw add ptr %b2, i64 1 seq_cst, align 8
  %op = getelementptr i64, ptr %b1, i64 %i
  store i64 %ticket, ptr %op, align 8
  %cp = getelementptr i64, ptr %b0, i64 %i
  %c = atomicrmw add ptr %cp, i64 1 seq_cst, align 8
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %end
  br i1 %more, label %body, label %done
done:
  ret void
}
"""


@pytest.fixture(scope="module")
def probe_job():
    """The address of the probe segment's job thunk (the engine kept alive with it)."""
    init_llvm()
    text = "\n".join([_SEGMENT, parallel_driver("probe", 3), job_thunk("probe", 3),
                      "attributes #0 = { nounwind }", "attributes #1 = { noinline }"])
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    mod.verify()
    machine = llvm.Target.from_triple(mod.triple).create_target_machine(opt=2)
    engine = llvm.create_mcjit_compiler(mod, machine)
    engine.finalize_object()
    yield engine.get_function_address(job_name("probe"))
    del engine


class _Buffers:
    """counts, order and the ticket counter of one run, and the argv array that points at them."""

    def __init__(self, extent: int):
        self.counts = np.zeros(extent, np.int64)
        self.order = np.full(extent, -1, np.int64)
        self.ticket = np.zeros(1, np.int64)
        self.argv = (ctypes.c_void_p * 3)(*(a.ctypes.data for a in (self.counts, self.order, self.ticket)))

    @property
    def addr(self) -> int:
        return ctypes.addressof(self.argv)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_iteration_runs_exactly_once(probe_job, workers):
    team = T.Team(workers, T.team(1).native)  # a team of its own: no other test's call can hold it
    for extent, grain in [(1, 1), (2, 1), (3, 1), (5, 2), (97, 1), (97, 3), (97, 200), (1000, 7)]:
        for _ in range(20):  # workers spinning and joining part way, calls back to back
            b = _Buffers(extent)
            team.run(probe_job, b.addr, extent, grain)
            np.testing.assert_array_equal(b.counts, 1, err_msg=f"extent {extent}, grain {grain}")
            assert sorted(b.order) == list(range(extent))
    team.park()


def test_run_alone_runs_the_loop_in_order(probe_job):
    b = _Buffers(50)
    T.run_alone(probe_job, b.addr, 50, 4)
    np.testing.assert_array_equal(b.counts, 1)
    np.testing.assert_array_equal(b.order, np.arange(50))


@pytest.mark.parametrize("threads, tid", [(2, 0), (2, 1), (3, 2), (4, 1)])
def test_a_thread_runs_its_home_range_first_then_steals_the_others(probe_job, threads, tid):
    """One thread alone with a claim block of `threads` home ranges: it takes its own range in
    order, then thread tid+1's, tid+2's, ... (wrapping), each in order."""
    extent, grain = 37, 3
    claims = (ctypes.c_int64 * (LINE * threads))()
    for r in range(threads):
        claims[r * LINE + NEXT], claims[r * LINE + END] = home_range(r, threads, extent)
    b = _Buffers(extent)
    job = T.JOB(probe_job)
    job(b.addr, ctypes.addressof(claims), threads, tid, extent, grain)
    expected = [i for k in range(threads) for i in range(*home_range((tid + k) % threads, threads, extent))]
    np.testing.assert_array_equal(b.counts, 1)
    assert list(np.argsort(b.order)) == expected


def test_home_ranges_cover_the_loop():
    for extent in (0, 1, 5, 97):
        for threads in (1, 2, 3, 7):
            ranges = [home_range(r, threads, extent) for r in range(threads)]
            assert ranges[0][0] == 0 and ranges[-1][1] == extent
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def _records(jobs: list[tuple[int, int, int, int]]) -> ctypes.Array:
    """Program records (`team.RECORD` words each) for `Team.run_program`."""
    return (ctypes.c_int64 * (T.RECORD * len(jobs)))(*(w for r in jobs for w in r))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_program_runs_every_record_once(probe_job, workers):
    """Records of several extents (0: run on the caller, as a serial segment is) in one native
    call, on a team and alone: every iteration of every record runs exactly once."""
    team = T.Team(workers, T.team(1).native)
    extents = [0, 1, 2, 97, 5, 300, 1]
    for run in (lambda addr, n: team.run_program(addr, n), T.run_program_alone):
        for _ in range(10):
            bufs = [_Buffers(e) for e in extents]
            recs = _records([(probe_job, b.addr, e, max(1, e // 16)) for b, e in zip(bufs, extents)])
            run(ctypes.addressof(recs), len(extents))
            for b, e in zip(bufs, extents):
                np.testing.assert_array_equal(b.counts, 1, err_msg=f"extent {e}")
    team.park()


def test_a_program_stops_for_a_sleeping_worker_and_resumes(probe_job):
    """`team_program` runs its first record whatever the workers do, and stops before the next
    team record when a worker is asleep, returning that record's index (waking needs Python);
    `run_program` wakes the worker and goes on, so every record still runs once. (Whether the
    woken worker is up in time to share a record depends on the scheduler, so it is not asserted.)"""
    team = T.Team(1, T.team(1).native)
    team.park()

    def asleep() -> bool:  # back in Python, waiting for a wake-up (the one at start-up consumed)
        return team.words[T.LINE] == T.SLEEPING and not team.wake[0].is_set()

    deadline = time.monotonic() + 10
    while not asleep() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # past the moment between taking the wake-up and starting to spin
    assert asleep()
    bufs = [_Buffers(40) for _ in range(3)]
    recs = _records([(probe_job, b.addr, 40, 4) for b in bufs])
    stopped = team.native.program(team.addr, ctypes.addressof(recs), 0, 3, 0)
    assert stopped == 1  # record 0 ran (on the caller alone), record 1 waits for the worker
    np.testing.assert_array_equal(bufs[0].counts, 1)
    assert not bufs[1].counts.any() and not bufs[2].counts.any()
    team.run_program(ctypes.addressof(recs) + T.RECORD * 8, 2)  # the rest, waking the worker
    for b in bufs:
        np.testing.assert_array_equal(b.counts, 1)
    team.park()
