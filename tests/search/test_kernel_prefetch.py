"""Kernels shared between the builds of a search (`autorelay.primitive.KernelMemo`) and compiled
ahead in worker processes (`search.kernel_prefetch`): a build served from either computes what a
build of its own computes, and compiles nothing the memo holds."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
import autorelay.primitive as primitive
from autorelay.errors import ScheduleError
from autorelay.primitive import KernelMemo
from search.kernel_prefetch import prefetch_kernels
from search.models import build_model, load_model, prepare_model, run_inputs

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def model():
    return load_model("resnet-18", image_size=32)


def _reference(model) -> np.ndarray:
    mod = model.mod
    args = [model.inputs[p.name_hint] if p.name_hint in model.inputs else model.params[p.name_hint]
            for p in mod["main"].params]
    return np.asarray(autorelay.evaluate(mod, *args))


def _run(exe, model) -> np.ndarray:
    return np.asarray(exe(*run_inputs(exe, model)))


def test_builds_sharing_a_memo_reuse_kernels_and_compute_the_same(model):
    memo = KernelMemo()
    nchwc = prepare_model(model, "llvm", threads=1, pipeline="nchwc")
    default = prepare_model(model, "llvm", threads=1, pipeline="default")
    build_model(model, None, prepared=nchwc, memo=memo)
    compiled = len(memo.kernels)
    again = build_model(model, None, prepared=nchwc, memo=memo)
    assert len(memo.kernels) == compiled and memo.hits >= compiled  # nothing compiled twice
    shared = build_model(model, None, prepared=default, memo=memo)
    alone = build_model(model, None, prepared=default)
    np.testing.assert_array_equal(_run(shared, model), _run(alone, model))
    ref = _reference(model)
    for exe in (again, shared):
        np.testing.assert_allclose(_run(exe, model), ref, rtol=1e-4, atol=1e-4)


def test_prefetched_kernels_serve_the_whole_build(model):
    memo = KernelMemo()
    prepared = prepare_model(model, "llvm", threads=1, pipeline="nchwc")
    filed = prefetch_kernels(memo, [(prepared.module, None)], prepared.target, workers=2)
    assert filed == len(memo.kernels) > 1
    exe = build_model(model, None, prepared=prepared, memo=memo)
    assert len(memo.kernels) == filed  # every kernel the build needed came from the workers
    assert memo.hits >= filed
    np.testing.assert_allclose(_run(exe, model), _reference(model), rtol=1e-4, atol=1e-4)
    # one worker: nothing is compiled ahead, the build compiles its own kernels
    assert prefetch_kernels(KernelMemo(), [(prepared.module, None)], prepared.target, workers=1) == 0


def test_a_refused_schedule_is_remembered_and_refused_again(monkeypatch):
    calls = []

    def refuse(cdef, config, target, **kw):
        calls.append(cdef)
        raise ScheduleError("tile 7 does not divide 32")

    monkeypatch.setattr(primitive, "compile_kernel", refuse)
    memo = KernelMemo()
    for _ in range(2):
        with pytest.raises(ScheduleError, match="tile 7"):
            memo.compile(("k", None, None, False), ["cdef"], None, None)
    assert len(calls) == 1
