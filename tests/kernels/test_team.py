"""The native thread team (`autorelay.codegen.llvm.team`): parallel kernels give the single-thread
answer on every call, whether the workers are spinning, asleep, shared by two callers, or absent
(a forked child)."""

from __future__ import annotations

import ctypes
import multiprocessing
import threading
import time

import numpy as np
import pytest

from autorelay.codegen.llvm import team as T
from autorelay.codegen.llvm.host import host_target
from autorelay.kernel import compile_kernel
from autorelay.schedule import steps as S
from autorelay.te import nn
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu


def _row_sums(rows: int = 97, cols: int = 33):
    """A kernel whose parallel loop has `rows` iterations (so chunks are claimed by every thread)."""
    x = te.placeholder((rows, cols), name="X")
    out = nn.reduce(x, "sum", [1], False)
    return te.make_def([x], out, "row_sums"), [S.Parallel(out.name, out.op.axes[0].name)]


@pytest.mark.parametrize("threads", [2, 3])
def test_many_calls_match_numpy(threads):
    cdef, steps = _row_sums()
    kernel = compile_kernel(cdef, steps, host_target(threads))
    assert any(par for _, par in kernel.module.functions)
    x = np.random.default_rng(0).standard_normal((97, 33)).astype(np.float32)
    bound = kernel.bind(x)
    for i in range(300):  # back-to-back calls: workers stay spinning and are reassigned each time
        bound.outputs[0][...] = np.nan
        bound()
        np.testing.assert_allclose(bound.outputs[0], x.sum(1), rtol=1e-5, atol=1e-5, err_msg=f"call {i}")


def test_sleeping_workers_wake_and_the_answer_holds():
    cdef, steps = _row_sums()
    bound = compile_kernel(cdef, steps, host_target(2)).bind(np.ones((97, 33), np.float32))
    bound()
    workers = T.team(1)
    deadline = time.monotonic() + 10
    while workers.words[T.LINE] != T.SLEEPING and time.monotonic() < deadline:
        time.sleep(0.01)  # the worker gives up spinning after SPIN_LIMIT idle spins
    assert workers.words[T.LINE] == T.SLEEPING
    for _ in range(20):  # the first call runs alone and wakes the worker; later ones share
        bound.outputs[0][...] = 0
        bound()
        np.testing.assert_array_equal(bound.outputs[0], np.full(97, 33, np.float32))


def test_two_callers_at_once_both_get_their_answer():
    cdef, steps = _row_sums(rows=200, cols=64)
    kernel = compile_kernel(cdef, steps, host_target(2))
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((200, 64)).astype(np.float32) for _ in range(2)]
    bounds = [kernel.bind(x) for x in xs]
    errors: list[str] = []

    def caller(k: int) -> None:
        for _ in range(200):
            bounds[k]()
            if not np.allclose(bounds[k].outputs[0], xs[k].sum(1), rtol=1e-5, atol=1e-4):
                errors.append(f"caller {k}")
                return

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)


def _child(q) -> None:
    cdef, steps = _row_sums()
    out = compile_kernel(cdef, steps, host_target(2)).run(np.ones((97, 33), np.float32))
    q.put(float(out.sum()))


def test_a_forked_child_gets_its_own_team():
    cdef, steps = _row_sums()
    compile_kernel(cdef, steps, host_target(2)).run(np.ones((97, 33), np.float32))  # the parent's team is up
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0, "the child hung or crashed running a parallel kernel"
    assert q.get(timeout=5) == 97 * 33


def test_parked_workers_sleep_at_once_and_come_back(monkeypatch):
    """With a spin limit that never runs out, only parking can put the workers to sleep."""
    monkeypatch.setattr(T, "SPIN_LIMIT", 1 << 62)
    cdef, steps = _row_sums()
    bound = compile_kernel(cdef, steps, host_target(4)).bind(np.ones((97, 33), np.float32))
    workers = T.team(3)  # a team of its own: its workers spin under the patched limit
    deadline = time.monotonic() + 10
    while any(workers.words[T.LINE * (w + 1)] != T.SPINNING for w in range(3)):
        bound()  # the first calls wake them
        assert time.monotonic() < deadline, "workers never started spinning"
    T.park_all()
    while any(workers.words[T.LINE * (w + 1)] != T.SLEEPING for w in range(3)):
        assert time.monotonic() < deadline, "parked workers kept spinning"
        time.sleep(0.001)
    for _ in range(20):
        bound.outputs[0][...] = 0
        bound()
        np.testing.assert_array_equal(bound.outputs[0], np.full(97, 33, np.float32))
    assert workers.words[T._PARK] == 0  # the next call cleared it
    T.park_all()



