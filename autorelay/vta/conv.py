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

Loop order (`order`): "oc_outer" walks output-channel tiles outermost, then the spatial tiles, so
consecutive tiles share weights; "spatial_outer" walks the spatial tiles outermost, so consecutive
tiles share input windows. Either way a chunk skips a LOAD whose data its slot (chunk % vthreads —
each virtual thread's own slot) still holds from an earlier chunk, and a tile skips its bias LOAD
when its accumulator slot holds that bias block: which order wins depends on whether weights or
inputs dominate the layer's traffic. Skipped loads change the token protocol
(`conv_schedule.chunk_deps`).

Rounding (`rounding`): the requantize's rounding offset 2**(shift-1) is added by the ALU between two
shifts ("alu", as `programs.requantize`), or folded into the bias vector on the host ("bias"), which
leaves one shift: two ALU passes fewer per output tile, the same integers.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from autorelay.vta.config import VTAConfig
from autorelay.vta.conv_schedule import (
    ORDERS,
    ROUNDINGS,
    ConvKnobs,
    ConvShape,
    buffers,
    chunk_deps,
    chunk_loads,
    conv_fits,
    conv_space,
    load_counts,
    tile_order,
    variants,
)
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
from autorelay.vta.programs import Program, region, requantize, rounding_shift
from autorelay.vta.sim import SimResult, VTAError, simulate


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
    k = replace(knobs, tile_h=min(knobs.tile_h, s.oh), tile_w=min(knobs.tile_w, s.ow),
                tile_oc=min(knobs.tile_oc, ob), tile_ic=min(knobs.tile_ic, ib))
    if s.oh < 1 or s.ow < 1 or not conv_fits(s, k, c):
        raise VTAError(f"conv2d: knobs {knobs} do not fit {s} on chip (or the output is empty)")
    xb = to_blocked(x, bi)
    wp = np.zeros((ob * bo, ib * bi, s.kh, s.kw), np.int8)
    wp[: s.o, : s.c] = w
    wb = np.ascontiguousarray(wp.reshape(ob, bo, ib, bi, s.kh, s.kw).transpose(0, 2, 4, 5, 1, 3))
    bp, rounded = _bias(bias, s.o, ob * bo, shift, k.rounding)
    inp0, end = region(0, xb.nbytes)
    wgt0, end = region(end, wb.nbytes)
    acc0, end = region(end, bp.nbytes)
    out0, end = region(end, ob * s.oh * s.ow * bo)
    _, _, n_inp, n_wgt, n_acc = buffers(s, k, c)
    uops, gemm_uops, bias_uops, alu_uops = _conv_uops(s, k, c, n_inp, n_wgt, n_acc)
    uop0, end = region(end, 4 * len(uops))
    dram = np.zeros(end, np.uint8)
    for off, arr in ((inp0, xb), (wgt0, wb), (acc0, bp), (uop0, uop_words(uops))):
        dram[off: off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
    tb = {m: c.tile_bytes(m) for m in ("inp", "wgt", "acc", "out", "uop")}
    insns: list[Insn] = [MemInsn(Opcode.LOAD, Mem.UOP, 0, uop0 // tb["uop"], 1, len(uops), len(uops))]
    tiles = tile_order(s, k, ob)
    loads = chunk_loads(tiles, ib, k)
    held_bias: list[int | None] = [None] * k.vthreads  # the bias block each accumulator slot holds
    v, chunk, pix = k.vthreads, 0, k.tile_h * k.tile_w
    for tile, (o0, y0, x0) in enumerate(tiles):
        ro, rh, rw = min(k.tile_oc, ob - o0), min(k.tile_h, s.oh - y0), min(k.tile_w, s.ow - x0)
        window = ((rh - 1) * s.stride + s.kh, (rw - 1) * s.stride + s.kw)
        a = (tile % v) * n_acc
        # the tile's accumulators: block o at a + o * pix, row stride rw (what STORE reads)
        insns.append(GemmInsn(True, *gemm_uops["reset", tile % v], rh, rw,
                              dst_out=rw, dst_in=1, deps=Deps(pop_next=tile >= v)))
        if held_bias[tile % v] != o0:  # the bias region is only read, so a held block stays valid
            insns.append(MemInsn(Opcode.LOAD, Mem.ACC, a + k.tile_oc * pix, acc0 // tb["acc"] + o0,
                                 1, ro, ro))
            held_bias[tile % v] = o0
        for i0 in range(0, ib, k.tile_ic):
            ri = min(k.tile_ic, ib - i0)
            (load_inp, load_wgt), (waits, signals) = loads[chunk], chunk_deps(loads, chunk, v)
            mem: list[MemInsn] = []  # the chunk's last load hands the GEMM its data
            if load_inp:
                mem += _load_window(s, y0, x0, window, i0, ri, (chunk % v) * n_inp, inp0 // tb["inp"],
                                    waits, not load_wgt)
            if load_wgt:
                mem.append(MemInsn(Opcode.LOAD, Mem.WGT, (chunk % v) * n_wgt,
                                   wgt0 // tb["wgt"] + (o0 * ib + i0) * s.kh * s.kw,
                                   ro, ri * s.kh * s.kw, ib * s.kh * s.kw,
                                   deps=Deps(pop_next=waits and not load_inp, push_next=True)))
            insns += mem
            begin, end_ = gemm_uops[(ro, ri), window, chunk % v, tile % v]
            insns.append(GemmInsn(False, begin, end_, rh, rw, dst_out=rw, dst_in=1,
                                  src_out=s.stride * window[1], src_in=s.stride,
                                  deps=Deps(pop_prev=bool(mem), push_prev=signals)))
            chunk += 1
        insns.append(AluInsn(AluOp.ADD, *bias_uops[ro, tile % v], rh, rw, dst_out=rw, dst_in=1))
        for o in range(ro):  # each block's epilogue hands the store module one token
            insns += requantize(*alu_uops[o, tile % v], rh, rw, shift, lo, hi, rounded=rounded)
        for o in range(ro):
            insns.append(MemInsn(Opcode.STORE, Mem.OUT, a + o * pix,
                                 out0 // tb["out"] + ((o0 + o) * s.oh + y0) * s.ow + x0, rh, rw, s.ow,
                                 deps=Deps(pop_prev=True, push_prev=o == ro - 1)))
    insns.append(FinishInsn())
    return Program(insns, dram, out0, (ob * s.oh * s.ow, bo)), s


def _bias(bias: np.ndarray | None, o: int, padded: int, shift: int,
          rounding: str) -> tuple[np.ndarray, bool]:
    """The int32 bias vector in DRAM and whether it carries the rounding offset 2**(shift-1).

    The offset is folded only where every biased value still fits int32; a bias that large is not
    a real layer's, and the ALU rounding is exact for it, so the knob falls back rather than fail."""
    bp = np.zeros(padded, np.int64)
    if bias is not None:
        bp[:o] = bias
    if rounding == "bias" and shift > 0 and int(bp.max()) + (1 << (shift - 1)) <= np.iinfo(np.int32).max:
        return (bp + (1 << (shift - 1))).astype(np.int32), True
    return bp.astype(np.int32), False


def _load_window(s: ConvShape, y0: int, x0: int, window: tuple[int, int], i0: int, ri: int, sram: int,
                 inp_base: int, first_pops: bool, last_pushes: bool) -> list[MemInsn]:
    """Per input block, the rows x cols window the tile's taps read; the part outside the image
    comes from the LOAD's zero pads (at most the convolution's padding). The first LOAD may wait
    for the slot's last GEMM, the last may hand the GEMM its data."""
    rows, cols = window
    top, left = y0 * s.stride - s.pad, x0 * s.stride - s.pad
    r0, r1 = max(top, 0), min(top + rows, s.h)
    c0, c1 = max(left, 0), min(left + cols, s.w)
    pads = (r0 - top, top + rows - r1, c0 - left, left + cols - c1)
    return [MemInsn(Opcode.LOAD, Mem.INP, sram + j * rows * cols, inp_base + ((i0 + j) * s.h + r0) * s.w + c0,
                    r1 - r0, c1 - c0, s.w, *pads,
                    deps=Deps(pop_next=first_pops and j == 0, push_next=last_pushes and j == ri - 1))
            for j in range(ri)]


def _conv_uops(s: ConvShape, k: ConvKnobs, c: VTAConfig, n_inp: int, n_wgt: int,
               n_acc: int) -> tuple[list[Uop], dict, dict, dict]:
    """Micro-op kernels: the reset per accumulator slot; the GEMM per (output blocks, input blocks)
    of a chunk, input window, input/weight slot and accumulator slot; the bias ADD per output
    block count; the epilogue per output block."""
    v, pix = k.vthreads, k.tile_h * k.tile_w
    ros, ris, windows = variants(s, k, c)
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
             shift: int = 0, lo: int = -128, hi: int = 127, knobs: ConvKnobs | None = None,
             config: VTAConfig | None = None) -> tuple[np.ndarray, SimResult]:
    """Lower, simulate, and read back the int8 NCHW result."""
    c = config or VTAConfig()
    prog, s = conv_program(x, w, bias, stride, pad, shift, lo, hi, knobs or ConvKnobs(), c)
    res = simulate(prog.insns, prog.dram, c)
    ob = math.ceil(s.o / c.block_out)
    raw = prog.dram[prog.out_offset: prog.out_offset + ob * s.oh * s.ow * c.block_out].view(np.int8)
    return from_blocked(raw.reshape(ob, s.oh, s.ow, c.block_out), s.o).copy(), res


__all__ = [
    "ORDERS",
    "ROUNDINGS",
    "ConvKnobs",
    "ConvShape",
    "conv_fits",
    "conv_program",
    "conv_reference",
    "conv_space",
    "from_blocked",
    "load_counts",
    "run_conv",
    "to_blocked",
]
