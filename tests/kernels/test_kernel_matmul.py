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
from autorelay.lower import inline_stages
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


def _flattened_dense(c: int, h: int, n: int, block: int = 8):
    """A dense whose A is a fused prologue: a channel-blocked `[1, C/b, H, H, b]` map re-laid out
    to NCHW and flattened (a blocked CNN's classifier under `FusionPlan.prologues`), lowered as a
    fused function is (`inline_stages`)."""
    x = te.placeholder((1, c // block, h, h, block), name="x")
    w = te.placeholder((n, c * h * h), name="w")
    hw = h * h
    flat = te.compute((1, c * hw), lambda b, k: x[b, k // hw // block, k % hw // h, k % h, k // hw % block],
                      name="flat")
    return inline_stages(te.make_def([x, w], nn.relu(nn.dense(flat, w)), "dense"))


def _flattened_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    flat = x.transpose(0, 1, 4, 2, 3).reshape(1, -1).astype(np.float64)
    return np.maximum(flat @ w.T.astype(np.float64), 0)


@pytest.mark.parametrize("outer", ["n", "m"])
@pytest.mark.parametrize("tile_n_vectors", [1, 2])
def test_a_fused_prologue_of_a_is_computed_once_for_its_column_blocks(outer, tile_n_vectors):
    """Inlined, A's re-layout runs its index arithmetic on every read of A, once per column block
    (VGG-16's classifier ran 14.4 ms so against 11.9 ms unfused); the lowering keeps A's stage and
    the template computes it once, in parallel, before the GEMM."""
    cdef = _flattened_dense(24, 5, 70)
    assert "flat" in [t.name for t in te.topo_order(cdef.outputs)]  # kept by the lowering
    target = host_target(threads=2)
    tmpl = template_for(cdef)
    cfg = _with(tmpl.default(cdef, target), outer=outer, tile_n_vectors=tile_n_vectors)
    steps = tmpl.steps(cdef, cfg, target)
    assert S.ComputeInline("flat") not in steps
    assert [s for s in steps if isinstance(s, S.Parallel) and s.stage == "flat"]
    x, w = inputs_for(cdef, seed=3)
    got = compile_kernel(cdef, cfg, target).run(x, w)
    np.testing.assert_allclose(got, _flattened_reference(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_a_prologue_read_by_one_column_block_stays_inlined(target):
    """One column block reads A once: a pass of its own would only add a workspace round trip."""
    lanes = target.vector_lanes()
    cdef = _flattened_dense(16, 3, lanes)
    tmpl = template_for(cdef)
    cfg = _with(tmpl.default(cdef, target), tile_n_vectors=1)
    assert S.ComputeInline("flat") in tmpl.steps(cdef, cfg, target)
    wide = _flattened_dense(16, 3, 3 * lanes)
    wide_cfg = _with(tmpl.default(wide, target), tile_n_vectors=1)
    assert S.ComputeInline("flat") not in tmpl.steps(wide, wide_cfg, target)
