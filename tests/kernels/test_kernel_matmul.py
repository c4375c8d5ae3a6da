"""The GEMM template on `te.nn.matmul`'s layouts: a `[K, N]` B and a transposed `[K, M]` A are
packed or read as they are (knobs), a transposed-B `[N, K]` always packed; B panels are
NR = tile_n_vectors * the target's lanes wide, A panels tile_m rows.
Answers are checked on the host; step lists on fixed AVX2 and AVX-512 targets (no code runs)."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import inputs_for

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_target
from autorelay.kernel import compile_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config
from autorelay.schedule.templates import template_for
from autorelay.te import nn
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu

AVX2 = resolve_target("llvm -mcpu=haswell -threads=1")
AVX512 = resolve_target("llvm -mcpu=skylake-avx512 -threads=1")


def _mm(a_shape, b_shape, ta=False, tb=False):
    a, b = te.placeholder(a_shape, name="A"), te.placeholder(b_shape, name="B")
    return te.make_def([a, b], nn.matmul(a, b, ta, tb), "matmul")


def _with(cfg: Config, **knobs) -> Config:
    return Config(cfg.template, tuple((k, knobs.get(k, v)) for k, v in cfg.values))


@pytest.mark.parametrize("a_layout", ["packed", "as_is"])
@pytest.mark.parametrize("b_layout", ["packed", "as_is"])
def test_km_a_and_kn_b_packed_or_read_as_is_match_numpy(a_layout, b_layout):
    # A [2, K, M] transposed with a batch axis, B [K, N] broadcast; M and N ragged for any panel
    cdef = _mm((2, 13, 29), (13, 35), ta=True)
    target = host_target(threads=2)
    tmpl = template_for(cdef)
    cfg = _with(tmpl.default(cdef, target), a_layout=a_layout, b_layout=b_layout)
    assert tmpl.space(cdef, target).index(cfg) >= 0
    a, b = inputs_for(cdef, seed=5)
    got = compile_kernel(cdef, cfg, target).run(a, b)
    np.testing.assert_allclose(got, np.swapaxes(a, 1, 2).astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_panels_follow_the_targets_vector_lanes(target):
    lanes = target.vector_lanes()
    kn, nk = _mm((64, 40), (40, 100)), _mm((64, 40), (100, 40), tb=True)
    tmpl = template_for(kn)
    cfg = tmpl.default(kn, target)
    nr = cfg["tile_n_vectors"] * lanes
    assert cfg["b_layout"] == "packed"  # 64 rows: several row blocks reuse every panel
    packs = [s for s in tmpl.steps(kn, cfg, target) if isinstance(s, S.Pack)]
    assert packs == [S.Pack("B", 1, nr), S.Pack("B", 0, 40, 2)]  # [K, N] -> [1, N/NR, K, NR]
    assert not [s for s in tmpl.steps(kn, _with(cfg, b_layout="as_is"), target) if isinstance(s, S.Pack)]
    tn = _mm((40, 64), (40, 300), ta=True)  # A [K, M]: MR-row panels of all of K
    cfg = tmpl.default(tn, target)
    assert cfg["a_layout"] == "packed"  # 300 columns: several column blocks reuse every A panel
    packs = [s for s in tmpl.steps(tn, cfg, target) if isinstance(s, S.Pack) and s.tensor == "A"]
    assert packs == [S.Pack("A", 1, cfg["tile_m"]), S.Pack("A", 0, 40, 2)]
    # the transposed-B layout has no layout knob: its one Pack is the only form
    assert "b_layout" not in [k.name for k in tmpl.space(nk, target).knobs]
    cfg = tmpl.default(nk, target)
    packs = [s for s in tmpl.steps(nk, cfg, target) if isinstance(s, S.Pack)]
    assert packs == [S.Pack("B", 0, cfg["tile_n_vectors"] * lanes)]


def test_a_few_rows_read_a_kn_b_as_it_is():
    """One row block: packing B would cost a pass over it per run to save nothing."""
    cdef = _mm((3, 40), (40, 100))
    assert template_for(cdef).default(cdef, AVX2)["b_layout"] == "as_is"
