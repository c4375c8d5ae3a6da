"""int8 conv2d (+ bias, requantize, relu) lowered to the accelerator, in channel-blocked layouts.

Layouts in DRAM (tiles of BLOCK_IN / BLOCK_OUT channels; channels padded with zeros to whole blocks):
input [C/16][H][W][16], weights [O/16][C/16][KH][KW][16o][16i], bias [O/16][16] int32, output
[O/16][OH][OW][16]. `to_blocked` / `from_blocked` convert from and to NCHW.

Work: output tiles of `tile_h` x `tile_w` pixels x `tile_oc` output blocks, accumulated over chunks
of `tile_ic` input blocks. A chunk loads, per input block, the input window the tile's taps read —
out-of-image rows and columns come from the LOAD's zero pads, so padding costs no DRAM traffic —
and the weights of (tile's output blocks x chunk's input blocks); one GEMM then runs the loop
(output row, output column) over micro-ops (output block, input block, kh, kw), the stride entering
as the source factors. The tile is initialised by a GEMM reset, gets its bias with an ALU ADD from a
bias block loaded beside it, is requantized (`programs.requantize`) and stored one output block at
a time. Virtual threads and dependency tokens as in `programs.dense_program`.
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
from autorelay.vta.programs import Program, region, requantize, rounding_shift, tile_sizes
from autorelay.vta.sim import SimResult, VTAError, simulate


@dataclass(frozen=True)
class ConvKnobs:
    tile_h: int = 1
    tile_w: int = 8
    tile_oc: int = 1
    tile_ic: int = 1
    vthreads: int = 1


@dataclass(frozen=True)
class ConvShape:
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    stride: int = 1
    pad: int = 0

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.kw) // self.stride + 1


def _buffers(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> tuple[int, int, int, int, int]:
    """(input window rows, cols, inp tiles, wgt tiles, acc tiles) one slot needs."""
    rows = (k.tile_h - 1) * s.stride + s.kh
    cols = (k.tile_w - 1) * s.stride + s.kw
    inp = k.tile_ic * rows * cols
    wgt = k.tile_oc * k.tile_ic * s.kh * s.kw
    acc = k.tile_oc * k.tile_h * k.tile_w + k.tile_oc  # the tile and its bias block
    return rows, cols, inp, wgt, acc


def _edges(extent: int, tile: int) -> set[int]:
    """The tile lengths that occur when `extent` is cut into tiles of `tile` (full and the rest)."""
    return {min(tile, extent)} | ({extent % tile} if extent % tile and extent > tile else set())


def _variants(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> tuple[set, set, set]:
    """(output-block counts, input-block counts, (window rows, cols)) that occur in the program."""
    ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
    windows = {((h - 1) * s.stride + s.kh, (w - 1) * s.stride + s.kw)
               for h in _edges(s.oh, k.tile_h) for w in _edges(s.ow, k.tile_w)}
    return _edges(ob, k.tile_oc), _edges(ib, k.tile_ic), windows


def _uop_count(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> int:
    ros, ris, windows = _variants(s, k, c)
    v = k.vthreads
    gemm = sum(ro * ri for ro in ros for ri in ris) * len(windows) * s.kh * s.kw
    return v * (k.tile_oc + v * gemm + sum(ros) + k.tile_oc)


def conv_fits(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> bool:
    _, _, inp, wgt, acc = _buffers(s, k, c)
    v = k.vthreads
    return (s.pad <= 15 and inp * v <= c.depth("inp") and wgt * v <= c.depth("wgt")  # 4-bit LOAD pads
            and acc * v <= c.depth("acc") and _uop_count(s, k, c) <= c.depth("uop"))


def conv_space(s: ConvShape, c: VTAConfig) -> list[ConvKnobs]:
    ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
    return [k for v in (1, 2) for th in tile_sizes(s.oh) for tw in tile_sizes(s.ow)
            for to in tile_sizes(ob) for ti in tile_sizes(ib)
            if conv_fits(s, k := ConvKnobs(th, tw, to, ti, v), c)]


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW (N = 1) int8 -> [C/block][H][W][block], channels zero-padded."""
    c = x.shape[1]
    cb = math.ceil(c / block)
    out = np.zeros((cb * block, *x.shape[2:]), x.dtype)
    out[:c] = x[0]
    return np.ascontiguousarray(out.reshape(cb, block, *x.shape[2:]).transpose(0, 2, 3, 1))


def from_blocked(y: np.ndarray, channels: int) -> np.ndarray:
    """[O/block][OH][OW][block] -> NCHW (N = 1) with `channels` channels."""
    ob, oh, ow, b = y.shape
    return y.transpose(0, 3, 1, 2).reshape(1, ob * b, oh, ow)[:, :channels]


