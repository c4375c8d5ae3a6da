"""Copies the graph executor avoids: a concatenation whose pieces are contiguous blocks of its
result has the pieces written there by their producers (no step of its own), and inputs that only
compiled kernels read are read where the caller keeps them. Checked against the reference
interpreter and NumPy, at 1 and 2 threads, and through save/load."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

pytestmark = pytest.mark.cpu

RNG = np.random.default_rng(7)

# a stack of two temps that are also read elsewhere (so fusion cannot fold them into the stack);
# a chain of temps runs between the two pieces, so a planner that placed the result late, or
# freed it early, would let those temps overwrite the first piece
STACK = """#[version = "0.0.5"]
def @main(%x: Tensor[(3, 40), float32]) {
  %0 = exp(%x);
  %1 = tanh(%0);
  %2 = sigmoid(%1);
  %3 = negative(%2);
  %4 = add(%3, %x);
  %5 = concatenate((expand_dims(%0, axis=0), expand_dims(%4, axis=0)), axis=0);
  (%5, add(%0, %4))
}"""
# a stack of a stack: the inner result is itself a piece of the outer one
NESTED = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32]) {
  %0 = exp(%x);
  %1 = tanh(%x);
  %2 = concatenate((%0, %1), axis=0);
  %3 = sigmoid(%x);
  concatenate((%2, %3), axis=0)
}"""
NOT_IN_PLACE = {
    "an input": """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32]) { concatenate((%x, exp(%x)), axis=0) }""",
    "one temp twice": """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32]) { %0 = exp(%x); concatenate((%0, %0), axis=0) }""",
    "an inner axis": """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32]) { concatenate((exp(%x), tanh(%x)), axis=1) }""",
    "a constant": """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32], %c: Tensor[(2, 8), float32]) { concatenate((exp(%x), %c), axis=0) }""",
}


def _step_names(exe) -> list[str]:
    return [st.name for st in exe.plan.steps]


def _check(mod, exe, *args):
    """The executable's outputs, after checking them against the reference interpreter."""
    want = autorelay.evaluate(mod, *args)
    got = exe(*args)
    if isinstance(got, tuple):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=1e-6)
    return got


@pytest.mark.parametrize("pipeline", ["O0", "default"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_stack_of_temps_is_written_in_place(pipeline, threads):
    mod = autorelay.parse(STACK)
    x = RNG.standard_normal((3, 40)).astype("float32")
    exe = autorelay.build(mod, threads=threads, pipeline=pipeline)
    assert not any("concatenate" in n for n in _step_names(exe)), _step_names(exe)
    stacked, total = _check(mod, exe, x)
    e = np.exp(x)
    np.testing.assert_allclose(stacked[0], e, rtol=1e-6)
    np.testing.assert_allclose(total, stacked[0] + stacked[1], rtol=1e-6)
    slots = exe.plan.slots
    assert all(slots[s.index].kind == "temp" for s in slots if s.kind == "alias")


def test_nested_stacks_point_at_the_outermost_result(tmp_path):
    mod = autorelay.parse(NESTED)
    x = RNG.standard_normal((2, 8)).astype("float32")
    exe = autorelay.build(mod, threads=1, pipeline="O0")
    assert "concatenate" not in _step_names(exe)
    got = _check(mod, exe, x)
    np.testing.assert_allclose(got, np.concatenate([np.exp(x), np.tanh(x), 1 / (1 + np.exp(-x))]), rtol=1e-6)
    slots = exe.plan.slots
    assert all(slots[s.index].kind == "temp" for s in slots if s.kind == "alias")
    exe.save(tmp_path / "m.arx")
    np.testing.assert_array_equal(autorelay.load(tmp_path / "m.arx")(x), got)


@pytest.mark.parametrize("case", sorted(NOT_IN_PLACE))
def test_pieces_that_cannot_be_placed_are_copied(case):
    mod = autorelay.parse(NOT_IN_PLACE[case])
    x = RNG.standard_normal((2, 8)).astype("float32")
    params = {"c": RNG.standard_normal((2, 8)).astype("float32")} if case == "a constant" else None
    exe = autorelay.build(mod, params=params, threads=1, pipeline="O0")
    assert "concatenate" in _step_names(exe)
    got = exe(x)
    e = np.exp(x)
    parts = {"an input": ([x, e], 0), "one temp twice": ([e, e], 0),
             "a constant": ([e, params and params["c"]], 0), "an inner axis": ([e, np.tanh(x)], 1)}
    want = np.concatenate(*parts[case])
    np.testing.assert_allclose(got, want, rtol=1e-6)


DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(64, 96), float32], %w: Tensor[(80, 96), float32], %b: Tensor[(80), float32]) {
  %0 = nn.dense(%x, %w);
  %1 = add(%0, %b);
  (nn.relu(%1), exp(take(%x, 1, axis=0)))
}"""


@pytest.mark.parametrize("threads", [1, 2])
def test_inputs_are_read_in_place_and_rebound_each_call(threads):
    mod = autorelay.parse(DENSE)
    exe = autorelay.build(mod, threads=threads)
    ex = exe._executor
    x, w, b = (RNG.standard_normal(s).astype("float32") for s in ((64, 96), (80, 96), (80,)))

    def want(x, w, b):
        return np.maximum(x @ w.T + b, 0)

    y, row = exe(x, w, b)
    np.testing.assert_allclose(y, want(x, w, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(row, np.exp(x[1]), rtol=1e-6)
    assert ex._bound[0] == x.ctypes.data  # no copy of x: the kernel read it where it lies
    x2 = RNG.standard_normal((64, 96)).astype("float32")
    np.testing.assert_allclose(exe(x2, w, b)[0], want(x2, w, b), rtol=1e-4, atol=1e-4)
    x[:] = x2 * 3  # the caller changed its array between calls
    np.testing.assert_allclose(exe(x, w, b)[0], want(x, w, b), rtol=1e-4, atol=1e-4)
    strided = RNG.standard_normal((64, 192)).astype("float32")[:, ::2]  # not contiguous: copied
    np.testing.assert_allclose(exe(strided, w, b)[0], want(strided, w, b), rtol=1e-4, atol=1e-4)
    assert ex._bound[0] == ex.inputs[0].ctypes.data
    raw = np.zeros(64 * 96 * 4 + 1, np.uint8)  # float32 at an odd byte address: copied
    odd = np.frombuffer(raw.data, np.float32, 64 * 96, offset=1).reshape(64, 96)
    odd_src = RNG.standard_normal((64, 96)).astype("float32")
    raw[1:] = odd_src.view(np.uint8).reshape(-1)
    np.testing.assert_allclose(exe(odd, w, b)[0], want(odd_src, w, b), rtol=1e-4, atol=1e-4)
    y, row = exe(x, w, b)  # and back to reading in place, through a view at an offset too
    np.testing.assert_allclose(y, want(x, w, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(row, np.exp(x[1]), rtol=1e-6)
    assert ex._bound[0] == x.ctypes.data


def test_an_input_read_outside_kernels_is_copied():
    mod = autorelay.parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32]) { (%x, exp(%x)) }""")
    exe = autorelay.build(mod, threads=1)
    assert not exe._executor._direct[0]  # the output copy of %x is a NumPy step
    for _ in range(2):
        x = RNG.standard_normal((4, 6)).astype("float32")
        same, e = exe(x)
        np.testing.assert_array_equal(same, x)
        np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
