"""The instruction set: every kind encodes to 128 real bits and decodes back; bad fields are errors."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autorelay.vta import VTAConfig, VTAConfigError, decode_program, encode_program
from autorelay.vta.isa import (
    AluInsn,
    AluOp,
    Deps,
    FinishInsn,
    GemmInsn,
    ISAError,
    Mem,
    MemInsn,
    Opcode,
    Uop,
    decode,
    decode_uop,
    encode,
    encode_uop,
    uop_fields,
)

pytestmark = pytest.mark.vta


def _random_insns(rng: random.Random, n: int) -> list:
    out = []
    for _ in range(n):
        deps = Deps(*(rng.random() < 0.5 for _ in range(4)))
        kind = rng.randrange(4)
        if kind == 0:
            out.append(MemInsn(rng.choice([Opcode.LOAD, Opcode.STORE]), rng.choice(list(Mem)),
                               rng.randrange(1 << 16), rng.randrange(1 << 32), rng.randrange(1 << 16),
                               rng.randrange(1 << 16), rng.randrange(1 << 16),
                               *(rng.randrange(16) for _ in range(4)), deps=deps))
        elif kind == 1:
            out.append(GemmInsn(rng.random() < 0.5, rng.randrange(1 << 13), rng.randrange(1 << 14),
                                rng.randrange(1 << 14), rng.randrange(1 << 14),
                                *(rng.randrange(1 << 11) for _ in range(4)),
                                rng.randrange(1 << 10), rng.randrange(1 << 10), deps=deps))
        elif kind == 2:
            out.append(AluInsn(rng.choice(list(AluOp)), rng.randrange(1 << 13), rng.randrange(1 << 14),
                               rng.randrange(1 << 14), rng.randrange(1 << 14),
                               *(rng.randrange(1 << 11) for _ in range(4)),
                               use_imm=rng.random() < 0.5, imm=rng.randrange(-(1 << 15), 1 << 15),
                               reset=rng.random() < 0.5, deps=deps))
        else:
            out.append(FinishInsn(deps))
    return out


def test_every_kind_round_trips_through_bits_and_bytes():
    insns = _random_insns(random.Random(0), 400)
    assert {type(i) for i in insns} == {MemInsn, GemmInsn, AluInsn, FinishInsn}
    for insn in insns:
        word = encode(insn)
        assert 0 <= word < 1 << 128
        assert decode(word) == insn
    data = encode_program(insns)
    assert len(data) == 16 * len(insns) and decode_program(data) == insns


def test_fields_sit_where_the_layout_says():
    w = encode(MemInsn(Opcode.STORE, Mem.OUT, sram_base=3, dram_base=5, y_size=1, x_size=1, x_stride=1,
                       deps=Deps(pop_prev=True)))
    assert w & 0b111 == Opcode.STORE and (w >> 3) & 1 == 1  # opcode, then pop_prev
    assert (w >> 7) & 0b111 == Mem.OUT and (w >> 10) & 0xFFFF == 3 and (w >> 26) & 0xFFFFFFFF == 5
    alu = decode(encode(AluInsn(AluOp.SHR, 0, 1, 1, 1, use_imm=True, imm=-3)))
    assert alu.imm == -3 and alu.op == AluOp.SHR


def test_micro_ops_round_trip_one_by_one_and_in_bulk():
    uops = [Uop(2047, 2047, 1023), Uop(0, 0, 0), Uop(5, 700, 9)]
    assert [decode_uop(encode_uop(u)) for u in uops] == uops
    words = np.array([encode_uop(u) for u in uops], np.uint32)
    assert uop_fields(words).tolist() == [[u.dst, u.src, u.wgt] for u in uops]


@pytest.mark.parametrize("insn, match", [
    (MemInsn(Opcode.LOAD, Mem.INP, 1 << 16, 0, 1, 1, 1), "sram_base=65536 does not fit in 16 bits"),
    (GemmInsn(False, 0, 1, 1 << 14, 1), "iter_out=16384 does not fit"),
    (AluInsn(AluOp.ADD, 0, 1, 1, 1, use_imm=True, imm=1 << 15), "immediate 32768"),
    (MemInsn(Opcode.LOAD, Mem.INP, 0, 0, 1, 1, 1, y_pad0=16), "y_pad0=16 does not fit in 4 bits"),
])
def test_fields_that_do_not_fit_are_errors(insn, match):
    with pytest.raises(ISAError, match=match):
        encode(insn)


def test_bytes_that_are_no_instruction_are_errors():
    with pytest.raises(ISAError, match="whole 16-byte instructions"):
        decode_program(b"\0" * 17)
    with pytest.raises(ISAError, match="unknown opcode 7"):
        decode(7)


def test_config_json_and_derived_depths():
    c = VTAConfig()
    assert (c.depth("inp"), c.depth("wgt"), c.depth("acc"), c.depth("uop")) == (
        32 * 1024 // 16, 256 * 1024 // 256, 128 * 1024 // 64, 32 * 1024 // 4)
    assert c.macs_per_cycle == 256
    big = VTAConfig(clock_mhz=333.0, dram_bytes_per_cycle=16)
    assert VTAConfig.from_json(big.to_json()) == big
    with pytest.raises(VTAConfigError, match="unknown field"):
        VTAConfig.from_json('{"block_size": 8}')
    with pytest.raises(VTAConfigError, match="clock_mhz must be a positive"):
        VTAConfig(clock_mhz=0)
