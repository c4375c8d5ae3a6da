"""Tasks, space moves and loop-IR features against independent expectations."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from search_helpers import dense_task

from autorelay.schedule.space import Config
from autorelay.te import nn
from autorelay.te import tensor as te
from search import space_ops
from search.features import KINDS, LENGTH, extract
from search.task import count_flops, kernel_task
from search.tuners.model_based import lower_features


def test_flops_and_keys():
    t = dense_task(16, 24, 32)
    assert t.flops == 2 * 16 * 24 * 32
    assert dense_task(16, 24, 32).key == t.key  # stable across rebuilds of the same compute
    assert dense_task(16, 24, 48).key != t.key
    x, w = te.placeholder((1, 3, 8, 8), name="X"), te.placeholder((4, 3, 3, 3), name="W")
    conv = te.make_def([x, w], nn.conv2d_nchw(x, w, 1, 1), "conv")
    assert count_flops(conv) == 2 * 4 * 8 * 8 * 3 * 9
    assert t.workload["family"] == "dense" and t.workload["shapes"][0] == [16, 32]


def test_task_pickles_and_checks_against_reference():
    t = dense_task()
    t2 = pickle.loads(pickle.dumps(t))
    assert t2.key == t.key and t2.target == t.target
    a, w = t2.inputs()
    assert t2.check([a.astype(np.float64) @ w.T.astype(np.float64)]) is None
    bad = a @ w.T
    bad[1, 2] += 0.5
    msg = t2.check([bad])
    assert msg is not None and "(1, 2)" in msg


def test_naive_reference_when_no_oracle():
    a, w = te.placeholder((5, 7), name="A"), te.placeholder((6, 7), name="W")
    t = kernel_task(te.make_def([a, w], nn.dense(a, w), "d"))
    x, y = t.inputs()
    np.testing.assert_allclose(t.expected()[0], x @ y.T, rtol=1e-5, atol=1e-5)


def test_knob_indices_roundtrip_and_neighbours():
    t = dense_task()
    sp = t.space
    rng = random.Random(0)
    for i in rng.sample(range(len(sp)), 30):
        d = space_ops.knob_indices(sp, i)
        assert space_ops.from_knob_indices(sp, d) == i
        cfg = sp.get(i)
        assert [sp.knobs[k].values.index(cfg[sp.knobs[k].name]) for k in range(len(d))] == d
        for j in space_ops.neighbours(sp, i):
            dj = space_ops.knob_indices(sp, j)
            diff = [abs(a - b) for a, b in zip(d, dj)]
            assert sorted(diff)[-1] == 1 and sum(diff) == 1
        m = space_ops.mutate(sp, i, rng)
        assert m != i and sum(a != b for a, b in zip(d, space_ops.knob_indices(sp, m))) == 1
    with pytest.raises(IndexError):
        space_ops.knob_indices(sp, len(sp))


def test_features_reflect_the_schedule():
    t = dense_task(16, 24, 32)
    d = t.config(t.index(t.default))
    f = lower_features(t, d)
    assert f is not None and len(f) == LENGTH
    # level 0 = innermost loop of the hot nest: the template vectorizes it over the vector lanes
    vec_kind = 1 + KINDS.index("vectorized")
    assert f[vec_kind] == 1.0
    assert f[0] == pytest.approx(np.log2(1 + t.target.vector_lanes()))
    # different knob values give different features; an illegal config gives None
    other = next(i for i in range(len(t.space)) if t.space.get(i) != d)
    assert lower_features(t, t.config(other)) != f
    bad = Config("dense", (("tile_m", 0), ("tile_n_vectors", 1), ("outer", "n"), ("unroll_k", 1)))
    assert lower_features(t, bad) is None


def test_features_see_strides():
    # C[i, j] = A[j, i]: the innermost loop (j) walks A with stride = A's row length
    a = te.placeholder((8, 40), name="A")
    tr = te.compute((40, 8), lambda i, j: a[j, i] * 2.0, name="T")
    t = kernel_task(te.make_def([a], tr, "transpose"))
    from autorelay.schedule.apply import apply

    func, _ = apply(t.cdef, ())
    f = extract(func, None)
    buf0 = 6 * 5  # after LEVELS x PER_LEVEL loop features: the store's buffer row, then the load's
    store_s0, load_s0 = f[buf0 + 3], f[buf0 + 8 + 3]
    assert store_s0 == pytest.approx(np.log2(2))  # stride 1
    assert load_s0 == pytest.approx(np.log2(41))  # stride 40
