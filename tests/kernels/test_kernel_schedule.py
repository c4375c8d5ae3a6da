"""Schedule steps, spaces and configs: serialisation, mixed-radix indexing, legality errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_target
from autorelay.errors import ScheduleError
from autorelay.kernel import compile_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.apply import apply
from autorelay.schedule.relayout import relayout
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates import template_for, templates
from autorelay.te import nn
from autorelay.te import tensor as te
from autorelay.tir.printer import func_str

ALL_STEPS = [
    S.Split("C", "i", 4),
    S.Split("C", "i", 4, "a", "b"),
    S.Split("C", "i", 4, shift_tail=True),
    S.Reorder("C", ("j", "i")),
    S.Fuse("C", "i", "j"),
    S.Vectorize("C", "j"),
    S.Unroll("C", "i"),
    S.Parallel("C", "i"),
    S.CacheWrite("C"),
    S.ComputeAt("P", "C", "i"),
    S.ComputeInline("P"),
    S.Pack("W", 0, 8, 2),
    S.Pad("C", "k", 8),
]


@pytest.mark.parametrize("step", ALL_STEPS, ids=lambda s: type(s).__name__)
def test_step_json_round_trip(step):
    assert S.from_json(json.loads(json.dumps(S.to_json(step)))) == step


def test_unknown_step_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown schedule step 'Tile'"):
        S.from_json({"step": "Tile"})


def test_space_mixed_radix_round_trip():
    space = Space("t", (Knob("a", (1, 2, 3)), Knob("b", ("x", "y")), Knob("c", ((1, 2), (3, 4)))))
    assert space.size == 12
    seen = set()
    for i in range(space.size):
        cfg = space.get(i)
        assert space.index(cfg) == i
        assert Config.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
        seen.add(cfg)
    assert len(seen) == 12
    # first knob most significant
    assert (
        space.get(6)["a"] == 2
        and space.get(6)["b"] == "y"
        and space.get(4)["b"] == "x"
        and space.get(1)["c"] == (3, 4)
    )
    with pytest.raises(IndexError):
        space.get(12)
    with pytest.raises(ValueError, match="knob a"):
        space.index(Config("t", (("a", 9), ("b", "x"), ("c", (1, 2)))))


def test_every_template_default_is_in_its_space():
    target = host_target()
    a, w = te.placeholder((64, 32), name="A"), te.placeholder((48, 32), name="W")
    cdef = te.make_def([a, w], nn.dense(a, w))
    for name in ("dense",):
        tmpl = templates()[name]
        space = tmpl.space(cdef, target)
        space.index(tmpl.default(cdef, target))
    lanes, regs = target.vector_lanes(), target.vector_registers
    cfg = template_for(cdef).default(cdef, target)
    assert cfg["tile_m"] * cfg["tile_n_vectors"] + cfg["tile_n_vectors"] + 1 < regs
    assert cfg["tile_n_vectors"] * lanes <= 48 + lanes


def _matmul(m=16, n=24, k=20):
    a, w = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="W")
    kk = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, kk] * w[j, kk], kk), name="C")
    return te.make_def([a, w], c)


ILLEGAL = [
    ([S.Split("C", "x", 4)], "no loop axis 'x'"),
    ([S.Split("C", "i", 0)], "factor must be >= 1"),
    ([S.Vectorize("C", "k")], "reduction axis cannot be vectorized"),
    ([S.Parallel("C", "k")], "reduction axis cannot be parallel"),
    ([S.Fuse("C", "i", "k")], "directly precede"),
    ([S.Reorder("C", ("i", "k", "j")), S.Fuse("C", "i", "k")], "cannot fuse a spatial and a reduction axis"),
    ([S.Parallel("C", "j")], "outermost loop"),
    ([S.Vectorize("C", "i")], "only the innermost loop"),
    ([S.ComputeInline("C")], "only a non-output injective stage"),
    ([S.Split("C", "i", 2), S.CacheWrite("C")], "must come before any other step"),
    ([S.Pack("Z", 0, 4)], "'Z' is not an input"),
    ([S.Pack("W", 3, 4)], "invalid for shape"),
    ([S.ComputeAt("C", "C", "i")], "output or inlined"),
    ([S.Unroll("C", "i"), S.Vectorize("C", "i")], "already marked unrolled"),
    ([S.Split("C", "i", 4), S.Pad("C", "i_o", 8)], "only an unsplit reduction axis"),
    (
        [S.CacheWrite("C"), S.ComputeAt("C_local", "C", "i"), S.Split("C", "i", 2)],
        "split or fused afterwards",
    ),
]


@pytest.mark.parametrize("steps,message", ILLEGAL, ids=[m for _, m in ILLEGAL])
def test_illegal_steps_raise_schedule_error(steps, message):
    with pytest.raises(ScheduleError, match=message):
        apply(_matmul(), steps)


def test_vector_width_is_bounded():
    with pytest.raises(ScheduleError, match="exceeds 64"):
        apply(_matmul(n=200), [S.CacheWrite("C"), S.Split("C", "j", 128), S.Vectorize("C", "j_i")])


def test_pad_removes_the_reduction_guard_and_keeps_the_answer():
    cdef = _matmul(k=21)
    split = [S.Split("C", "k", 8), S.Reorder("C", ("i", "k_o", "j", "k_i"))]
    guarded, _ = apply(cdef, split)
    assert "if " in func_str(guarded)
    padded, state = apply(cdef, [S.Pad("C", "k", 8), *split])
    assert "if " not in func_str(padded)
    assert state.inputs["A"].shape == (16, 24) and state.inputs["W"].shape == (24, 24)
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((16, 21), np.float32), rng.standard_normal((24, 21), np.float32)
    got = compile_kernel(cdef, [S.Pad("C", "k", 8), *split]).run(a, w)
    np.testing.assert_allclose(got, a @ w.T, rtol=1e-5, atol=1e-5)


def test_pad_refuses_a_max_reduction():
    x = te.placeholder((4, 10), name="X")
    k = te.reduce_axis(10, "k")
    m = te.compute((4,), lambda i: te.max(x[i, k], k), name="M")
    with pytest.raises(ScheduleError, match="only an unsplit reduction axis of a sum"):
        apply(te.make_def([x], m), [S.Pad("M", "k", 8)])


def test_shifted_tail_tiles_are_full_and_keep_the_answer():
    """A ragged split with shift_tail: the last tile starts early (overlapping the one before), so
    no guard is left, and the values computed twice are the same values."""
    cdef = _matmul(16, 20, 11)
    steps = [
        S.CacheWrite("C"),
        S.Split("C", "j", 8, shift_tail=True),
        S.Reorder("C", ("i", "j_o", "j_i")),
        S.ComputeAt("C_local", "C", "j_o"),
        S.Vectorize("C", "j_i"),
    ]
    f, _ = apply(cdef, steps)
    text = func_str(f)
    assert "if " not in text and "min((C.j_o * 8), 12)" in text
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((16, 11), np.float32), rng.standard_normal((20, 11), np.float32)
    for threads in (1, 2):
        got = compile_kernel(cdef, steps, host_target(threads)).run(a, w)
        np.testing.assert_allclose(got, a @ w.T, rtol=1e-5, atol=1e-5)


def test_shifted_tail_is_refused_where_points_accumulate():
    with pytest.raises(ScheduleError, match="reduction axis cannot shift"):
        apply(_matmul(16, 20, 11), [S.Split("C", "k", 4, shift_tail=True)])
    with pytest.raises(ScheduleError, match="reduction written to memory"):
        apply(_matmul(16, 20, 11), [S.Split("C", "j", 8, shift_tail=True)])


def test_pack_relayout_matches_index_rewrite():
    w = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)
    packed = relayout(w, [("pack", 0, 2, 2)])  # [5,7] -> [3,7,2], zero padded
    assert packed.shape == (3, 7, 2)
    for n in range(5):
        for k in range(7):
            assert packed[n // 2, k, n % 2] == w[n, k]
    assert (packed[2, :, 1] == 0).all()


def test_compute_at_region_is_the_tile():
    cdef = _matmul(16, 24, 20)
    f, _ = apply(
        cdef,
        [
            S.CacheWrite("C"),
            S.Split("C", "i", 4),
            S.Split("C", "j", 8),
            S.Reorder("C", ("i_o", "j_o", "i_i", "j_i")),
            S.ComputeAt("C_local", "C", "j_o"),
        ],
    )
    text = func_str(f)
    assert "alloc C_local_l: float32[4, 8] local" in text


def _scaled_matmul(m=16, n=24, k=20):
    """C = (2 A) W^T with the scaling its own stage P, so P can be computed at a loop of C."""
    a, w = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="W")
    p = te.compute((m, k), lambda i, r: a[i, r] * 2.0, name="P", tag="injective")
    kk = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(p[i, kk] * w[j, kk], kk), name="C")
    return te.make_def([a, w], c)


def test_compute_at_reaches_a_reader_computed_inside_the_target():
    """P is read only by C's register tile C_local, itself computed at C's loop j_o: P can still
    be computed at C's outer loop i_o, over every row that iteration's tiles read."""
    cdef = _scaled_matmul()
    steps = [
        S.CacheWrite("C"),
        S.Split("C", "i", 4),
        S.Split("C", "j", 8),
        S.Reorder("C", ("i_o", "j_o", "i_i", "j_i")),
        S.ComputeAt("C_local", "C", "j_o"),
        S.ComputeAt("P", "C", "i_o"),
    ]
    assert "alloc P_l: float32[4, 20] local" in func_str(apply(cdef, steps)[0])
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((16, 20), dtype=np.float32), rng.standard_normal((24, 20), dtype=np.float32)
    np.testing.assert_allclose(compile_kernel(cdef, steps).run(a, w), 2 * a @ w.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(ScheduleError, match="target C does not read it"):  # C_local is not inside C
        apply(cdef, [*steps[:4], S.ComputeAt("P", "C", "i_o")])


def test_local_buffers_over_the_targets_budget_are_a_schedule_error():
    """A region too large for a stack frame is refused when the kernel is emitted, not entered."""
    target = host_target()
    rows = target.local_bytes // (4 * 256) + 1  # one row more than the budget holds
    cdef = _scaled_matmul(m=rows, n=8, k=256)
    steps = [S.Split("C", "i", rows), S.ComputeAt("P", "C", "i_o")]
    with pytest.raises(ScheduleError, match=r"P_l\[\d+, 256\]\) exceed the target's \d+-byte budget"):
        compile_kernel(cdef, steps, target)
    small = [S.Split("C", "i", rows - 1), S.ComputeAt("P", "C", "i_o")]
    assert compile_kernel(cdef, small, target) is not None


def _short_rows_kernels():
    """Kernels over (1, 32, 7, 7): a plain elementwise add, a bias add (broadcast) and an NCHW16c ->
    NCHW layout transform, with their inputs."""
    x, z = te.placeholder((1, 32, 7, 7), name="X"), te.placeholder((1, 32, 7, 7), name="Z")
    b, blocked = te.placeholder((1, 32, 1, 1), name="B"), te.placeholder((1, 2, 7, 7, 16), name="Y")
    add = te.compute(x.shape, lambda n, c, h, w: x[n, c, h, w] + z[n, c, h, w], name="Add", tag="injective")
    bias = te.compute(x.shape, lambda n, c, h, w: x[n, c, h, w] + b[0, c, 0, 0], name="Bias", tag="injective")
    unblock = te.compute(x.shape, lambda n, c, h, w: blocked[n, c // 16, h, w, c % 16], name="T",
                         tag="injective")
    return {"add": te.make_def([x, z], add), "bias": te.make_def([x, b], bias),
            "unblock": te.make_def([blocked], unblock)}


@pytest.mark.parametrize("target_text", ["llvm -mcpu=znver3", "llvm -mcpu=znver5"])  # 8 and 16 lanes > 7
def test_injective_default_fuses_all_axes_only_for_a_flat_map(target_text):
    """Fusing every axis into one vectorized loop fills whole vectors when rows are short, but a
    broadcast or a transform then recovers each lane's coordinates by division: only a kernel that
    reads every tensor at its own index may fuse. Both forms compute the same answer."""
    target = resolve_target(target_text)
    tmpl = templates()["injective"]
    kernels = _short_rows_kernels()
    assert {name: tmpl.default(cdef, target)["fuse_all"] for name, cdef in kernels.items()} == \
        {"add": 1, "bias": 0, "unblock": 0}
    rng = np.random.default_rng(0)
    host = host_target()
    for cdef in kernels.values():
        data = [rng.standard_normal(t.shape).astype(np.float32) for t in cdef.inputs]
        default = tmpl.default(cdef, host)
        forms = [Config(default.template, tuple((k, f if k == "fuse_all" else v) for k, v in default.values))
                 for f in (0, 1)]
        outs = [compile_kernel(cdef, form, host).run(*data) for form in forms]
        np.testing.assert_array_equal(outs[0], outs[1])


def _smoothed_rows(h: int = 11, w: int = 6, taps: int = 3):
    """B[i, j] = sum of `taps` rows of pad(P) around row i, P = 2 A, padded by taps // 2 rows: a
    producer read through a pad at clamped row indices (as a depthwise convolution reads an
    expansion computed in its kernel)."""
    a = te.placeholder((h, w), name="A")
    p = te.compute((h, w), lambda i, j: a[i, j] * 2.0, name="P", tag="injective")
    padded = nn.pad(p, (taps // 2, 0), (taps // 2, 0))
    r = te.reduce_axis(taps, "r")
    b = te.compute((h, w), lambda i, j: te.sum(padded[i + r, j], r), name="B")
    return te.make_def([a], b), padded.name


@pytest.mark.parametrize("rows", [1, 3, 4, 11])
def test_compute_at_through_a_pad_computes_a_clamped_region_inside_the_tensor(rows):
    """P computed at B's row tiles: the region of a tile is its rows plus the pad's halo, shifted
    back inside P where it would leave it (the first and last tiles), so no row of P outside the
    tensor is computed or tested for, and every value the clamped reads take is in it."""
    cdef, pad_name = _smoothed_rows()
    steps = [S.ComputeInline(pad_name), S.Split("B", "i", rows), S.ComputeAt("P", "B", "i_o")]
    text = func_str(apply(cdef, steps)[0])
    assert f"alloc P_l: float32[{min(rows + 2, 11)}, 6] local" in text
    p_nest = text[text.index("alloc P_l"):text.index("P_l[", text.index("alloc P_l") + 10)]
    assert "if " not in p_nest  # the region never leaves P: no guard (B's ragged tile keeps its own)
    a = np.random.default_rng(0).standard_normal((11, 6), dtype=np.float32)
    padded = np.pad(2 * a, ((1, 1), (0, 0)))
    want = padded[:-2] + padded[1:-1] + padded[2:]
    np.testing.assert_allclose(compile_kernel(cdef, steps).run(a), want, rtol=1e-5, atol=1e-5)
