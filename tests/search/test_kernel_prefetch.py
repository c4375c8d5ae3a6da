"""Kernels shared between the builds of a search (`autorelay.primitive.KernelMemo`) and compiled
ahead in worker processes (`search.kernel_prefetch`): a build served from either computes what a
build of its own computes, and compiles nothing the memo holds."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
import autorelay.primitive as primitive
from autorelay.build_module import build_prepared
from autorelay.codegen import resolve_target
from autorelay.errors import ScheduleError
from autorelay.primitive import KernelMemo
from autorelay.transform.prepare import prepare
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


def _dense_model(out_features: int, in_features: int, seed: int = 0):
    """A one-layer model whose weight is a bound constant of `out_features x in_features` floats."""
    rng = np.random.default_rng(seed)
    mod = autorelay.parse(f'''#[version = "0.0.5"]
def @main(%x: Tensor[(2, {in_features}), float32], %w: Tensor[({out_features}, {in_features}), float32]) {{
  nn.dense(%x, %w)
}}''')
    w = rng.standard_normal((out_features, in_features)).astype("float32")
    x = rng.standard_normal((2, in_features)).astype("float32")
    return mod, w, x


def test_builds_sharing_a_memo_pack_a_large_weight_once():
    """The dense kernel reads its weight packed; two builds of one prepared model through a memo
    share one packed copy of a large weight (packing VGG-16's first dense weight took 0.9 s a
    build), and both compute x @ w.T."""
    mod, w, x = _dense_model(512, 1024)  # 2 MiB: above the memo's threshold
    target = resolve_target("llvm", 1)
    prepared = prepare(mod, {"w": w}, "default")
    memo = KernelMemo()
    first = build_prepared(prepared, target, memo=memo)
    assert len(memo.packed) == 1
    (packed,) = memo.packed.values()
    second = build_prepared(prepared, target, memo=memo)
    assert len(memo.packed) == 1 and next(iter(memo.packed.values())) is packed
    assert packed.size >= w.size
    for exe in (first, second):
        np.testing.assert_allclose(np.asarray(exe(x)), x @ w.T, rtol=1e-4, atol=1e-3)


def test_a_packed_constant_is_kept_per_array_and_re_layout():
    memo = KernelMemo()
    big = np.arange(512 * 1024, dtype="float32").reshape(512, 1024)
    ops = [("pack", 0, 8, 2)]
    packed = memo.packed_constant(big, ops)
    np.testing.assert_array_equal(packed, big.reshape(64, 8, 1024).transpose(0, 2, 1))
    assert memo.packed_constant(big, ops) is packed
    other = memo.packed_constant(big, [("pack", 0, 16, 2)])  # another re-layout of the same array
    np.testing.assert_array_equal(other, big.reshape(32, 16, 1024).transpose(0, 2, 1))
    copy = big.copy()
    twin = memo.packed_constant(copy, ops)  # equal contents, another array: its own entry
    assert twin is not packed and len(memo.packed) == 3
    small = np.ones((8, 8), "float32")  # under the threshold: packed, not kept
    np.testing.assert_array_equal(memo.packed_constant(small, ops), small.reshape(1, 8, 8).transpose(0, 2, 1))
    assert len(memo.packed) == 3
    del big, packed, other
    assert len(memo.packed) == 1  # the entries of an array go with it: the copy's is left
    del copy
    assert not memo.packed
