"""Dense / matmul / batch_matmul: a packed, register-tiled GEMM.

Every form of `te.nn.matmul` (either operand transposed, any number of broadcast batch axes) is
this one template. The weight B is packed to `[..., N/NR, K, NR]` once at bind time (constants) or
per run (activations, by a relayout kernel) so each k-step reads NR contiguous floats and a
block's panel is one contiguous stream. From the transposed-B layout (`B[..., N, K]`, Relay's
convention) that is one Pack; from `B[..., K, N]` it is two (N split into NR-wide panels, then all
of K moved inside the panel), and the knob `b_layout` may instead read B as it is: its rows are
already NR contiguous floats, but a power-of-two row stride maps a panel's rows onto few cache
sets. A transposed A (`[..., K, M]`) likewise has the knob `a_layout`: MR-row panels or as it is.

The output is blocked MR x NR; each block accumulates in an MR x NR local buffer (CacheWrite +
ComputeAt) whose rows and vector columns are unrolled and whose lanes are vectorized, so LLVM
keeps it in vector registers: per k, NR/lanes vector loads of B, MR broadcasts of A and
MR·NR/lanes FMAs. Knobs: MR, NR (in vectors), which block loop is outer (and parallel), k
unrolling, and for a `[..., K, N]` B or a `[..., K, M]` A whether to pack it. An injective
epilogue (bias, activation) is the output stage and reads the accumulator. A fused prologue that
produces A (`FusionPlan.prologues`) is computed once before the GEMM when several column blocks
read A (`_rooted_prologue`); other injective stages are inlined.
"""

from __future__ import annotations

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Pattern, Template, pattern, register
from autorelay.schedule.templates.generic import _outer_fuse
from autorelay.target import Target
from autorelay.te.nn import GEMM_TAGS
from autorelay.te.tensor import ComputeDef


def _gemm_shape(cdef: ComputeDef) -> tuple[int, int, int, int, str]:
    """(batch, M, N, K, weight input name) of a dense/matmul/batch_matmul compute; batch is the
    product of its batch axes."""
    pat = pattern(cdef)
    red = pat.reduce
    if red is None or red.op is None:
        raise ScheduleError(f"{cdef.name}: the dense template needs a reduction stage")
    shape = red.shape
    k = red.op.reduce_axes[0].extent
    weight = red.op.attrs["weight"]
    batch = 1
    for s in shape[:-2]:
        batch *= s
    return batch, shape[-2], shape[-1], k, weight


