"""The vectorised float32 `exp`, `erf`, `tanh` (and `sigmoid`, through `exp`): accuracy in ulp
against float64 math over the whole float32 range, the special values, both vector widths and the
scalar path; and the emitted code calls no libm function lane by lane. Both widths compile on every
host (the AVX-512 code uses zmm registers, the AVX2 code ymm and never zmm); a width's accuracy
is measured where this host has its features, and skipped, naming the ones it lacks, elsewhere."""

from __future__ import annotations

import math

import numpy as np
import pytest
from host_widths import run_here_or_skip

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.jit import assembly
from autorelay.kernel import compile_kernel
from autorelay.schedule import steps as S
from autorelay.te import expr as E
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu

WIDTHS = {"avx2": "llvm -mcpu=znver3", "avx512": "llvm -mcpu=znver5"}
N = 1 << 16
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


REFERENCE = {"exp": np.exp, "erf": _erf, "tanh": np.tanh, "sigmoid": _sigmoid}
# where each function's float32 value varies: beyond these it is 0, ±1 or overflows
RANGE = {"exp": (-105.0, 89.0), "erf": (-4.5, 4.5), "tanh": (-10.0, 10.0), "sigmoid": (-90.0, 90.0)}
MAX_ULP = {"exp": 1.5, "erf": 6.0, "tanh": 6.0, "sigmoid": 3.0}
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-45, 3e38, -3e38,
                     88.72, 88.73, -87.3, -103.9, -104.5, 4.0, -4.0, 9.0, 9.5], np.float32)


def _kernel(fn: str, target: str | None, vector: bool):
    x = te.placeholder((N,), name="X")
    y = te.compute((N,), lambda i: E.call(fn, x[i]), name="Y")
    steps = [S.Split("Y", "i", 16), S.Vectorize("Y", "i_i")] if vector else []
    return compile_kernel(te.make_def([x], y), steps, resolve_target(target, 1) if target else None)


def _inputs(fn: str) -> np.ndarray:
    lo, hi = RANGE[fn]
    rng = np.random.default_rng(7)
    grid = np.linspace(lo, hi, N - 2 * len(SPECIALS), dtype=np.float32)
    n = len(SPECIALS)
    tiny = (rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-38, -1, n)).astype(np.float32)
    return np.concatenate([grid, SPECIALS, tiny])


def _ulp_error(got: np.ndarray, x: np.ndarray, fn: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        ref = REFERENCE[fn](x.astype(np.float64))
    f32 = np.finfo(np.float32)
    finite = (np.abs(ref) < f32.max) & (np.abs(ref) > f32.tiny)
    ulp = np.spacing(np.abs(ref[finite]).astype(np.float32)).astype(np.float64)
    return np.abs(got[finite].astype(np.float64) - ref[finite]) / ulp


@pytest.mark.parametrize("width", sorted(WIDTHS))
@pytest.mark.parametrize("fn", sorted(REFERENCE))
def test_vector_math_is_accurate_in_ulp(fn, width):
    x = _inputs(fn)
    kernel = _kernel(fn, WIDTHS[width], vector=True)
    asm = assembly(kernel.code.code.text, kernel.target)
    if width == "avx512":
        assert "zmm" in asm, "the AVX-512 code uses no AVX-512 register"
    else:
        assert "ymm" in asm and "zmm" not in asm, "the AVX2 code is not AVX2 (ymm registers only)"
    run_here_or_skip(kernel.target)
    got = kernel.run(x)
    assert _ulp_error(got, x, fn).max() <= MAX_ULP[fn]
    with np.errstate(over="ignore", invalid="ignore"):
        ref = REFERENCE[fn](x.astype(np.float64)).astype(np.float32)
    special = ~np.isfinite(ref) | (np.abs(ref) <= np.finfo(np.float32).tiny)
    # NaN stays NaN, infinities give the limits, an underflow gives 0 or a subnormal
    np.testing.assert_allclose(got[special], ref[special], rtol=0, atol=np.finfo(np.float32).tiny)
    assert np.all(np.abs(got[np.isfinite(got)]) <= (np.inf if fn == "exp" else 1.0))


@pytest.mark.parametrize("fn", sorted(REFERENCE))
def test_scalar_path_matches_the_vector_path(fn):
    """One rule per function: the scalar (tail, unvectorised) code gives the same bits."""
    x = _inputs(fn)
    vector, scalar = _kernel(fn, None, True).run(x), _kernel(fn, None, False).run(x)
    np.testing.assert_array_equal(vector, scalar)


@pytest.mark.parametrize("fn", ["exp", "erf", "tanh"])
def test_no_libm_call_per_lane(fn):
    ir = _kernel(fn, WIDTHS["avx512"], vector=True).llvm_ir
    assert f"@{fn}f(" not in ir and f"@llvm.{fn}." not in ir
