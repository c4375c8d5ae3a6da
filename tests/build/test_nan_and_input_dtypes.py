"""What every executor does with NaNs and with inputs of another dtype, against the reference
interpreter (NumPy's rules)."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.errors import AutoRelayError
from autorelay.runtime.values import values_equal

EXECUTORS = ["graph", "vm", "aot"]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_nan_propagates_through_max_min_and_their_reductions(executor):
    """maximum/minimum (relu, clip, max pooling, max/min reductions) give NaN where an operand is
    NaN, and argmax/argmin point at the first NaN, as NumPy's do; compiled, a NaN was replaced by
    the other operand, and argmax returned the axis length."""
    mod = autorelay.parse('''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 6), float32]) {
  (nn.relu(%x), minimum(%x, 0f), clip(%x, a_min=-1f, a_max=1f), max(%x, axis=[1]), min(%x, axis=[1]),
   argmax(%x, axis=[1]), argmin(%x, axis=[1]),
   nn.max_pool2d(reshape(%x, newshape=[1, 1, 2, 6]), pool_size=[2, 2], strides=[1, 2]))
}''')
    x = np.array([[1.0, np.nan, 3.0, -np.inf, np.inf, -2.0], [np.nan] * 6], "float32")
    got = autorelay.build(mod, executor=executor)(x)
    want = autorelay.evaluate(mod, x)
    assert values_equal(got, want), (got, want)
    assert list(got[5]) == [1, 0] and list(got[6]) == [1, 0]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_inputs_convert_only_when_the_values_survive(executor):
    """A float64 array or a list for a float32 input, or int64 values that fit an int8 input, are
    converted; int64 values past int8's range are refused, naming the input (they wrapped)."""
    mod = autorelay.parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), int8], %y: Tensor[(2), float32]) '
                          '{ (add(%x, 1i8), multiply(%y, 2f)) }')
    exe = autorelay.build(mod, executor=executor)
    small, y = np.array([100, -7], "int64"), np.array([0.5, 1.5])
    got = exe(small, [0.5, 1.5])
    assert values_equal(got, (np.array([101, -6], "int8"), np.array([1.0, 3.0], "float32")))
    assert got[1].dtype == np.float32
    with pytest.raises(AutoRelayError, match=r"input 'x': expected dtype int8; the int64 values given do "
                                             r"not all fit its range \[-128, 127\]"):
        exe(np.array([300, -1000], "int64"), y)
    with pytest.raises(AutoRelayError, match="input 'y': expected dtype float32, got complex128"):
        exe(small, y + 1j)