class DenseTemplate(Template):
    name = "dense"
    tags = GEMM_TAGS

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, m, n, _, _ = _gemm_shape(cdef)
        lanes = target.vector_lanes()
        mr = [x for x in (1, 2, 3, 4, 5, 6, 8) if x <= max(m, 1)] or [1]
        nv = [x for x in (1, 2, 3, 4, 6) if (x - 1) * lanes < n]
        knobs = [Knob("tile_m", mr), Knob("tile_n_vectors", nv), Knob("outer", ("n", "m")),
                 Knob("unroll_k", (1, 2, 4))]
        a_layout, b_layout = _layouts(cdef)
        if a_layout == "km":
            knobs.append(Knob("a_layout", ("packed", "as_is")))
        if b_layout == "kn":
            knobs.append(Knob("b_layout", ("packed", "as_is")))
        return Space(self.name, tuple(knobs))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        _, m, n, _, _ = _gemm_shape(cdef)
        lanes, regs = target.vector_lanes(), target.vector_registers
        best = None
        for nv in (4, 3, 2, 1):
            for mr in (8, 6, 4, 3, 2, 1):
                # accumulators + B vectors + one broadcast must fit the register file
                if mr * nv + nv + 1 > regs - 1 or mr > m or (nv - 1) * lanes >= n:
                    continue
                score = (mr * nv / (mr + nv), mr)  # FMAs per load, then taller tiles
                if best is None or score > best[0]:
                    best = (score, mr, nv)
        _, mr, nv = best or ((0, 0), 1, 1)
        # column blocks outer (and parallel): each packed B panel stays in cache while the row
        # blocks stream past it, and a few rows still give every thread work. Measured (AVX-512,
        # best of many runs): 1.0-1.06x rows-outer from 16 to 1024 rows on one thread, 1.04-1.6x
        # on two; rows-outer won only below 16 rows on one thread (by 3-6%).
        values: tuple = (("tile_m", mr), ("tile_n_vectors", nv), ("outer", "n"), ("unroll_k", 4))
        # re-laying out an operand costs a pass over it (per run, for an activation); the GEMM
        # streams each A panel once per column block and each B panel once per row block
        a_layout, b_layout = _layouts(cdef)
        if a_layout == "km":
            values += (("a_layout", "packed" if -(-n // (nv * lanes)) >= PACK_MIN_BLOCKS else "as_is"),)
        if b_layout == "kn":
            values += (("b_layout", "packed" if -(-m // mr) >= PACK_MIN_BLOCKS else "as_is"),)
        return Config(self.name, values)

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        _batch, _, n, _, weight = _gemm_shape(cdef)
        pat = pattern(cdef)
        lanes = target.vector_lanes()
        mr, nv, uk = config["tile_m"], config["tile_n_vectors"], config["unroll_k"]
        nr = nv * lanes
        out = pat.output.name
        red_axes = pat.reduce.op.reduce_axes  # type: ignore[union-attr]
        kname = red_axes[0].name
        ax = [a.name for a in pat.output.op.axes]  # type: ignore[union-attr]
        i, j = ax[-2], ax[-1]
        rooted, steps = _rooted_prologue(pat, n, nr, lanes)
        steps = [S.ComputeInline(t.name) for t in pat.others if t.name != rooted] + steps
        steps += _packs(cdef, config, weight, mr, nr)
        if pat.reduce is pat.output:
            steps.append(S.CacheWrite(out))
            acc = f"{out}_local"
        else:
            acc = pat.reduce.name  # type: ignore[union-attr]
        acc_ax = [a.name for a in pat.reduce.op.axes]  # type: ignore[union-attr]
        ai, aj = acc_ax[-2], acc_ax[-1]
        steps += [S.Split(out, i, mr), S.Split(out, j, nr)]
        blocks = (f"{j}_o", f"{i}_o") if config["outer"] == "n" else (f"{i}_o", f"{j}_o")
        steps.append(S.Reorder(out, (*ax[:-2], *blocks, f"{i}_i", f"{j}_i")))
        steps.append(S.ComputeAt(acc, out, blocks[1]))
        steps += accumulator_tile(acc, kname, ai, aj, lanes, uk)
        steps += [S.Split(out, f"{j}_i", lanes, f"{j}_v", f"{j}_w"), S.Vectorize(out, f"{j}_w")]
        par = blocks[0]
        for z in reversed(ax[:-2]):  # batch axes: fused with the outer block loop for parallelism
            steps.append(S.Fuse(out, z, par))
            par = f"{z}_{par}"
        steps.append(S.Parallel(out, par))
        return tuple(steps)


PACK_MIN_BLOCKS = 4  # an operand read as it is re-laid out by default when this many blocks reuse it


def _layouts(cdef: ComputeDef) -> tuple[str, str]:
    """(a_layout, b_layout) of the GEMM stage: `"mk"` / `"km"` (transposed A), `"nk"` / `"kn"`."""
    red = pattern(cdef).reduce
    attrs = red.op.attrs if red is not None and red.op is not None else {}
    return attrs.get("a_layout", "mk"), attrs.get("b_layout", "nk")


def _packs(cdef: ComputeDef, config: Config, weight: str, mr: int, nr: int) -> list[S.Step]:
    """The Pack steps of A and B (an operand that is not a kernel input, e.g. an inlined
    transpose, is read as it is)."""
    a_layout, b_layout = _layouts(cdef)
    inputs = {t.name: t for t in cdef.inputs}
    steps: list[S.Step] = []
    if b_layout == "nk" and weight in inputs:
        steps.append(S.Pack(weight, inputs[weight].ndim - 2, nr))  # [.., N, K] -> [.., N/NR, K, NR]
    if b_layout == "kn" and config["b_layout"] == "packed":
        steps += _panels(inputs.get(weight), nr)
    data = pattern(cdef).reduce.op.attrs.get("data")  # type: ignore[union-attr]
    if a_layout == "km" and config["a_layout"] == "packed":
        steps += _panels(inputs.get(data), mr)
    return steps


def _rooted_prologue(pat: Pattern, n: int, nr: int, lanes: int) -> tuple[str | None, list[S.Step]]:
    """(stage, steps) computing a fused prologue that produces A, the activation operand, once into
    a workspace before the GEMM (its split last axis vectorized, the rest one parallel loop), when
    more than one column block (N columns, `nr` wide) reads A; else (None, []) and every prologue
    stage is inlined.

    `FusionPlan.prologues` fuses the injective producers of a dense into it, e.g. a classifier's
    re-layout out of channel blocks and its `batch_flatten`. Inlined, their index arithmetic (a
    blocked layout's divisions) runs on every read of A, once per column block: VGG-16's first
    classifier layer (NCHW8c 512x7x7 -> 4096 units, Zen 3, 2 threads) ran 14.4 ms so, against 11.9
    ms for the re-layout and the dense as two kernels."""
    data = pat.reduce.op.attrs.get("data")  # type: ignore[union-attr]
    stage = next((t for t in pat.others if t.name == data), None)
    if stage is None or stage.op is None or -(-n // nr) < 2:
        return None, []
    axes = [a.name for a in stage.op.axes]
    steps: list[S.Step] = [S.Split(stage.name, axes[-1], lanes), S.Vectorize(stage.name, f"{axes[-1]}_i")]
    fused, outer = _outer_fuse(stage.name, [*axes[:-1], f"{axes[-1]}_o"])
    return stage.name, [*steps, *fused, S.Parallel(stage.name, outer)]


def _panels(t, tile: int) -> list[S.Step]:
    """Lay an input `[.., K, X]` out as `[.., 1, X/tile, K, tile]`: X split into tile-wide panels,
    then all of K moved inside each panel, so a block's k loop streams one contiguous panel
    (the rows of `[.., K, X]` are X apart: at a power-of-two X they share a few cache sets)."""
    if t is None:
        return []
    nd = t.ndim
    return [S.Pack(t.name, nd - 1, tile), S.Pack(t.name, nd - 2, t.shape[nd - 2], nd)]


def accumulator_tile(acc: str, k: str, row: str, col: str, lanes: int, unroll_k: int) -> list[S.Step]:
    """The register tile of a GEMM accumulator stage computed at its output block: the reduction
    `k` outermost (its inner `unroll_k` steps unrolled), then the tile's rows unrolled and its
    columns as unrolled vectors of `lanes`, so every accumulator stays in a vector register."""
    steps: list[S.Step] = [S.Split(acc, col, lanes)]
    order: tuple[str, ...] = (k,)
    if unroll_k > 1:
        steps.append(S.Split(acc, k, unroll_k))
        order = (f"{k}_o", f"{k}_i")
    steps.append(S.Reorder(acc, (*order, row, f"{col}_o", f"{col}_i")))
    if unroll_k > 1:
        steps.append(S.Unroll(acc, f"{k}_i"))
    steps += [S.Unroll(acc, row), S.Unroll(acc, f"{col}_o"), S.Vectorize(acc, f"{col}_i")]
    return steps


def gemm_tile_knobs(rows: int, cols: int, lanes: int) -> tuple[Knob, Knob]:
    """The register-tile knobs of a GEMM whose rows are broadcast and whose columns are vectors
    (the Winograd and 1x1-conv GEMMs): `tile_k` rows, `tile_p_vectors` vectors of columns, no
    taller or wider than the problem by a whole row or vector."""
    return (
        Knob("tile_k", [t for t in (1, 2, 3, 4, 6, 8) if t <= rows]),
        Knob("tile_p_vectors", [t for t in (1, 2, 3, 4) if (t - 1) * lanes < cols]),
    )


register(DenseTemplate())
