"""The accelerator's instruction set: 128-bit instructions and 32-bit micro-ops, as real bit fields.

Every instruction starts with a 3-bit opcode (LOAD 0, STORE 1, GEMM 2, FINISH 3, ALU 4) and four
dependency bits (pop_prev, pop_next, push_prev, push_next: see `autorelay.vta.sim`). Then:

* LOAD / STORE — memory type (3 bits: uop, wgt, inp, acc, out), SRAM base (16), DRAM base (32, in
  tiles of the memory type), y_size (16), x_size (16), x_stride (16, tiles), and 4-bit zero pads
  y_pad0, y_pad1, x_pad0, x_pad1 (LOAD of inputs only);
* GEMM / ALU — reset (1), uop_begin (13), uop_end (14), a two-level loop iter_out (14) x iter_in
  (14) with index factors for the destination (11 + 11), source (11 + 11) and, for GEMM, weights
  (10 + 10); ALU adds its sub-op (3: MIN, MAX, ADD, SHR, MUL), use_imm (1) and a signed 16-bit
  immediate.

A micro-op is (dst accumulator index 11 bits, src input/accumulator index 11, wgt index 10).
`encode_program` / `decode_program` turn a stream into the bytes a tool could dump and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from autorelay.errors import AutoRelayError


class ISAError(AutoRelayError, ValueError):
    """An instruction whose field does not fit its bits, or bytes that decode to none."""


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class Mem(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


@dataclass(frozen=True)
class Deps:
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False


@dataclass(frozen=True)
class MemInsn:
    opcode: Opcode  # LOAD or STORE
    mem: Mem
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad0: int = 0
    y_pad1: int = 0
    x_pad0: int = 0
    x_pad1: int = 0
    deps: Deps = Deps()


@dataclass(frozen=True)
class GemmInsn:
    reset: bool
    uop_begin: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_out: int = 0
    dst_in: int = 0
    src_out: int = 0
    src_in: int = 0
    wgt_out: int = 0
    wgt_in: int = 0
    deps: Deps = Deps()

    opcode = Opcode.GEMM


@dataclass(frozen=True)
class AluInsn:
    op: AluOp
    uop_begin: int
    uop_end: int
    iter_out: int
    iter_in: int
    dst_out: int = 0
    dst_in: int = 0
    src_out: int = 0
    src_in: int = 0
    use_imm: bool = False
    imm: int = 0
    reset: bool = False
    deps: Deps = Deps()

    opcode = Opcode.ALU


@dataclass(frozen=True)
class FinishInsn:
    deps: Deps = Deps()

    opcode = Opcode.FINISH


Insn = MemInsn | GemmInsn | AluInsn | FinishInsn


@dataclass(frozen=True)
class Uop:
    dst: int
    src: int
    wgt: int = 0


# (field, bits) after the 7 common bits, per instruction kind
_MEM = [("mem", 3), ("sram_base", 16), ("dram_base", 32), ("y_size", 16), ("x_size", 16),
        ("x_stride", 16), ("y_pad0", 4), ("y_pad1", 4), ("x_pad0", 4), ("x_pad1", 4)]
_LOOP = [("reset", 1), ("uop_begin", 13), ("uop_end", 14), ("iter_out", 14), ("iter_in", 14),
         ("dst_out", 11), ("dst_in", 11), ("src_out", 11), ("src_in", 11)]
_GEMM = [*_LOOP, ("wgt_out", 10), ("wgt_in", 10)]
_ALU = [*_LOOP, ("op", 3), ("use_imm", 1), ("imm", 16)]
_UOP = [("dst", 11), ("src", 11), ("wgt", 10)]
_DEPS = ["pop_prev", "pop_next", "push_prev", "push_next"]


def _pack(values: list[tuple[str, int, int]]) -> int:
    word, pos = 0, 0
    for name, value, bits in values:
        if not 0 <= value < (1 << bits):
            raise ISAError(f"field {name}={value} does not fit in {bits} bits")
        word |= value << pos
        pos += bits
    assert pos <= 128
    return word


def _unpack(word: int, layout: list[tuple[str, int]], pos: int) -> dict[str, int]:
    out = {}
    for name, bits in layout:
        out[name] = (word >> pos) & ((1 << bits) - 1)
        pos += bits
    return out


def encode(insn: Insn) -> int:
    """The instruction as a 128-bit integer."""
    head = [("opcode", int(insn.opcode), 3)] + [(d, int(getattr(insn.deps, d)), 1) for d in _DEPS]
    if isinstance(insn, MemInsn):
        layout = _MEM
    elif isinstance(insn, GemmInsn):
        layout = _GEMM
    elif isinstance(insn, AluInsn):
        layout = _ALU
    else:
        return _pack(head)
    body = []
    for name, bits in layout:
        v = int(getattr(insn, name))
        if name == "imm":
            if not -(1 << 15) <= v < (1 << 15):
                raise ISAError(f"ALU immediate {v} does not fit in 16 signed bits")
            v &= 0xFFFF
        body.append((name, v, bits))
    return _pack(head + body)


def decode(word: int) -> Insn:
    head = _unpack(word, [("opcode", 3)] + [(d, 1) for d in _DEPS], 0)
    deps = Deps(*(bool(head[d]) for d in _DEPS))
    try:
        op = Opcode(head["opcode"])
    except ValueError:
        raise ISAError(f"unknown opcode {head['opcode']}") from None
    if op in (Opcode.LOAD, Opcode.STORE):
        f = _unpack(word, _MEM, 7)
        try:
            mem = Mem(f.pop("mem"))
        except ValueError:
            raise ISAError("unknown memory type") from None
        return MemInsn(op, mem, deps=deps, **f)
    if op == Opcode.GEMM:
        f = _unpack(word, _GEMM, 7)
        return GemmInsn(bool(f.pop("reset")), deps=deps, **f)
    if op == Opcode.ALU:
        f = _unpack(word, _ALU, 7)
        imm = f.pop("imm")
        try:
            alu = AluOp(f.pop("op"))
        except ValueError:
            raise ISAError("unknown ALU sub-op") from None
        return AluInsn(alu, imm=imm - (1 << 16) if imm >= (1 << 15) else imm,
                       use_imm=bool(f.pop("use_imm")), reset=bool(f.pop("reset")), deps=deps, **f)
    return FinishInsn(deps)


def encode_uop(u: Uop) -> int:
    return _pack([(name, getattr(u, name), bits) for name, bits in _UOP])


def decode_uop(word: int) -> Uop:
    return Uop(**_unpack(word, _UOP, 0))


def uop_fields(words: np.ndarray) -> np.ndarray:
    """Many micro-op words at once, as an (n, 3) array of (dst, src, wgt) indices."""
    w = np.asarray(words, np.int64).reshape(-1)
    cols, pos = [], 0
    for _, bits in _UOP:
        cols.append((w >> pos) & ((1 << bits) - 1))
        pos += bits
    return np.stack(cols, axis=1)


def uop_words(uops: list[Uop]) -> np.ndarray:
    """Micro-ops as the 32-bit words a LOAD of type uop reads from DRAM."""
    return np.array([encode_uop(u) for u in uops], np.uint32)


def encode_program(insns: list[Insn]) -> bytes:
    return b"".join(encode(i).to_bytes(16, "little") for i in insns)


def decode_program(data: bytes) -> list[Insn]:
    if len(data) % 16:
        raise ISAError(f"an instruction stream is whole 16-byte instructions; got {len(data)} bytes")
    return [decode(int.from_bytes(data[i:i + 16], "little")) for i in range(0, len(data), 16)]


__all__ = ["AluInsn", "AluOp", "Deps", "FinishInsn", "GemmInsn", "ISAError", "Insn", "Mem", "MemInsn",
           "Opcode", "Uop", "decode", "decode_program", "decode_uop", "encode", "encode_program",
           "encode_uop", "uop_fields", "uop_words"]
