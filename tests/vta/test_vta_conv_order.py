"""The conv lowering's loop order, reuse of resident data and rounding knobs: every value bit-exact
against the integer reference, reuse really drops LOADs and keeps the token protocol paired, and
configs logged before the knobs existed still read as the program they were measured as."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autorelay.vta import VTAConfig
from autorelay.vta.conv import (
    ORDERS,
    ROUNDINGS,
    ConvKnobs,
    ConvShape,
    conv_program,
    conv_reference,
    conv_space,
    load_counts,
    run_conv,
)
from autorelay.vta.conv_schedule import cycles_lower_bound
from autorelay.vta.isa import AluInsn, AluOp, GemmInsn, Mem, MemInsn, Opcode
from autorelay.vta.sim import simulate
from autorelay.vta.tasks import conv_knobs_from, conv_workload_key, default_conv_knobs

pytestmark = pytest.mark.vta
SHAPE = ConvShape(40, 10, 10, 48, 3, 3, 1, 1)  # 3 input and 3 output blocks, 40 not a multiple of 16
OLD_KNOBS = {"tile_h": 2, "tile_w": 4, "tile_oc": 1, "tile_ic": 3, "vthreads": 2}  # a log row before #17


def _data(s: ConvShape, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.integers(-128, 128, (1, s.c, s.h, s.w), dtype=np.int8)
    w = rng.integers(-128, 128, (s.o, s.c, s.kh, s.kw), dtype=np.int8)
    return x, w, rng.integers(-3000, 3000, s.o).astype(np.int32)


def _loads(insns: list, mem: Mem) -> int:
    return sum(isinstance(i, MemInsn) and i.opcode == Opcode.LOAD and i.mem == mem for i in insns)


def _paired(insns: list) -> bool:
    """Every token on the load<->compute queues is popped by exactly one instruction."""
    l2c = c2l = 0
    for i in insns:
        if isinstance(i, MemInsn) and i.mem in (Mem.INP, Mem.WGT):
            l2c, c2l = l2c + i.deps.push_next, c2l - i.deps.pop_next
        elif isinstance(i, GemmInsn):
            l2c, c2l = l2c - i.deps.pop_prev, c2l + i.deps.push_prev
    return l2c == c2l == 0


def test_every_order_and_rounding_is_bit_exact_on_random_shapes():
    """Strides 1 and 2, padding, channels not multiples of 16, whole-reduction chunks (where reuse
    applies) and split ones, one and two virtual threads, for each (order, rounding)."""
    rng, config = np.random.default_rng(11), VTAConfig()
    seen: set[tuple] = set()
    for case in range(40):
        c, o = (int(v) for v in rng.integers(1, 50, 2))
        h, w = (int(v) for v in rng.integers(3, 12, 2))
        k, s = int(rng.choice([1, 3])), int(rng.choice([1, 2]))
        shape = ConvShape(c, h, w, o, k, k, s, int(rng.integers(0, k // 2 + 1)))
        x, wt, b = _data(shape, rng)
        shift, lo = int(rng.choice([0, 1, 9])), 0 if case % 2 else -128
        want = conv_reference(x, wt, b, s, shape.pad, shift, lo, 127)
        space = conv_space(shape, config)
        for order in ORDERS:
            for rounding in ROUNDINGS:
                for v in (1, 2):
                    pick = [kn for kn in space
                            if (kn.order, kn.rounding, kn.vthreads) == (order, rounding, v)]
                    if not pick:
                        continue
                    kn = pick[int(rng.integers(len(pick)))]
                    got, _ = run_conv(x, wt, b, s, shape.pad, shift, lo, 127, kn, config)
                    np.testing.assert_array_equal(got, want, err_msg=f"{shape} {kn} shift {shift}")
                    whole = kn.tile_ic >= math.ceil(c / config.block_in)
                    seen.add((order, rounding, v, whole))
    every = {(o, r, v) for o in ORDERS for r in ROUNDINGS for v in (1, 2)}
    assert {(o, r, v) for o, r, v, _ in seen} == every
    assert {w for *_, w in seen} == {True, False}


@pytest.mark.parametrize("v", [1, 2])
def test_reuse_drops_the_loads_a_slot_still_holds(v):
    """Whole-reduction chunks (tile_ic = 3 input blocks), 3 output-block tiles x 10 spatial tiles:
    oc_outer loads each tile's weights once per slot, spatial_outer each window once per slot."""
    rng = np.random.default_rng(2)
    x, w, b = _data(SHAPE, rng)
    want = conv_reference(x, w, b, 1, 1, 9, -128, 127)
    counts = {}
    for order in ORDERS:
        kn = ConvKnobs(2, 5, 1, 3, v, order)
        prog, _ = conv_program(x, w, b, 1, 1, 9, -128, 127, kn)
        counts[order] = tuple(_loads(prog.insns, mem) for mem in (Mem.INP, Mem.WGT, Mem.ACC))
        assert _paired(prog.insns), order
        inp_chunks, wgt_chunks = load_counts(SHAPE, kn, VTAConfig())
        assert counts[order][:2] == (3 * inp_chunks, wgt_chunks)  # 3 input-block LOADs per window
        got, res = run_conv(x, w, b, 1, 1, 9, -128, 127, kn)
        np.testing.assert_array_equal(got, want)
        assert simulate(prog.insns, prog.dram, functional=False).cycles == res.cycles  # one timeline
    # 30 tiles of one chunk each; without reuse every chunk loads 3 input blocks and its weights
    assert counts["oc_outer"][:2] == (90, 3 * v)  # the weights once per output-block tile and slot
    assert counts["spatial_outer"][:2] == (3 * 10 * v, 30)  # each window once per slot
    assert counts["oc_outer"][2] == 3 * v  # and the bias block once per tile group and slot