def conv_program(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: int, pad: int, shift: int,
                 lo: int, hi: int, knobs: ConvKnobs, config: VTAConfig | None = None
                 ) -> tuple[Program, ConvShape]:
    c = config or VTAConfig()
    if x.ndim != 4 or x.shape[0] != 1 or w.ndim != 4 or w.shape[1] != x.shape[1]:
        raise VTAError(f"conv2d: x {list(x.shape)} (NCHW, N = 1) and w {list(w.shape)} (OIHW) do not match")
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise VTAError("conv2d: x and w must be int8")
    s = ConvShape(x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2], w.shape[3], stride, pad)
    bi, bo = c.block_in, c.block_out
    ib, ob = math.ceil(s.c / bi), math.ceil(s.o / bo)
    k = ConvKnobs(min(knobs.tile_h, s.oh), min(knobs.tile_w, s.ow), min(knobs.tile_oc, ob),
                  min(knobs.tile_ic, ib), knobs.vthreads)
    if s.oh < 1 or s.ow < 1 or not conv_fits(s, k, c):
        raise VTAError(f"conv2d: knobs {knobs} do not fit {s} on chip (or the output is empty)")
    xb = to_blocked(x, bi)
    wp = np.zeros((ob * bo, ib * bi, s.kh, s.kw), np.int8)
    wp[: s.o, : s.c] = w
    wb = np.ascontiguousarray(wp.reshape(ob, bo, ib, bi, s.kh, s.kw).transpose(0, 2, 4, 5, 1, 3))
    bp = np.zeros(ob * bo, np.int32)
    if bias is not None:
        bp[: s.o] = bias
    inp0, end = region(0, xb.nbytes)
    wgt0, end = region(end, wb.nbytes)
    acc0, end = region(end, bp.nbytes)
    out0, end = region(end, ob * s.oh * s.ow * bo)
    _, _, n_inp, n_wgt, n_acc = _buffers(s, k, c)
    uops, gemm_uops, bias_uops, alu_uops = _conv_uops(s, k, c, n_inp, n_wgt, n_acc)
    uop0, end = region(end, 4 * len(uops))
    dram = np.zeros(end, np.uint8)
    for off, arr in ((inp0, xb), (wgt0, wb), (acc0, bp), (uop0, uop_words(uops))):
        dram[off: off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
    tb = {m: c.tile_bytes(m) for m in ("inp", "wgt", "acc", "out", "uop")}
    insns: list[Insn] = [MemInsn(Opcode.LOAD, Mem.UOP, 0, uop0 // tb["uop"], 1, len(uops), len(uops))]
    v, chunk, tile, pix = k.vthreads, 0, 0, k.tile_h * k.tile_w
    for o0 in range(0, ob, k.tile_oc):
        ro = min(k.tile_oc, ob - o0)
        for y0 in range(0, s.oh, k.tile_h):
            rh = min(k.tile_h, s.oh - y0)
            for x0 in range(0, s.ow, k.tile_w):
                rw = min(k.tile_w, s.ow - x0)
                window = ((rh - 1) * s.stride + s.kh, (rw - 1) * s.stride + s.kw)
                a = (tile % v) * n_acc
                # the tile's accumulators: block o at a + o * pix, row stride rw (what STORE reads)
                insns.append(GemmInsn(True, *gemm_uops["reset", tile % v], rh, rw,
                                      dst_out=rw, dst_in=1, deps=Deps(pop_next=tile >= v)))
                insns.append(MemInsn(Opcode.LOAD, Mem.ACC, a + k.tile_oc * pix, acc0 // tb["acc"] + o0,
                                     1, ro, ro))
                for i0 in range(0, ib, k.tile_ic):
                    ri = min(k.tile_ic, ib - i0)
                    si, sw = (chunk % v) * n_inp, (chunk % v) * n_wgt
                    insns += _load_window(s, y0, x0, window, i0, ri, si, inp0 // tb["inp"], chunk >= v)
                    insns.append(MemInsn(Opcode.LOAD, Mem.WGT, sw,
                                         wgt0 // tb["wgt"] + (o0 * ib + i0) * s.kh * s.kw,
                                         ro, ri * s.kh * s.kw, ib * s.kh * s.kw, deps=Deps(push_next=True)))
                    begin, end_ = gemm_uops[(ro, ri), window, chunk % v, tile % v]
                    insns.append(GemmInsn(False, begin, end_, rh, rw, dst_out=rw, dst_in=1,
                                          src_out=s.stride * window[1], src_in=s.stride,
                                          deps=Deps(pop_prev=True, push_prev=True)))
                    chunk += 1
                insns.append(AluInsn(AluOp.ADD, *bias_uops[ro, tile % v], rh, rw, dst_out=rw, dst_in=1))
                for o in range(ro):  # each block's epilogue hands the store module one token
                    insns += requantize(*alu_uops[o, tile % v], rh, rw, shift, lo, hi)
                for o in range(ro):
                    insns.append(MemInsn(Opcode.STORE, Mem.OUT, a + o * pix,
                                         out0 // tb["out"] + ((o0 + o) * s.oh + y0) * s.ow + x0, rh, rw, s.ow,
                                         deps=Deps(pop_prev=True, push_prev=o == ro - 1)))
                tile += 1
    insns.append(FinishInsn())
    return Program(insns, dram, out0, (ob * s.oh * s.ow, bo)), s


def _load_window(s: ConvShape, y0: int, x0: int, window: tuple[int, int], i0: int, ri: int, sram: int,
                 inp_base: int, first_pops: bool) -> list[MemInsn]:
    """Per input block, the rows x cols window the tile's taps read; the part outside the image
    comes from the LOAD's zero pads (at most the convolution's padding)."""
    rows, cols = window
    top, left = y0 * s.stride - s.pad, x0 * s.stride - s.pad
    r0, r1 = max(top, 0), min(top + rows, s.h)
    c0, c1 = max(left, 0), min(left + cols, s.w)
    pads = (r0 - top, top + rows - r1, c0 - left, left + cols - c1)
    return [MemInsn(Opcode.LOAD, Mem.INP, sram + j * rows * cols, inp_base + ((i0 + j) * s.h + r0) * s.w + c0,
                    r1 - r0, c1 - c0, s.w, *pads, deps=Deps(pop_next=first_pops and j == 0))
            for j in range(ri)]


def _conv_uops(s: ConvShape, k: ConvKnobs, c: VTAConfig, n_inp: int, n_wgt: int,
               n_acc: int) -> tuple[list[Uop], dict, dict, dict]:
    """Micro-op kernels: the reset per accumulator slot; the GEMM per (output blocks, input blocks)
    of a chunk, input window, input/weight slot and accumulator slot; the bias ADD per output
    block count; the epilogue per output block."""
    v, pix = k.vthreads, k.tile_h * k.tile_w
    ros, ris, windows = _variants(s, k, c)
    uops: list[Uop] = []
    gemm: dict = {}
    bias: dict = {}
    alu: dict = {}
    for a in range(v):
        base = a * n_acc
        gemm["reset", a] = (len(uops), len(uops) + k.tile_oc)
        uops += [Uop(base + o * pix, 0, 0) for o in range(k.tile_oc)]
        for ro in sorted(ros):
            for ri in sorted(ris):
                for rows, cols in sorted(windows):
                    for sl in range(v):
                        begin = len(uops)
                        uops += [Uop(base + o * pix, sl * n_inp + (i * rows + y) * cols + x,
                                     sl * n_wgt + ((o * ri + i) * s.kh + y) * s.kw + x)
                                 for o in range(ro) for i in range(ri)
                                 for y in range(s.kh) for x in range(s.kw)]
                        gemm[(ro, ri), (rows, cols), sl, a] = (begin, len(uops))
        for ro in sorted(ros):
            bias[ro, a] = (len(uops), len(uops) + ro)
            uops += [Uop(base + o * pix, base + k.tile_oc * pix + o, 0) for o in range(ro)]
        for o in range(k.tile_oc):
            alu[o, a] = (len(uops), len(uops) + 1)
            uops.append(Uop(base + o * pix, base + o * pix, 0))
    if len(uops) > c.depth("uop"):
        raise VTAError(f"conv2d: {len(uops)} micro-ops overflow the {c.depth('uop')}-entry buffer")
    return uops, gemm, bias, alu


def conv_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: int, pad: int, shift: int,
                   lo: int, hi: int) -> np.ndarray:
    """The integer NumPy oracle (NCHW, N = 1): int64 accumulation, rounding shift right, clip."""
    o, _, kh, kw = w.shape
    xp = np.pad(x[0].astype(np.int64), ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    acc = np.zeros((o, oh, ow), np.int64)
    for y in range(kh):
        for z in range(kw):
            patch = xp[:, y: y + stride * (oh - 1) + 1: stride, z: z + stride * (ow - 1) + 1: stride]
            acc += np.einsum("chw,oc->ohw", patch, w[:, :, y, z].astype(np.int64))
    if bias is not None:
        acc += bias.astype(np.int64)[:, None, None]
    return np.clip(rounding_shift(acc, shift), lo, hi).astype(np.int8)[None]


def run_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, stride: int = 1, pad: int = 0,
             shift: int = 0, lo: int = -128, hi: int = 127, knobs: ConvKnobs = ConvKnobs(),
             config: VTAConfig | None = None) -> tuple[np.ndarray, SimResult]:
    """Lower, simulate, and read back the int8 NCHW result."""
    c = config or VTAConfig()
    prog, s = conv_program(x, w, bias, stride, pad, shift, lo, hi, knobs, c)
    res = simulate(prog.insns, prog.dram, c)
    ob = math.ceil(s.o / c.block_out)
    raw = prog.dram[prog.out_offset: prog.out_offset + ob * s.oh * s.ow * c.block_out].view(np.int8)
    return from_blocked(raw.reshape(ob, s.oh, s.ow, c.block_out), s.o).copy(), res


__all__ = ["ConvKnobs", "ConvShape", "conv_fits", "conv_program", "conv_reference", "conv_space",
           "from_blocked", "run_conv", "to_blocked"]
