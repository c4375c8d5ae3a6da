"""Shape-only ops run as views in the graph executor: no step, no copy, and the viewed storage is
kept until the view's last reader. Checked against the reference interpreter (and NumPy), through
save/load too."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

pytestmark = pytest.mark.cpu

# exp(x) is reshaped; a chain of temps that could reuse exp's block runs before the reshaped value is
# read again, so a planner that forgot the view would overwrite it
LATE_READ = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32]) {
  %0 = exp(%x);
  %1 = reshape(%0, newshape=[2, 12]);
  %2 = tanh(%x);
  %3 = negative(%2);
  %4 = sigmoid(%3);
  %5 = expand_dims(%4, axis=0);
  %6 = reshape(%5, newshape=[2, 12]);
  add(%1, %6)
}"""
INPUT_VIEW = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32]) {
  (reshape(%x, newshape=[24]), add(squeeze(expand_dims(%x, axis=0), axis=[0]), 1f))
}"""


def _steps(exe) -> list[str]:
    return [r.name for r in exe.report.rows]


def test_a_reshaped_temp_is_a_view_kept_alive_until_read():
    mod = autorelay.parse(LATE_READ)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")
    exe = autorelay.build(mod, threads=1, pipeline="O0")  # unfused: every op its own step
    assert not any(n in ("reshape", "expand_dims") for n in _steps(exe)), _steps(exe)
    want = np.asarray(autorelay.evaluate(mod, x))
    np.testing.assert_allclose(exe(x), want, rtol=1e-6)
    np.testing.assert_allclose(exe(x), (np.exp(x) + 1 / (1 + np.exp(np.tanh(x)))).reshape(2, 12), rtol=1e-5)
    slots = exe.plan.slots
    assert sum(s.kind == "alias" for s in slots) == 3
    assert all(slots[s.index].kind != "alias" for s in slots if s.kind == "alias")


def test_views_of_inputs_and_outputs_that_are_views(tmp_path):
    mod = autorelay.parse(INPUT_VIEW)
    x = np.random.default_rng(1).standard_normal((4, 6)).astype("float32")
    exe = autorelay.build(mod, threads=1)
    flat, plus = exe(x)
    np.testing.assert_array_equal(flat, x.reshape(24))
    np.testing.assert_allclose(plus, x + 1, rtol=1e-6)
    x[0, 0] = 100.0  # outputs are copies: the caller's later changes do not reach them
    assert flat[0] != 100.0
    exe.save(tmp_path / "m.arx")
    loaded = autorelay.load(tmp_path / "m.arx")
    np.testing.assert_array_equal(loaded(x)[0], x.reshape(24))
    np.testing.assert_allclose(loaded(x)[1], x + 1, rtol=1e-6)


TAKES = [  # (data shape, take expression on %x, whether it is a view)
    ((4, 3, 5), 'take(%x, 2, axis=0)', True),
    ((4, 3, 5), 'take(%x, -1, axis=0, mode="wrap")', True),
    ((4, 3, 5), 'take(%x, -1, axis=0, mode="clip")', True),
    ((4, 3, 5), 'take(%x, 9, axis=0, mode="clip")', True),
    ((1, 3, 5), 'take(%x, 1, axis=1)', True),
    ((4, 3, 5), 'take(%x, 1, axis=1)', False),  # rows of 5 with gaps: a kernel
    ((2, 6, 5), 'expand_dims(take(reshape(%x, newshape=[12, 5]), 7, axis=0), axis=0)', True),
]


@pytest.mark.parametrize("shape,expr,is_view", TAKES, ids=[t[1] for t in TAKES])
def test_a_constant_index_take_of_a_contiguous_block_is_a_view(shape, expr, is_view):
    text = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[{shape}, float32]) {{ add({expr}, 1f) }}'
    mod = autorelay.parse(text)
    x = np.random.default_rng(2).standard_normal(shape).astype("float32")
    exe = autorelay.build(mod, threads=1, pipeline="O0")
    assert ("take" not in _steps(exe)) == is_view, _steps(exe)
    np.testing.assert_array_equal(exe(x), np.asarray(autorelay.evaluate(mod, x)))


def test_a_view_of_a_view_keeps_its_offset(tmp_path):
    # past[i] of a stacked cache, then its last row: offsets of chained views add up
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(3, 4, 6), float32]) {
  %0 = exp(%x);
  %1 = take(%0, 2, axis=0);
  %2 = take(%1, 3, axis=0);
  (negative(%2), %1)
}"""
    mod = autorelay.parse(text)
    x = np.random.default_rng(3).standard_normal((3, 4, 6)).astype("float32")
    exe = autorelay.build(mod, threads=1, pipeline="O0")
    assert "take" not in _steps(exe)
    for got, want in zip(exe(x), autorelay.evaluate(mod, x)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6)  # exp: within an ulp of NumPy's
    exe.save(tmp_path / "m.arx")
    np.testing.assert_allclose(autorelay.load(tmp_path / "m.arx")(x)[0], -np.exp(x)[2, 3], rtol=1e-6)
