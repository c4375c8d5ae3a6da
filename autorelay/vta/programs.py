"""Instruction streams for int8 layers on the accelerator, with virtual threads.

`dense_program` lowers y = clip(round((x @ w.T + bias) / 2**shift), lo, hi) — an int8 dense layer
with its requantize epilogue (halves rounded up, the CPU's `qnn.requantize` rule for a power-of-two
scale ratio; see `rounding_shift`) (x int8 [M, K], w int8 [N, K], bias int32 [N]) — to a program and a DRAM
image. The work is cut into output tiles of `tile_m` rows x `tile_n` column blocks, each
accumulated over chunks of `tile_k` reduction blocks; every chunk loads its input and weight tiles,
runs one GEMM, and each output tile is initialised with its bias (a LOAD into the accumulator),
shifted and clipped on the ALU and stored.

Virtual threads: with `vthreads` = v the input/weight buffers and the accumulator are split into v
slots used round-robin, so the load of chunk c+1 goes into another slot than the GEMM of chunk c
reads and the two overlap. The tokens say exactly that: the loads of chunk c wait (pop) for the GEMM
of chunk c - v, which last read their slot, and an output tile's initialisation waits for the STORE
of tile t - v. The queues are FIFOs, so each pop meets the push it was meant for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autorelay.vta.config import VTAConfig
from autorelay.vta.isa import (
    AluInsn,
    AluOp,
    Deps,
    FinishInsn,
    GemmInsn,
    Insn,
    Mem,
    MemInsn,
    Opcode,
    Uop,
    uop_words,
)
from autorelay.vta.sim import SimResult, VTAError, simulate


@dataclass(frozen=True)
class DenseKnobs:
    tile_m: int = 1
    tile_n: int = 1
    tile_k: int = 1
    vthreads: int = 1


@dataclass
class Program:
    insns: list[Insn]
    dram: np.ndarray  # uint8 image: inputs placed, outputs to be stored
    out_offset: int  # byte offset of the int8 [M, Nt * block_out] output
    shape: tuple[int, int]  # (M, N) of the result


def region(offset: int, nbytes: int, align: int = 256) -> tuple[int, int]:
    start = -(-offset // align) * align
    return start, start + nbytes


def dense_space(m: int, n: int, k: int, config: VTAConfig) -> list[DenseKnobs]:
    """Every knob setting whose slots fit the on-chip buffers (the tuner's space)."""
    nt, kt = math.ceil(n / config.block_out), math.ceil(k / config.block_in)
    out = []
    for v in (1, 2, 4):
        for tm in tile_sizes(m):
            for tn in tile_sizes(nt):
                for tk in tile_sizes(kt):
                    if _fits(tm, tn, tk, v, config):
                        out.append(DenseKnobs(tm, tn, tk, v))
    return out


def _fits(tm: int, tn: int, tk: int, v: int, c: VTAConfig) -> bool:
    """Whether v slots of each buffer's share of a tile fit on chip."""
    return tm * tk * v <= c.depth("inp") and tn * tk * v <= c.depth("wgt") and tm * tn * v <= c.depth("acc")


def tile_sizes(n: int) -> list[int]:
    """Tile sizes worth trying for an extent n: powers of two below it and n itself."""
    sizes = {n}
    p = 1
    while p < n:
        sizes.add(p)
        p *= 2
    return sorted(sizes)


def dense_program(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, shift: int, lo: int, hi: int,
                  knobs: DenseKnobs, config: VTAConfig | None = None) -> Program:
    c = config or VTAConfig()
    if c.batch != 1:
        raise VTAError("dense_program lowers for BATCH 1 (one row per input tile)")
    (m, k), (n, k2) = x.shape, w.shape
    if k != k2 or x.dtype != np.int8 or w.dtype != np.int8:
        raise VTAError(f"dense: x {x.dtype}{list(x.shape)} and w {w.dtype}{list(w.shape)} must be int8 "
                       f"[M, K] and [N, K]")
    bi, bo = c.block_in, c.block_out
    nt, kt = math.ceil(n / bo), math.ceil(k / bi)
    tm, tn, tk, v = min(knobs.tile_m, m), min(knobs.tile_n, nt), min(knobs.tile_k, kt), knobs.vthreads
    if not _fits(tm, tn, tk, v, c):
        raise VTAError(f"dense: knobs {knobs} overflow the on-chip buffers")
    xp = np.zeros((m, kt * bi), np.int8)
    xp[:, :k] = x
    wp = np.zeros((nt * bo, kt * bi), np.int8)
    wp[:n, :k] = w
    bp = np.zeros(nt * bo, np.int32)
    if bias is not None:
        bp[:n] = bias
    # DRAM: inputs (m x kt tiles), weights (nt x kt tiles), bias (nt acc tiles), output, micro-ops
    inp0, end = region(0, xp.nbytes)
    wgt0, end = region(end, wp.nbytes)
    acc0, end = region(end, bp.nbytes)
    out0, end = region(end, m * nt * bo)
    chunks = {tk} | ({kt % tk} if kt % tk else set())
    uops, gemm_uop, init_alu = _uops(tm, tn, tk, chunks, v, c)
    uop0, end = region(end, 4 * len(uops))
    dram = np.zeros(end, np.uint8)
    dram[inp0: inp0 + xp.nbytes] = xp.reshape(-1).view(np.uint8)
    tiles_w = wp.reshape(nt, bo, kt, bi).transpose(0, 2, 1, 3)  # [nt, kt, bo, bi]: tile nb * kt + kb
    dram[wgt0: wgt0 + wp.nbytes] = np.ascontiguousarray(tiles_w).reshape(-1).view(np.uint8)
    dram[acc0: acc0 + bp.nbytes] = bp.view(np.uint8)
    dram[uop0: uop0 + 4 * len(uops)] = uop_words(uops).view(np.uint8)
    tb = {mem: c.tile_bytes(mem) for mem in ("inp", "wgt", "acc", "out", "uop")}
    insns: list[Insn] = [MemInsn(Opcode.LOAD, Mem.UOP, 0, uop0 // tb["uop"], 1, len(uops), len(uops))]
    slot_inp, slot_wgt, slot_acc = tm * tk, tn * tk, tm * tn
    chunk = tile = 0
    for m0 in range(0, m, tm):
        rm = min(tm, m - m0)
        for n0 in range(0, nt, tn):
            rn = min(tn, nt - n0)
            a = (tile % v) * slot_acc
            insns.append(MemInsn(Opcode.LOAD, Mem.ACC, a, acc0 // tb["acc"] + n0, rm, rn, 0,
                                 deps=Deps(pop_next=tile >= v)))
            for k0 in range(0, kt, tk):
                rk = min(tk, kt - k0)
                si, sw = (chunk % v) * slot_inp, (chunk % v) * slot_wgt
                insns.append(MemInsn(Opcode.LOAD, Mem.INP, si, inp0 // tb["inp"] + m0 * kt + k0, rm, rk, kt,
                                     deps=Deps(pop_next=chunk >= v)))
                insns.append(MemInsn(Opcode.LOAD, Mem.WGT, sw, wgt0 // tb["wgt"] + n0 * kt + k0, rn, rk, kt,
                                     deps=Deps(push_next=True)))
                begin, end_ = gemm_uop[(rk, chunk % v, tile % v)]
                insns.append(GemmInsn(False, begin, end_, rm, rn, dst_out=rn, dst_in=1, src_out=rk,
                                      wgt_in=rk, deps=Deps(pop_prev=True, push_prev=True)))
                chunk += 1
            ab, ae = init_alu[tile % v]
            insns += requantize(ab, ae, rm, rn, shift, lo, hi)
            insns.append(MemInsn(Opcode.STORE, Mem.OUT, a, out0 // tb["out"] + m0 * nt + n0, rm, rn, nt,
                                 deps=Deps(pop_prev=True, push_prev=True)))
            tile += 1
    insns.append(FinishInsn())
    return Program(insns, dram, out0, (m, n))


def rounding_shift(acc: np.ndarray, shift: int) -> np.ndarray:
    """acc / 2**shift rounded to nearest, halves up: `(acc + 2**(shift-1)) >> shift`. This is what
    the CPU's fixed-point `qnn.requantize` computes for a power-of-two scale ratio 2**-shift
    (multiplier 2**30, shift 30 + `shift`, UPWARD rounding), so offloaded layers match it bit for bit."""
    acc = np.asarray(acc, np.int64)
    return (acc + (1 << (shift - 1))) >> shift if shift > 0 else acc


def requantize(uop_begin: int, uop_end: int, rows: int, cols: int, shift: int, lo: int,
               hi: int, *, rounded: bool = False) -> list[AluInsn]:
    """The epilogue on a rows x cols block of accumulators: a rounding shift right, clip to
    [lo, hi]; the last instruction hands the block to the store module. `rounded`: the
    accumulators already hold the rounding offset 2**(shift-1) (folded into the bias), so a plain
    shift rounds.

    The ALU has no rounding shift and its immediate is 16 bits, so adding 2**(shift-1) before
    shifting is not possible for large shifts; instead `((acc >> (shift-1)) + 1) >> 1`, which
    equals `(acc + 2**(shift-1)) >> shift` for every int32 acc (write acc = q * 2**(shift-1) + r
    with 0 <= r < 2**(shift-1): both sides are floor((q+1)/2))."""
    ops: list[tuple[AluOp, int]] = []
    if rounded:
        ops += [(AluOp.SHR, shift)] if shift > 0 else []
    else:
        ops += [(AluOp.SHR, shift - 1)] if shift > 1 else []
        ops += [(AluOp.ADD, 1), (AluOp.SHR, 1)] if shift > 0 else []
    ops += [(AluOp.MAX, lo), (AluOp.MIN, hi)]
    return [AluInsn(op, uop_begin, uop_end, rows, cols, dst_out=cols, dst_in=1, src_out=cols, src_in=1,
                    use_imm=True, imm=imm, deps=Deps(push_next=j == len(ops) - 1))
            for j, (op, imm) in enumerate(ops)]


def _uops(tm: int, tn: int, tk: int, chunks: set[int], v: int, c: VTAConfig) -> tuple[list[Uop], dict, dict]:
    """Micro-op kernels: per (chunk length, input/weight slot, accumulator slot) the GEMM's k loop
    (one micro-op per reduction block), and per accumulator slot the ALU's single micro-op."""
    uops: list[Uop] = []
    gemm: dict[tuple[int, int, int], tuple[int, int]] = {}
    for rk in sorted(chunks):
        for s in range(v):
            for a in range(v):
                begin = len(uops)
                uops += [Uop(a * tm * tn, s * tm * tk + j, s * tn * tk + j) for j in range(rk)]
                gemm[(rk, s, a)] = (begin, len(uops))
    alu = {}
    for a in range(v):
        alu[a] = (len(uops), len(uops) + 1)
        uops.append(Uop(a * tm * tn, a * tm * tn, 0))
    if len(uops) > c.depth("uop"):
        raise VTAError(f"dense: {len(uops)} micro-ops overflow the {c.depth('uop')}-entry buffer")
    return uops, gemm, alu


def run_dense(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, shift: int = 0,
              lo: int = -128, hi: int = 127, knobs: DenseKnobs = DenseKnobs(),
              config: VTAConfig | None = None) -> tuple[np.ndarray, SimResult]:
    """Lower, simulate, and read back the int8 [M, N] result."""
    prog = dense_program(x, w, bias, shift, lo, hi, knobs, config)
    res = simulate(prog.insns, prog.dram, config)
    c = config or VTAConfig()
    m, n = prog.shape
    nt = math.ceil(n / c.block_out)
    out = prog.dram[prog.out_offset: prog.out_offset + m * nt * c.block_out].view(np.int8)
    return out.reshape(m, nt * c.block_out)[:, :n].copy(), res


def dense_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, shift: int, lo: int,
                    hi: int) -> np.ndarray:
    """The integer NumPy oracle: int32 accumulation, rounding shift right, clip."""
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return np.clip(rounding_shift(acc, shift), lo, hi).astype(np.int8)


__all__ = ["DenseKnobs", "Program", "dense_program", "dense_reference", "dense_space", "region", "requantize",
           "rounding_shift", "run_dense", "tile_sizes"]
