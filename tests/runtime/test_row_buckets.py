"""Row buckets: which functions run padded to a few row counts, and that they compute the same."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.codegen.llvm.host import host_target
from autorelay.ir import IRModule
from autorelay.runtime.vm.kernels import CompiledProvider
from autorelay.runtime.vm.row_buckets import bucket, independent_rows, row_params
from autorelay.runtime.vm.specializing_kernel import specialize

rng = np.random.default_rng(5)


def _fn(params: str, body: str):
    return autorelay.parse(f'#[version = "0.0.5"]\ndef @main({params}) {{\n  {body}\n}}')["main"]


def _args(fn, rows: int) -> list[np.ndarray]:
    out = []
    for p in fn.params:
        t = p.type_annotation
        shape = [d if isinstance(d, int) else rows for d in t.shape]
        a = rng.standard_normal(shape) if t.dtype.startswith("float") else rng.integers(0, 3, shape)
        out.append(np.asarray(a, t.dtype))
    return out


ROW_WISE = {
    "dense": ("%x: Tensor[(?, 16), float32], %w: Tensor[(8, 16), float32], %b: Tensor[(8,), float32]",
              "nn.relu(nn.bias_add(nn.dense(%x, %w, units=None), %b))"),
    "reshape": ("%x: Tensor[(?, 12), float32]", "exp(reshape(%x, newshape=[-1, 3, 4]))"),
    "softmax": ("%x: Tensor[(?, 5), float32], %y: Tensor[(?, 1), float32]",
                "nn.softmax(multiply(%x, %y), axis=1)"),
    "columns": ("%x: Tensor[(?, 8), float32]",
                "strided_slice(%x, begin=[1], end=[8], strides=[2], axes=[1])"),
    "pad columns": ("%x: Tensor[(?, 3), float32]", "nn.pad(%x, 0f, pad_width=[[0, 0], [1, 2]])"),
    "divide by a constant": ("%x: Tensor[(?, 3), int64]", "floor_divide(%x, 2i64)"),
}
ACROSS_ROWS = {
    "cumsum": ("%x: Tensor[(?, 4), float32]", "cumsum(%x, axis=0)"),
    "sum over rows": ("%x: Tensor[(?, 4), float32]", "sum(%x, axis=[0], keepdims=True)"),
    "row slice": ("%x: Tensor[(?, 4), float32]",
                  "strided_slice(%x, begin=[1, 0], end=[100000, 4], strides=[1, 1])"),
    "pad rows": ("%x: Tensor[(?, 3), float32]", "nn.pad(%x, 0f, pad_width=[[1, 0], [0, 0]])"),
    "transpose": ("%x: Tensor[(?, 3), float32]", "transpose(%x, axes=[1, 0])"),
    "gather by data": ("%t: Tensor[(?, 4), float32], %i: Tensor[(?,), int64]", "take(%t, %i, axis=0)"),
    "divide by data": ("%x: Tensor[(?, 3), int64], %y: Tensor[(?, 3), int64]", "floor_divide(%x, %y)"),
}


def test_buckets_are_few_and_close():
    for n in range(1, 5000):
        b = bucket(n)
        assert n <= b == bucket(b) and (n < 8 or b <= 1.25 * n), n
    for k in range(3, 12):  # four row counts per octave
        assert len({bucket(n) for n in range(2 ** k + 1, 2 ** (k + 1) + 1)}) == 4


@pytest.mark.parametrize("case", sorted(ROW_WISE))
def test_functions_whose_rows_are_independent(case):
    fn = _fn(*ROW_WISE[case])
    args = _args(fn, 7)
    rows = row_params(fn, args)
    assert rows and independent_rows(fn, args, rows, specialize)


@pytest.mark.parametrize("case", sorted(ACROSS_ROWS))
def test_functions_that_read_across_rows_or_could_fault_on_zero_rows(case):
    fn = _fn(*ACROSS_ROWS[case])
    args = _args(fn, 7)
    rows = row_params(fn, args)
    assert rows and not independent_rows(fn, args, rows, specialize)


def test_a_parameter_with_another_count_is_not_a_row_parameter():
    fn = _fn(*ACROSS_ROWS["gather by data"])
    t, i = _args(fn, 7)
    assert row_params(fn, [t, i[:5]]) == (0,)


@pytest.mark.parametrize("case", ["dense", "softmax", "cumsum"])
def test_a_kernel_over_many_row_counts_compiles_per_bucket_and_matches_the_interpreter(case):
    fn = _fn(*(ROW_WISE | ACROSS_ROWS)[case])
    kernel = CompiledProvider(host_target(2)).kernel(fn)
    counts = [5, 300, 301, 310, 290, 1000, 999, 3]
    for n in counts:
        args = _args(fn, n)
        want = autorelay.evaluate(IRModule.from_expr(fn), *args)
        np.testing.assert_allclose(kernel(*args), want, rtol=1e-5, atol=1e-4)  # cumsum: blocked sums
    if case == "cumsum":  # one kernel per row count
        assert kernel.compiled == len(counts) and "padded" not in kernel.detail
    else:  # the first count as it is, then one per bucket: 320 for 290 to 310, 1024 for 999 and 1000
        assert kernel.compiled == 1 + len({bucket(n) for n in counts[1:]}) == 4
        assert "rows padded to buckets" in kernel.detail
