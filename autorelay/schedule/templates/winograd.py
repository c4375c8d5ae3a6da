"""Winograd F(2x2, 3x3) convolution template (`autorelay.te.winograd`): three loop nests in one kernel.

1. Input transform V [16, C, P] into a workspace: parallel over (channel, tile row); the 16
   positions are unrolled (their selects fold to two adds each) and tiles along a row are the
   vector, so the 4x4 input windows are stride-2 vector loads shared by all 16 positions.
2. The 16 GEMMs M[z] = U[z] V[z] ([K, C] x [C, P]) as a register-tiled GEMM like the dense
   template: a `tile_k` x `tile_p_vectors` tile of accumulators per block, the transformed weight
   broadcast, V's tile columns as vector loads (contiguous, no packing needed), parallel over
   (position, outer block).
3. Output transform plus the fused epilogue as the kernel output: per (channel, tile row) and
   vector of tiles along the row, the 16 M vectors are loaded once and the 2x2 outputs computed
   from them (the two output rows and columns unrolled).

Knobs: the GEMM tile (`tile_k`, `tile_p_vectors`), which GEMM block loop is outer, reduction
unrolling, and the vector width of the transforms.
"""

from __future__ import annotations

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register
from autorelay.schedule.templates.dense import accumulator_tile, gemm_tile_knobs
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor


def winograd_stages(cdef: ComputeDef, gemm_tag: str) -> tuple[Tensor, Tensor, list[Tensor]]:
    """(V, M, the other stages) of a Winograd kernel whose GEMM stage is tagged `gemm_tag` (the
    blocked template shares it)."""
    pat = pattern(cdef)
    m = pat.reduce
    if m is None or m.op is None or m.op.tag != gemm_tag:
        raise ScheduleError(f"{cdef.name}: the {gemm_tag} template needs a {gemm_tag} stage")
    vs = [t for t in pat.others if t.op is not None and t.op.tag == "winograd_input"]
    if len(vs) != 1:
        raise ScheduleError(f"{cdef.name}: expected one winograd input transform, found {len(vs)}")
    return vs[0], m, [t for t in pat.others if t is not vs[0]]


def _stages(cdef: ComputeDef) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    """(V, M, output, stages to inline) of a winograd kernel."""
    v, m, rest = winograd_stages(cdef, "conv2d_winograd")
    return v, m, pattern(cdef).output, rest


class Conv2dWinogradTemplate(Template):
    name = "conv2d_winograd"
    tags = ("conv2d_winograd",)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, m, _, _ = _stages(cdef)
        _, k, p = m.shape
        lanes = target.vector_lanes()
        return Space(
            self.name,
            (
                *gemm_tile_knobs(k, p, lanes),
                Knob("outer", ("k", "p")),
                Knob("unroll_c", (1, 2, 4)),
                Knob("transform_lanes", _transform_widths(m.op.attrs["tiles_w"], lanes)),  # type: ignore[union-attr]
            ),
        )

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        _, m, _, _ = _stages(cdef)
        _, k, p = m.shape
        lanes = target.vector_lanes()
        pv = max(t for t in (1, 2, 3) if (t - 1) * lanes < p)
        tk = max(t for t in (1, 2, 3, 4) if t <= k)
        widths = _transform_widths(m.op.attrs["tiles_w"], lanes)  # type: ignore[union-attr]
        pow2 = [w for w in widths if w & (w - 1) == 0]
        return Config(self.name, (("tile_k", tk), ("tile_p_vectors", pv), ("outer", "k"), ("unroll_c", 2),
                                  ("transform_lanes", max(pow2 or widths))))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        v, m, out, inlined = _stages(cdef)
        lanes = target.vector_lanes()
        tw = m.op.attrs["tiles_w"]  # type: ignore[union-attr]
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in inlined]
        vec = config["transform_lanes"]
        steps += _input_transform(v.name, [a.name for a in v.op.axes], tw, vec)  # type: ignore[union-attr]
        steps += _gemm(m.name, [a.name for a in m.op.axes], m.op.reduce_axes[0].name,  # type: ignore[union-attr]
                       config, lanes)
        tile = m.op.attrs["tile"]  # type: ignore[union-attr]
        steps += _output_transform(out.name, [a.name for a in out.op.axes], tile, vec)  # type: ignore[union-attr]
        return tuple(steps)


def _transform_widths(tiles_w: int, lanes: int) -> tuple[int, ...]:
    """Vector widths for the transforms: divisors of the tiles per row (so the tile-column loop
    splits evenly and tile index arithmetic simplifies to offsets), 2 to `lanes`, else 1."""
    return tuple(d for d in range(2, lanes + 1) if tiles_w % d == 0) or (1,)


def _input_transform(v: str, axes: list[str], tw: int, vec: int) -> list[S.Step]:
    z, c, p = axes
    return [
        S.Split(v, p, tw, f"{p}_row", f"{p}_t"),  # tile row (batch x tile row) and tile column
        S.Split(v, f"{p}_t", vec, f"{p}_to", f"{p}_tv"),
        S.Reorder(v, (c, f"{p}_row", f"{p}_to", z, f"{p}_tv")),
        S.Fuse(v, c, f"{p}_row"),
        S.Parallel(v, f"{c}_{p}_row"),
        S.Unroll(v, z),
        S.Vectorize(v, f"{p}_tv"),
    ]


def _gemm(m: str, axes: list[str], rc: str, config: Config, lanes: int) -> list[S.Step]:
    z, k, p = axes
    tk, nr, uc = config["tile_k"], config["tile_p_vectors"] * lanes, config["unroll_c"]
    acc = f"{m}_local"
    blocks = (f"{k}_o", f"{p}_o") if config["outer"] == "k" else (f"{p}_o", f"{k}_o")
    steps: list[S.Step] = [
        S.CacheWrite(m),
        S.Split(m, k, tk),
        S.Split(m, p, nr),
        S.Reorder(m, (z, *blocks, f"{k}_i", f"{p}_i")),
        S.ComputeAt(acc, m, blocks[1]),
        S.Fuse(m, z, blocks[0]),
        S.Parallel(m, f"{z}_{blocks[0]}"),
        S.Split(m, f"{p}_i", lanes, f"{p}_v", f"{p}_w"),
        S.Vectorize(m, f"{p}_w"),
    ]
    return steps + accumulator_tile(acc, rc, k, p, lanes, uc)


def _output_transform(out: str, axes: list[str], tile: int, vec: int) -> list[S.Step]:
    n, k, y, x = axes
    return [
        S.Split(out, y, tile),
        S.Split(out, x, tile),
        S.Split(out, f"{x}_o", vec, f"{x}_to", f"{x}_tv"),
        S.Reorder(out, (n, k, f"{y}_o", f"{x}_to", f"{y}_i", f"{x}_i", f"{x}_tv")),
        S.Fuse(out, n, k),
        S.Fuse(out, f"{n}_{k}", f"{y}_o"),
        S.Parallel(out, f"{n}_{k}_{y}_o"),
        S.Unroll(out, f"{y}_i"),
        S.Unroll(out, f"{x}_i"),
        S.Vectorize(out, f"{x}_tv"),
    ]


register(Conv2dWinogradTemplate())
