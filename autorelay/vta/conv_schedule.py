"""What a conv lowering may choose and what follows from a choice: the knobs, the layer's shape, the
slots' buffer sizes, whether a setting fits on chip, the order of its tiles and chunks, which loads
reuse data a slot still holds, and a lower bound on its cycles.

`conv.conv_program` emits instructions from exactly these plans, so the tuner's features, the
tests' load counts and the ceiling experiment's pruning read the same decisions the program makes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autorelay.vta.config import VTAConfig
from autorelay.vta.programs import tile_sizes

ORDERS = ("oc_outer", "spatial_outer")
ROUNDINGS = ("alu", "bias")


@dataclass(frozen=True)
class ConvKnobs:
    """A conv lowering's choices; the last two default to the lowering before they existed, so an
    old logged config means what it meant."""

    tile_h: int = 1
    tile_w: int = 8
    tile_oc: int = 1
    tile_ic: int = 1
    vthreads: int = 1
    order: str = "oc_outer"
    rounding: str = "alu"

    def __post_init__(self) -> None:
        if self.order not in ORDERS or self.rounding not in ROUNDINGS:
            raise ValueError(f"conv knobs: order {self.order!r} (one of {ORDERS}), "
                             f"rounding {self.rounding!r} (one of {ROUNDINGS})")


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


def buffers(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> tuple[int, int, int, int, int]:
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


def variants(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> tuple[set, set, set]:
    """(output-block counts, input-block counts, (window rows, cols)) that occur in the program."""
    ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
    windows = {((h - 1) * s.stride + s.kh, (w - 1) * s.stride + s.kw)
               for h in _edges(s.oh, k.tile_h) for w in _edges(s.ow, k.tile_w)}
    return _edges(ob, k.tile_oc), _edges(ib, k.tile_ic), windows


def _uop_count(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> int:
    ros, ris, windows = variants(s, k, c)
    v = k.vthreads
    gemm = sum(ro * ri for ro in ros for ri in ris) * len(windows) * s.kh * s.kw
    return v * (k.tile_oc + v * gemm + sum(ros) + k.tile_oc)


def conv_fits(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> bool:
    _, _, inp, wgt, acc = buffers(s, k, c)
    v = k.vthreads
    return (s.pad <= 15 and inp * v <= c.depth("inp") and wgt * v <= c.depth("wgt")  # 4-bit LOAD pads
            and acc * v <= c.depth("acc") and _uop_count(s, k, c) <= c.depth("uop"))


def conv_space(s: ConvShape, c: VTAConfig) -> list[ConvKnobs]:
    """Every fitting knob setting; order and rounding vary fastest, today's values first."""
    ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
    return [ConvKnobs(th, tw, to, ti, v, order, rnd)
            for v in (1, 2) for th in tile_sizes(s.oh) for tw in tile_sizes(s.ow)
            for to in tile_sizes(ob) for ti in tile_sizes(ib)
            if conv_fits(s, ConvKnobs(th, tw, to, ti, v), c)
            for order in ORDERS for rnd in ROUNDINGS]


def tile_order(s: ConvShape, k: ConvKnobs, ob: int) -> list[tuple[int, int, int]]:
    """(first output block, first row, first column) of each output tile, in `k.order`."""
    oc, ys, xs = range(0, ob, k.tile_oc), range(0, s.oh, k.tile_h), range(0, s.ow, k.tile_w)
    if k.order == "oc_outer":
        return [(o0, y0, x0) for o0 in oc for y0 in ys for x0 in xs]
    return [(o0, y0, x0) for y0 in ys for x0 in xs for o0 in oc]


def chunk_loads(tiles: list[tuple[int, int, int]], ib: int, k: ConvKnobs) -> list[tuple[bool, bool]]:
    """Per chunk in program order, whether it loads its input window and its weights: not when
    its slot (chunk % vthreads) still holds them from the last chunk that used the slot."""
    held_inp: list[tuple | None] = [None] * k.vthreads
    held_wgt: list[tuple | None] = [None] * k.vthreads
    out = []
    for o0, y0, x0 in tiles:
        for i0 in range(0, ib, k.tile_ic):
            sl = len(out) % k.vthreads
            out.append((held_inp[sl] != (y0, x0, i0), held_wgt[sl] != (o0, i0)))
            held_inp[sl], held_wgt[sl] = (y0, x0, i0), (o0, i0)
    return out


def chunk_deps(loads: list[tuple[bool, bool]], chunk: int, v: int) -> tuple[bool, bool]:
    """(whether the chunk's first LOAD waits, whether its GEMM signals) on the compute->load queue.

    A LOAD into slot chunk % v may overwrite it only after the last GEMM that read the slot —
    chunk - v's, as GEMMs run in order — is done. A chunk that loads nothing waits for nothing,
    so GEMM g pushes a token only when chunk g + v loads: pops and pushes then pair one to one
    and in order, as the FIFO requires (an unpaired token would let a later load pass its GEMM)."""
    waits = chunk >= v and any(loads[chunk])
    signals = chunk + v < len(loads) and any(loads[chunk + v])
    return waits, signals


def load_counts(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> tuple[int, int]:
    """(chunks that load their input windows, chunks that load their weights) after reuse: what
    the order changes, for the tuner's features and the tests."""
    ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
    loads = chunk_loads(tile_order(s, k, ob), ib, k)
    return sum(li for li, _ in loads), sum(lw for _, lw in loads)


def cycles_lower_bound(s: ConvShape, k: ConvKnobs, c: VTAConfig) -> int:
    """Cycles no run of this setting can beat, from the plan alone (no program, no simulation).

    A module runs its instructions one at a time, so the total is at least each module's busy
    time: the load module's is at least a DRAM latency per input-block and weight LOAD plus the
    weight bytes at the bandwidth (input windows' sizes are left out); the compute module's at
    least a pipeline fill per GEMM plus one cycle per micro-op iteration (output pixel x output
    block x input block x tap), whatever the tiling. Lets a search skip settings it cannot use."""
    ob, ib = math.ceil(s.o / c.block_out), math.ceil(s.c / c.block_in)
    tiles = tile_order(s, k, ob)
    loads = chunk_loads(tiles, ib, k)
    n_load, wgt_tiles, j = 0, 0, 0
    for o0, _, _ in tiles:
        ro = min(k.tile_oc, ob - o0)
        for i0 in range(0, ib, k.tile_ic):
            ri = min(k.tile_ic, ib - i0)
            load_inp, load_wgt = loads[j]
            n_load += ri * load_inp + load_wgt
            wgt_tiles += load_wgt * ro * ri * s.kh * s.kw
            j += 1
    wgt_bytes = wgt_tiles * c.tile_bytes("wgt")
    load = n_load * c.dram_latency_cycles + math.ceil(wgt_bytes / c.dram_bytes_per_cycle)
    compute = len(loads) * c.gemm_pipeline_cycles + s.oh * s.ow * ob * ib * s.kh * s.kw
    return max(load, compute)


__all__ = ["ORDERS", "ROUNDINGS", "ConvKnobs", "ConvShape", "buffers", "chunk_deps", "chunk_loads",
           "conv_fits", "conv_space", "cycles_lower_bound", "load_counts", "tile_order", "variants"]
