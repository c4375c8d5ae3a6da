"""The simulator: int8 dense layers bit-exact against the integer reference, each failure kind
produced on purpose and reported, and the cycle model's latency hiding by virtual threads."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.vta import DeadlockError, DramRangeError, SramOverflowError, VTAConfig, VTAError, simulate
from autorelay.vta.isa import Deps, FinishInsn, GemmInsn, Mem, MemInsn, Opcode
from autorelay.vta.programs import DenseKnobs, dense_reference, dense_space, run_dense

pytestmark = pytest.mark.vta


def _case(rng: np.random.Generator, m: int, n: int, k: int):
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    b = rng.integers(-20000, 20000, n).astype(np.int32)
    return x, w, b


def test_random_dense_shapes_and_knobs_are_bit_exact():
    """50 shapes (channels not multiples of 16), knobs drawn from each shape's space, saturation at
    both ends (shift chosen so some outputs clip), with and without relu."""
    rng = np.random.default_rng(0)
    config = VTAConfig()
    clipped = 0
    for trial in range(50):
        m, n, k = int(rng.integers(1, 9)), int(rng.integers(1, 70)), int(rng.integers(1, 90))
        x, w, b = _case(rng, m, n, k)
        space = dense_space(m, n, k, config)
        knobs = space[int(rng.integers(len(space)))]
        shift, lo = int(rng.integers(4, 12)), (0 if trial % 3 == 0 else -128)
        want = dense_reference(x, w, b, shift, lo, 127)
        got, _ = run_dense(x, w, b, shift, lo, 127, knobs, config)
        np.testing.assert_array_equal(got, want, err_msg=f"{m}x{n}x{k} {knobs}")
        clipped += int(np.sum((want == 127) | (want == -128)))
    assert clipped > 0  # saturation was exercised


def test_virtual_threads_hide_load_latency():
    rng = np.random.default_rng(1)
    x, w, _ = _case(rng, 16, 256, 512)
    one, r1 = run_dense(x, w, None, 9, 0, 127, DenseKnobs(16, 4, 8, 1))
    two, r2 = run_dense(x, w, None, 9, 0, 127, DenseKnobs(16, 4, 8, 2))
    np.testing.assert_array_equal(one, two)
    assert r2.cycles < r1.cycles and r2.utilization > r1.utilization
    assert r1.gemm_cycles == r2.gemm_cycles  # the same work, overlapped differently
    assert r1.busy["load"] > 0 and r1.busy["store"] > 0 and r1.seconds == r1.cycles / 100e6


def _dram() -> np.ndarray:
    return np.zeros(4096, np.uint8)


def test_a_token_never_pushed_is_a_deadlock_naming_the_stuck_instruction():
    prog = [MemInsn(Opcode.LOAD, Mem.INP, 0, 0, 1, 1, 1, deps=Deps(pop_next=True)), FinishInsn()]
    stuck = r"load waits at instruction 0 \(MemInsn\) on empty queue\(s\) c2l"
    with pytest.raises(DeadlockError, match=stuck):
        simulate(prog, _dram())


def test_sram_overflow_is_reported():
    depth = VTAConfig().depth("inp")
    with pytest.raises(SramOverflowError, match=f"reaches inp buffer entry {depth}"):
        simulate([MemInsn(Opcode.LOAD, Mem.INP, depth - 1, 0, 1, 2, 2)], _dram())
    with pytest.raises(SramOverflowError, match="micro-ops"):
        simulate([GemmInsn(False, 0, VTAConfig().depth("uop") + 1, 1, 1)], _dram())


def test_dram_out_of_range_is_reported():
    with pytest.raises(DramRangeError, match="reaches DRAM tile 256, past the 256 tiles"):
        simulate([MemInsn(Opcode.LOAD, Mem.INP, 0, 255, 1, 2, 2)], _dram())
    with pytest.raises(DramRangeError):
        simulate([MemInsn(Opcode.STORE, Mem.OUT, 0, 300, 1, 1, 1)], _dram())


def test_a_token_for_a_module_that_has_no_neighbour_is_an_error():
    with pytest.raises(VTAError, match="the load module has no prev module"):
        simulate([MemInsn(Opcode.LOAD, Mem.INP, 0, 0, 1, 1, 1, deps=Deps(pop_prev=True))], _dram())


def test_random_conv2d_shapes_strides_pads_and_knobs_are_bit_exact():
    """Channels not multiples of 16, strides 1 and 2, padding, 1x1/3x3/5x5 kernels, knobs drawn from
    each shape's space (partial tiles at the edges, several input blocks per chunk, two threads)."""
    from autorelay.vta.conv import ConvShape, conv_reference, conv_space, run_conv

    rng = np.random.default_rng(3)
    config, done, vthreads = VTAConfig(), 0, set()
    while done < 50:
        c, o = (int(v) for v in rng.integers(1, 40, 2))
        h, w = (int(v) for v in rng.integers(3, 12, 2))
        k, s = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2]))
        p = int(rng.integers(0, k // 2 + 1))
        shape = ConvShape(c, h, w, o, k, k, s, p)
        if shape.oh < 1 or shape.ow < 1:
            continue
        x = rng.integers(-128, 128, (1, c, h, w), dtype=np.int8)
        wt = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
        b = rng.integers(-3000, 3000, o).astype(np.int32)
        space = conv_space(shape, config)
        knobs = space[int(rng.integers(len(space)))]
        got, _ = run_conv(x, wt, b, s, p, 9, 0 if done % 2 else -128, 127, knobs, config)
        np.testing.assert_array_equal(got, conv_reference(x, wt, b, s, p, 9, 0 if done % 2 else -128, 127),
                                      err_msg=f"{shape} {knobs}")
        vthreads.add(knobs.vthreads)
        done += 1
    assert vthreads == {1, 2}


def test_conv_programs_encode_to_real_instructions():
    """Every instruction a conv lowering emits fits its bit fields (pads within 4 bits and so on)."""
    from autorelay.vta import decode_program, encode_program
    from autorelay.vta.conv import ConvKnobs, conv_program

    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 20, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (24, 20, 3, 3), dtype=np.int8)
    prog, _ = conv_program(x, w, None, 2, 1, 8, -128, 127, ConvKnobs(2, 3, 1, 1, 2))
    assert decode_program(encode_program(prog.insns)) == prog.insns


def test_the_cycle_model_alone_times_like_the_functional_run():
    """`functional=False` gives the same cycles, busy times and utilisation, and moves no data."""
    from autorelay.vta.programs import dense_program

    rng = np.random.default_rng(5)
    for knobs in (DenseKnobs(1, 2, 1, 1), DenseKnobs(2, 1, 2, 2)):
        x, w, b = _case(rng, 3, 40, 70)
        prog = dense_program(x, w, b, 6, -128, 127, knobs)
        image = prog.dram.copy()
        timed = simulate(prog.insns, image, functional=False)
        assert np.array_equal(image, prog.dram)  # nothing stored
        full = simulate(prog.insns, prog.dram.copy())
        assert (timed.cycles, timed.busy, timed.gemm_cycles) == (full.cycles, full.busy, full.gemm_cycles)
