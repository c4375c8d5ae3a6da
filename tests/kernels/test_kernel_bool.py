"""Bool buffers in generated code: NumPy stores a bool as one byte (0 or 1), so kernels read and
write bool buffers as bytes, on the scalar path and on every vector path (contiguous, stride 2,
lane by lane), and relay-level kernels take and return NumPy bool arrays unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.codegen.llvm.host import host_target
from autorelay.kernel import compile_kernel
from autorelay.schedule import steps as S
from autorelay.te import expr as E
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu

ROWS, COLS = 3, 37  # ragged: the vector loop also takes its scalar tail


def _configs(stage: str) -> list[list[S.Step]]:
    """Scalar, a narrow vector and the host's widest byte vector (wider than the row)."""
    wide = host_target().vector_lanes("bool")
    return [[]] + [[S.Split(stage, "j", w), S.Vectorize(stage, "j_i")] for w in (8, wide)]


def _assert_bools(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.bool_ and got.shape == want.shape
    assert set(np.unique(got.view(np.uint8))) <= {0, 1}  # real NumPy bools, one byte each
    np.testing.assert_array_equal(got, want)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons_write_bool_outputs(op, rng):
    x, y = te.placeholder((ROWS, COLS), "int32", "X"), te.placeholder((ROWS, COLS), "int32", "Y")
    out = te.compute((ROWS, COLS), lambda i, j: E.compare(op, x[i, j], y[i, j]), name="C")
    a = rng.integers(-3, 4, (ROWS, COLS)).astype(np.int32)
    b = rng.integers(-3, 4, (ROWS, COLS)).astype(np.int32)
    want = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[op]
    for cfg in _configs("C"):
        _assert_bools(compile_kernel(te.make_def([x, y], out), cfg).run(a, b), want)


def test_float_comparison_and_where_with_a_bool_input(rng):
    c = te.placeholder((ROWS, COLS), "bool", "Cond")
    x, y = te.placeholder((ROWS, COLS), name="X"), te.placeholder((COLS,), name="Y")
    out = te.compute((ROWS, COLS), lambda i, j: E.select(c[i, j] & (x[i, j] > y[j]), x[i, j], y[j]), name="W")
    cond = rng.random((ROWS, COLS)) > 0.5
    a = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    b = rng.standard_normal(COLS).astype(np.float32)
    want = np.where(cond & (a > b), a, b)
    for cfg in _configs("W"):
        np.testing.assert_array_equal(compile_kernel(te.make_def([c, x, y], out), cfg).run(cond, a, b), want)


def test_logical_ops_on_bool_buffers(rng):
    a, b = te.placeholder((ROWS, COLS), "bool", "A"), te.placeholder((ROWS, COLS), "bool", "B")
    out = te.compute(
        (ROWS, COLS),
        lambda i, j: (a[i, j] & E.Not(b[i, j])) | E.compare("ne", a[i, j], E.Not(b[i, j])),
        name="L",
    )
    p, q = rng.random((ROWS, COLS)) > 0.5, rng.random((ROWS, COLS)) > 0.3
    want = (p & ~q) | (p != ~q)
    for cfg in _configs("L"):
        _assert_bools(compile_kernel(te.make_def([a, b], out), cfg).run(p, q), want)


def test_strided_and_gathered_bool_loads(rng):
    """Stride 2 takes the two-load shuffle path; a reversed index is loaded lane by lane."""
    c = te.placeholder((ROWS, 2 * COLS), "bool", "C")
    out = te.compute((ROWS, COLS), lambda i, j: c[i, 2 * j] | c[i, 2 * COLS - 1 - j], name="G")
    cond = rng.random((ROWS, 2 * COLS)) > 0.6
    want = cond[:, 0::2] | cond[:, ::-1][:, :COLS]
    for cfg in _configs("G"):
        _assert_bools(compile_kernel(te.make_def([c], out), cfg).run(cond), want)


def test_bool_casts_both_ways(rng):
    x = te.placeholder((ROWS, COLS), name="X")
    b = te.placeholder((ROWS, COLS), "bool", "B")
    out = te.compute((ROWS, COLS), lambda i, j: E.cast(x[i, j], "bool") & b[i, j], name="K")
    back = te.compute((ROWS, COLS), lambda i, j: E.cast(b[i, j], "float32") * 2.0
                      + E.cast(E.cast(b[i, j], "int32"), "float32"), name="F")
    a = np.where(rng.random((ROWS, COLS)) > 0.5, rng.standard_normal((ROWS, COLS)), 0).astype(np.float32)
    p = rng.random((ROWS, COLS)) > 0.5
    for cfg in _configs("K"):
        _assert_bools(compile_kernel(te.make_def([x, b], out), cfg).run(a, p), (a != 0) & p)
    for cfg in _configs("F"):
        np.testing.assert_array_equal(compile_kernel(te.make_def([b], back), cfg).run(p), p * np.float32(3))


def test_vector_code_moves_bytes_not_bits():
    a, b = te.placeholder((4, 64), "bool", "A"), te.placeholder((4, 64), "bool", "B")
    out = te.compute((4, 64), lambda i, j: a[i, j] | b[i, j], name="O")
    ir = compile_kernel(te.make_def([a, b], out), [S.Split("O", "j", 16), S.Vectorize("O", "j_i")]).llvm_ir
    assert "load <16 x i8>" in ir and "store <16 x i8>" in ir
    assert "load <16 x i1>" not in ir and "store <16 x i1>" not in ir


PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 67), float32], %y: Tensor[(67,), float32], %m: Tensor[(4, 67), bool]) {
  %0 = greater(%x, %y);
  %1 = logical_and(%0, %m);
  %2 = where(%1, %x, %y);
  (%2, logical_or(logical_not(%m), %0))
}"""


def test_relay_bool_ops_build_and_match_numpy(rng):
    mod = autorelay.parse(PROGRAM)
    x = rng.standard_normal((4, 67)).astype(np.float32)
    y = rng.standard_normal(67).astype(np.float32)
    m = rng.random((4, 67)) > 0.5
    exe = autorelay.build(mod)
    got_where, got_mask = exe(x, y, m)
    np.testing.assert_array_equal(got_where, np.where((x > y) & m, x, y))
    _assert_bools(np.asarray(got_mask), ~m | (x > y))