def _rendezvous_job() -> int:
    """The address of `rendezvous` (below), JIT-compiled: a job that finishes only when a second
    thread runs it. The caller takes the first ticket and waits for another thread to take the
    second; after `_GIVE_UP` loads it gives up and records that nobody came (`flags[1] == 0`)."""
    import llvmlite.binding as llvm

    from autorelay.codegen.llvm.host import init_llvm

    init_llvm()
    mod = llvm.parse_assembly(_RENDEZVOUS_IR)
    mod.triple = llvm.get_process_triple()
    machine = llvm.Target.from_triple(mod.triple).create_target_machine()
    engine = llvm.create_mcjit_compiler(mod, machine)
    engine.finalize_object()
    _ENGINES.append(engine)  # the code lives as long as the engine
    return engine.get_function_address("rendezvous")


_ENGINES: list = []


def _met(workers: T.Team, job: int) -> bool:
    """Run the rendezvous on `workers`: whether a worker joined the caller."""
    flags = (ctypes.c_int64 * 2)(0, 0)
    workers.run(job, ctypes.addressof(flags), 2, 1)
    return flags[1] == 1


def test_a_sleeping_worker_joins_the_call_that_woke_it():
    """The worker is asleep when the call starts, so it must join the call already under way (a
    protocol that only hands jobs to workers spinning at the start left long kernels on one
    thread)."""
    job = _rendezvous_job()
    # a team of its own: the process's team may be busy with another thread's kernel (a tuner's
    # measurement an earlier test left running), and a busy team runs a call on its caller alone
    workers = T.Team(1, T.team(1).native)
    workers.park()
    deadline = time.monotonic() + 10
    while workers.words[T.LINE] != T.SLEEPING:
        assert time.monotonic() < deadline, "the parked worker kept spinning"
        time.sleep(0.001)
    assert _met(workers, job), "the caller ran the whole job alone: the woken worker never joined it"


def test_a_worker_falling_asleep_as_a_call_starts_still_joins_it(monkeypatch):
    """The lost wake-up: a caller finds a worker spinning, so it does not wake it, and the worker
    then runs out of idle spins before the job opens and sleeps through the call; or a worker the
    caller woke finds no job open yet and runs out of spins again. Here the caller pauses between
    looking at the workers and opening the job (as a preempted caller does) for longer than a
    worker's idle spins last, so without a guard both happen on nearly every call. A caller marks
    its call pending before it looks at the workers, and a worker does not sleep through it."""
    monkeypatch.setattr(T, "SPIN_LIMIT", 1 << 8)
    job = _rendezvous_job()
    workers = T.Team(1, T.team(1).native)
    look = workers._wake_sleepers

    def look_then_stall() -> None:
        look()
        time.sleep(0.002)

    monkeypatch.setattr(workers, "_wake_sleepers", look_then_stall)
    for call in range(30):
        assert _met(workers, job), f"call {call}: the worker slept through it"
    workers.park()


_GIVE_UP = 1_000_000_000
_RENDEZVOUS_IR = """
define void @rendezvous(ptr %flags, ptr %next, i64 %extent, i64 %grain) {
entry:
  %ticket = atomicrmw add ptr %next, i64 1 seq_cst, align 8
  %first = icmp eq i64 %ticket, 0
  br i1 %first, label %wait, label %second
second:
  store atomic i64 1, ptr %flags seq_cst, align 8
  ret void
wait:
  %i = phi i64 [0, %entry], [%i1, %wait]
  %seen = load atomic i64, ptr %flags seq_cst, align 8
  %i1 = add i64 %i, 1
  %met = icmp ne i64 %seen, 0
  %give_up = icmp sgt i64 %i1, GIVE_UP
  %stop = or i1 %met, %give_up
  br i1 %stop, label %done, label %wait
done:
  %ok = getelementptr i64, ptr %flags, i64 1
  %met64 = zext i1 %met to i64
  store i64 %met64, ptr %ok, align 8
  ret void
}
""".replace("GIVE_UP", str(_GIVE_UP))
