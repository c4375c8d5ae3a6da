"""Builder/runner: real timings, and every failure kind produced on purpose and reported as data."""

from __future__ import annotations

import numpy as np
import pytest
from search_helpers import Faults, dense_task

from autorelay.kernel import BoundKernel, compile_kernel
from autorelay.schedule.space import Config
from search.measure import ErrorKind, MeasureInput, Measurer, TimingSettings

FAST = TimingSettings(number=1, repeat=3, min_repeat_ms=2.0, warmup=1, timeout=4.0)


def _inp(task, **knobs):
    cfg = task.default
    vals = tuple((k, knobs.get(k, v)) for k, v in cfg.values)
    c = Config(cfg.template, vals)
    return MeasureInput(c, task.index(c))


@pytest.fixture(scope="module")
def task():
    return dense_task(16, 24, 32)


def test_measures_real_candidates(task):
    inputs = [MeasureInput(task.config(i), i) for i in (0, len(task.space) // 2, len(task.space) - 1)]
    with Measurer(settings=FAST) as m:
        res = m.measure(task, inputs)
        pid = m.runner.pool.workers[0].pid
        again = m.remeasure(task, inputs[:2], rounds=4)
        assert m.runner.pool.workers[0].pid == pid and m.runner.pool.restarts == 0  # reused while healthy
    for r in res:
        assert r.ok, r.message
        assert len(r.costs) == 3 and all(0 < c < 0.1 for c in r.costs)
        assert r.extra["number"] >= 1 and len(r.extra["features"]) > 0
    assert [len(r.costs) for r in again] == [4, 4]
    # the measured config really computes the product (independent check in this process)
    a, w = task.inputs()
    k = compile_kernel(task.cdef, inputs[1].config, task.target)
    np.testing.assert_allclose(k.run(a, w), a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call_us", [0.3, 7.0, 450.0, 5000.0])
def test_calibration_makes_one_timing_last_min_repeat(monkeypatch, call_us):
    """`number` grows until `number` calls last at least min_repeat_ms, without overshooting much;
    on a fake clock each call advances by exactly `call_us` (real timings would flake under load)."""
    from search.measure import jobs

    now = [0.0]
    monkeypatch.setattr(jobs.time, "perf_counter", lambda: now[0])

    class Call(BoundKernel):  # a bound kernel whose every call advances the fake clock
        def __init__(self) -> None:
            pass

        def __call__(self) -> None:
            now[0] += call_us * 1e-6

        def constant_inputs(self) -> list:
            return []

    settings = TimingSettings(number=1, repeat=3, min_repeat_ms=2.0, warmup=1)
    number = jobs._calibrate(Call(), settings)
    lasted = number * call_us * 1e-6
    assert lasted >= 2e-3 or number == 1
    assert number == 1 or lasted <= 2e-3 * 2.5


def test_every_failure_kind_is_recorded_and_the_measurer_survives(task):
    tm = task.space.knob("tile_m").values
    hook = Faults(((tm[1], "segv"), (tm[2], "hang"), (tm[3], "wrong"), (tm[4], "compile")))
    illegal = Config("dense", (("tile_m", 0), ("tile_n_vectors", 1), ("outer", "n"), ("unroll_k", 1)))
    inputs = [_inp(task, tile_m=tm[1]), _inp(task, tile_m=tm[0]), _inp(task, tile_m=tm[2]),
              _inp(task, tile_m=tm[3]), _inp(task, tile_m=tm[4]), MeasureInput(illegal, -1),
              _inp(task, tile_m=tm[5])]
    settings = TimingSettings(number=1, repeat=2, min_repeat_ms=1.0, warmup=0, timeout=2.0)
    with Measurer(settings=settings, hook=hook) as m:
        res = m.measure(task, inputs)
        restarts = m.runner.pool.restarts
    kinds = [r.error for r in res]
    want = [ErrorKind.RUNTIME_CRASH, ErrorKind.NONE, ErrorKind.TIMEOUT, ErrorKind.WRONG_ANSWER,
            ErrorKind.COMPILE_ERROR, ErrorKind.ILLEGAL_SCHEDULE, ErrorKind.NONE]
    assert kinds == want, [r.message for r in res]
    assert "SIGSEGV" in res[0].message
    assert "differs from the reference" in res[3].message
    assert "injected compile failure" in res[4].message
    assert res[1].ok and res[6].ok  # candidates after a crash and a hang were still timed
    assert restarts >= 2  # the dead and the killed worker were replaced


def test_a_slow_reference_is_not_a_candidate_timeout():
    from search_helpers import slow_dense_ref

    from autorelay.te import nn
    from autorelay.te import tensor as te
    from search.task import kernel_task

    a, w = te.placeholder((8, 16), name="A"), te.placeholder((8, 16), name="W")
    task = kernel_task(te.make_def([a, w], nn.dense(a, w), "dense"), reference=slow_dense_ref)
    settings = TimingSettings(number=1, repeat=2, min_repeat_ms=1.0, warmup=0, timeout=1.0)
    with Measurer(build_workers=1, settings=settings) as m:
        res = m.measure(task, [MeasureInput(task.default, task.index(task.default))])
    assert res[0].ok, res[0].message


@pytest.fixture(scope="module")
def model_task():
    """The first task of the zoo's MLP: a dense layer whose weight and bias are model constants."""
    from search.models import load_model, prepare_model

    model = load_model("mlp")
    return prepare_model(model, "llvm", threads=1, pipeline="default").extraction.tasks[0]


def test_timing_evicts_a_models_constants_before_every_call(monkeypatch, model_task):
    """With `cold_constants` (the default) every timed call of a model kernel is preceded by
    evicting exactly its constant inputs (the weights, as bound); without, nothing is evicted."""
    import tempfile

    from autorelay import kernel as kernel_module
    from search.measure import jobs

    task = model_task
    evicted: list[list[int]] = []
    monkeypatch.setattr(kernel_module, "evict", lambda arrays: evicted.append([a.nbytes for a in arrays]))
    constants = [t for t in task.cdef.inputs if t.value is not None]
    assert constants and len(constants) < len(task.cdef.inputs)  # weights and a run-time input
    cache = tempfile.mkdtemp()
    res = jobs.run_job(task, task.default, cache, TimingSettings(number=1, repeat=3, min_repeat_ms=1.0))
    assert res.ok and len(evicted) >= 3 * res.extra["number"]
    # one buffer per constant (re-laid-out as the kernel reads it: packing may pad it)
    least = sorted(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in constants)
    assert all(len(e) == len(constants) and all(a >= b for a, b in zip(sorted(e), least)) for e in evicted)
    evicted.clear()
    res = jobs.run_job(task, task.default, cache, TimingSettings(min_repeat_ms=1.0, cold_constants=False))
    assert res.ok and evicted == []


def test_evicting_keeps_the_data_and_the_kernel_still_computes(model_task):
    from autorelay.codegen.llvm.cache_evict import evict

    task = model_task
    args = task.inputs()
    kernel = compile_kernel(task.cdef, task.default, task.target)
    bound = kernel.bind(*args)
    before = [a.copy() for a in bound.constant_inputs()]
    assert bound.time(3, cold=bound.constant_inputs()) > 0
    evict(bound.inputs)
    for a, b in zip(before, bound.constant_inputs()):
        np.testing.assert_array_equal(a, b)
    bound()
    assert task.check(bound.outputs) is None


def test_a_build_result_leaves_the_weights_behind_and_its_run_still_checks_and_evicts_them(model_task):
    """A build result travels without the task's compute (the weights: pickled to the tuner and on
    to the runner, megabytes for a convolution); the run puts the task's compute back, so the
    candidate is checked against the reference and its constants are still the ones evicted."""
    import pickle
    import tempfile

    from search.measure import jobs

    task = model_task
    cache = tempfile.mkdtemp()
    built = jobs.build_job(task, task.default, cache)
    assert built.error is ErrorKind.NONE and built.code.cdef is None
    weights = sum(t.value.nbytes for t in task.cdef.inputs if t.value is not None)
    assert len(pickle.dumps(built)) < weights / 4
    res = jobs.run_job(task, task.default, cache, TimingSettings(number=1, repeat=2, min_repeat_ms=1.0),
                       code=pickle.loads(pickle.dumps(built)).code)
    assert res.ok, res.message
    assert res.extra["number"] >= 1 and len(res.costs) == 2