def test_reuse_with_split_reductions_and_two_threads():
    """Two chunks per tile with two threads: chunk i0 always lands in the same slot, so a tile
    reuses the previous tile's weights of the same chunk; pops and pushes still pair up."""
    rng = np.random.default_rng(3)
    x, w, b = _data(SHAPE, rng)
    kn = ConvKnobs(5, 10, 1, 2, 2)  # input blocks in chunks of 2 and 1: two chunks per tile
    prog, _ = conv_program(x, w, b, 1, 1, 9, -128, 127, kn)
    assert _loads(prog.insns, Mem.WGT) == 6 and _paired(prog.insns)  # 3 output blocks x 2 chunks
    got, _ = run_conv(x, w, b, 1, 1, 9, -128, 127, kn)
    np.testing.assert_array_equal(got, conv_reference(x, w, b, 1, 1, 9, -128, 127))


def test_rounding_in_the_bias_saves_alu_passes_and_falls_back_when_it_cannot_fit():
    rng = np.random.default_rng(4)
    x, w, b = _data(SHAPE, rng)
    alu = {}
    for rounding in ROUNDINGS:
        prog, _ = conv_program(x, w, b, 1, 1, 9, -128, 127, ConvKnobs(10, 10, 3, 3, 1, rounding=rounding))
        alu[rounding] = sum(isinstance(i, AluInsn) for i in prog.insns)
        alu[rounding, "cycles"] = simulate(prog.insns, prog.dram).cycles
    assert alu["alu"] - alu["bias"] == 2 * 3  # ADD 1 and SHR 1 gone, per output block
    assert alu["bias", "cycles"] < alu["alu", "cycles"]
    # a bias so large that adding 2**(shift-1) would wrap: the ALU rounds instead, still exact
    big = np.full(SHAPE.o, np.iinfo(np.int32).max - 10, np.int32)
    zx = np.zeros_like(x)
    prog, _ = conv_program(zx, w, big, 1, 1, 9, -128, 127, ConvKnobs(10, 10, 3, 3, 1, rounding="bias"))
    assert any(isinstance(i, AluInsn) and i.op == AluOp.ADD and i.use_imm for i in prog.insns)
    got, _ = run_conv(zx, w, big, 1, 1, 9, -128, 127, ConvKnobs(10, 10, 3, 3, 1, rounding="bias"))
    np.testing.assert_array_equal(got, conv_reference(zx, w, big, 1, 1, 9, -128, 127))


def test_old_configs_read_as_today_and_the_default_and_key_do_not_move():
    hw = VTAConfig()
    old = {"template": "vta_conv2d", "knobs": OLD_KNOBS}
    assert conv_knobs_from(old, SHAPE, hw) == ConvKnobs(2, 4, 1, 3, 2, "oc_outer", "alu")
    new = {"template": "vta_conv2d", "knobs": {**old["knobs"], "order": "spatial_outer", "rounding": "bias"}}
    assert conv_knobs_from(new, SHAPE, hw) == ConvKnobs(2, 4, 1, 3, 2, "spatial_outer", "bias")
    assert conv_knobs_from({**new, "knobs": {**new["knobs"], "order": "diagonal"}}, SHAPE, hw) is None
    # the key and the default (today's rule, today's order and rounding) as before the knobs
    assert conv_workload_key(SHAPE) == "vta_conv2d/15fbe442a986601ba748a71f"
    assert default_conv_knobs(SHAPE, hw) == ConvKnobs(10, 10, 3, 3, 1)
    assert default_conv_knobs(ConvShape(512, 7, 7, 512, 3, 3, 1, 1), hw) == ConvKnobs(7, 7, 4, 16, 1)


def test_an_old_logged_config_resumes_in_the_tuners_space():
    from search.vta_tuning import vta_conv_task

    task = vta_conv_task(SHAPE)
    old = {"template": "vta_conv2d", "knobs": OLD_KNOBS}
    cfg = task.config_from_json(old)
    assert task.index(cfg) >= 0 and task.knobs(cfg) == ConvKnobs(2, 4, 1, 3, 2)
    assert task.knobs(task.default) == default_conv_knobs(SHAPE, VTAConfig())


def test_the_cycle_lower_bound_holds():
    rng, hw = np.random.default_rng(5), VTAConfig()
    x, w, b = _data(SHAPE, rng)
    space = conv_space(SHAPE, hw)
    for i in rng.choice(len(space), 24, replace=False):
        kn = space[int(i)]
        prog, _ = conv_program(x, w, b, 1, 1, 9, -128, 127, kn, hw)
        assert cycles_lower_bound(SHAPE, kn, hw) <= simulate(prog.insns, prog.dram, hw).cycles
