"""Int8 templates: the NCHWc convolution and the dense of `autorelay.te.nn_int8`, int32 accumulators.

Both are the fp32 register tiles (`conv_nchwc.Conv2dNCHWcTemplate`, `dense.DenseTemplate`) with the
innermost reduction loop over a weight's channel group tensorized as an integer dot product
(`steps.Tensorize(stage, axis, "dot")`): per vector of int32 accumulators, one `vpdpbusd` with
AVX-512 VNNI, two `vpmaddwd` per group of 4 with AVX2, exact widening arithmetic elsewhere (the
code generator picks; see `autorelay.codegen.llvm.dot`). A convolution whose constant weight is
*narrow* (7-bit: the compute's `narrow` attribute, from `te.nn_int8.narrow_pairs`) takes the group
of 4 in one `vpmaddubsw` + `vpmaddwd` on AVX2 without VNNI (`Tensorize(..., "dot_narrow")`).
An input pixel's group of 4 bytes is broadcast once and serves every output block of the tile, a
weight vector of lanes x 4 bytes is loaded once and serves every pixel. Vector widths and register
counts come from the target.

`dot_group(target)` (re-exported here) is the group `g` an int8 weight layout must use.
"""

from __future__ import annotations

from autorelay.codegen.llvm.dot import dot_group, narrow_dot_available, native_group
from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.conv import _padded, _prologue, _width_tiles, nchwc_output_tile
from autorelay.target import Target
from autorelay.te.expr import Read
from autorelay.te.tensor import ComputeDef, Tensor
from autorelay.te.traverse import walk

__all__ = ["Conv2dNCHWcInt8Template", "DenseInt8Template", "dot_group"]


def _lanes(target: Target, width: int) -> int:
    """int32 lanes of a vector, no wider than the output block it covers."""
    return min(target.vector_lanes("int32"), width)


def _narrow(red: Tensor, target: Target, lanes: int) -> bool:
    """A weight the compute found 7-bit (`narrow` attr) on a target where that has a faster dot
    for `lanes` int32 (`vpmaddubsw`, no VNNI)."""
    return bool(red.op.attrs.get("narrow")) and narrow_dot_available(target, lanes)  # type: ignore[union-attr]


def _best_tile(rows: list[int], cols: list[int], per_col: int, regs: int, waste) -> tuple[int, int]:
    """(rows, cols) of the register tile with the most dot products per load that fits `regs`
    vector registers: rows x cols x per_col accumulators, cols x per_col weight vectors and one
    broadcast."""
    best = (0.0, rows[0], cols[0])
    for c in cols:
        for r in rows:
            if r * c * per_col + c * per_col + 1 > regs:
                continue
            score = r * c / (r + c) / waste(r, c)
            if score > best[0]:
                best = (score, r, c)
    return best[1], best[2]


def _weight_of(red: Tensor, ndim: int) -> str:
    """The input placeholder of `ndim` dimensions the reduction reads (the packed int8 weight)."""
    for n in walk(red.op.body):  # type: ignore[union-attr]
        if isinstance(n, Read) and n.tensor.is_placeholder and n.tensor.ndim == ndim:
            return n.tensor.name
    raise ScheduleError(f"{red.name}: no {ndim}-d weight input")


class Conv2dNCHWcInt8Template(Template):
    """Direct NCHWc int8 convolution: the register tile is `tile_ow` output pixels x
    `tile_oc_blocks` output channel blocks; the channel group of the weight is the dot. Knobs as
    the fp32 template's, plus `unroll_ci` (unroll the loop over a channel block's groups) and, where
    the fastest instruction takes pairs (vpmaddwd), `pairs`: re-pack the constant weight once at
    bind time so each pair of a group is one contiguous vector (no byte shuffles in the loop)."""

    name = "conv2d_nchwc_int8"
    tags = ("conv2d_nchwc_int8",)

    @staticmethod
    def _block_tiles(red: Tensor) -> list[int]:
        return [t for t in (1, 2, 3, 4) if red.shape[1] % t == 0]

    @staticmethod
    def _narrow_dot(red: Tensor, target: Target) -> bool:
        a = red.op.attrs  # type: ignore[union-attr]
        return a["group"] == 4 and _narrow(red, target, _lanes(target, a["oc_bn"]))

    @classmethod
    def _can_pair(cls, red: Tensor, target: Target) -> bool:
        g, ocb = red.op.attrs["group"], red.op.attrs["oc_bn"]  # type: ignore[union-attr]
        return native_group(target, _lanes(target, ocb)) == 2 and g > 2 and g % 2 == 0 \
            and not cls._narrow_dot(red, target)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        red = pattern(cdef).reduce
        assert red is not None
        knobs = [
            Knob("tile_ow", _width_tiles(red.shape[3], 16)),
            Knob("tile_oc_blocks", self._block_tiles(red)),
            Knob("reduce_order", ("c_hw_ci", "hw_c_ci")),
            Knob("unroll_kw", (0, 1)),
            Knob("unroll_ci", (0, 1)),
            Knob("pad", ("root", "inline") if _padded(cdef) else ("inline",)),
        ]
        if self._can_pair(red, target):
            knobs.append(Knob("pairs", (1, 0)))
        return Space(self.name, tuple(knobs))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        red = pattern(cdef).reduce
        assert red is not None
        ow, ocb = red.shape[3], red.op.attrs["oc_bn"]  # type: ignore[union-attr]
        nv = max(1, ocb // _lanes(target, ocb))
        tow, tb = _best_tile(_width_tiles(ow, 16), self._block_tiles(red), nv, target.vector_registers,
                             lambda r, c: tile_waste(ow, r))
        knobs: tuple = (("tile_ow", tow), ("tile_oc_blocks", tb), ("reduce_order", "c_hw_ci"),
                        ("unroll_kw", 1), ("unroll_ci", 1), ("pad", "root" if _padded(cdef) else "inline"))
        if self._can_pair(red, target):
            knobs += (("pairs", 1),)
        return Config(self.name, knobs)

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        red0 = pattern(cdef).reduce
        assert red0 is not None
        ocb = red0.op.attrs["oc_bn"]  # type: ignore[union-attr]
        lanes = _lanes(target, ocb)
        steps, out, acc, red = _prologue(cdef, config["pad"], lanes)
        icb, g = red.op.attrs["ic_bn"], red.op.attrs["group"]  # type: ignore[union-attr]
        _n, oc, _oh, ow, oci = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        rc, rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
        dot = g
        if config.as_dict().get("pairs"):
            # [O, C, KH, KW, icb/g, ocb, g] -> [O, C, KH, KW, icb/g, 1, g/2, ocb, 2]: lanes x 2 bytes
            # of one pair are contiguous, the vector vpmaddwd multiplies
            w = _weight_of(red, 7)
            steps = [S.Pack(w, 5, ocb, 7), S.Pack(w, 6, 2), *steps]
            dot = 2
        steps += nchwc_output_tile(cdef, out, acc, config["tile_oc_blocks"], config["tile_ow"])
        steps += [
            S.Split(acc, rc, icb),
            S.Split(acc, f"{rc}_i", g, f"{rc}_q", f"{rc}_g"),
            S.Split(acc, oci, lanes),
        ]
        group = (f"{rc}_q",)
        k = f"{rc}_g"
        if dot < g:
            steps.append(S.Split(acc, f"{rc}_g", dot, f"{rc}_p", f"{rc}_k"))
            group, k = (f"{rc}_q", f"{rc}_p"), f"{rc}_k"
        outer = (f"{rc}_o", rh, rw) if config["reduce_order"] == "c_hw_ci" else (rh, rw, f"{rc}_o")
        steps += [
            S.Reorder(acc, (*outer, *group, ow, oc, f"{oci}_o", k, f"{oci}_i")),
            S.Unroll(acc, ow),
            S.Unroll(acc, oc),
            S.Unroll(acc, f"{oci}_o"),
            S.Tensorize(acc, k, "dot_narrow" if self._narrow_dot(red, target) else "dot"),
            S.Vectorize(acc, f"{oci}_i"),
        ]
        if dot < g:
            steps.append(S.Unroll(acc, f"{rc}_p"))
        if config["unroll_ci"]:
            steps.append(S.Unroll(acc, f"{rc}_q"))
        if config["unroll_kw"]:
            steps.append(S.Unroll(acc, rw))
        ooci = pattern(cdef).output.op.axes[-1].name  # type: ignore[union-attr]  # the output's lanes
        steps += [S.Split(out, ooci, lanes), S.Vectorize(out, f"{ooci}_i")]
        return tuple(steps)


class DenseInt8Template(Template):
    """int8 dense `[M, K] x [N, K] -> int32 [M, N]`: the weight is packed once to
    `[N/NR, K/g, NR, g]` (K zero-padded to a multiple of g) so a k-group of NR output columns is
    one contiguous stream; the register tile is `tile_m` rows x `tile_n_vectors` vectors, each row's
    group of g data bytes broadcast, the group being the dot (g: the target's fastest instruction's
    group). Knobs: the tile, which block loop is outer (and parallel), unrolling the groups."""

    name = "dense_int8"
    tags = ("dense_int8",)

    @staticmethod
    def _shape(cdef: ComputeDef) -> tuple[Tensor, int, int, int]:
        red = pattern(cdef).reduce
        if red is None or red.op is None or len(red.shape) != 2:
            raise ScheduleError(f"{cdef.name}: the dense_int8 template needs a 2-d reduction")
        return red, red.shape[0], red.shape[1], red.op.reduce_axes[0].extent

    @staticmethod
    def _group(red: Tensor, target: Target) -> int:
        if _narrow(red, target, target.vector_lanes("int32")):
            return 4  # one vpmaddubsw + vpmaddwd per group of 4
        lanes = target.vector_lanes("int32")
        g = native_group(target, lanes)
        return g if g > 1 else dot_group(target)

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        _, m, n, _ = self._shape(cdef)
        lanes = target.vector_lanes("int32")
        return Space(self.name, (
            Knob("tile_m", [x for x in (1, 2, 3, 4, 5, 6, 8) if x <= max(m, 1)] or [1]),
            Knob("tile_n_vectors", [x for x in (1, 2, 3, 4, 6) if (x - 1) * lanes < n]),
            Knob("outer", ("n", "m")),
            Knob("unroll_k", (1, 2, 4)),
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        _, m, n, _ = self._shape(cdef)
        lanes = target.vector_lanes("int32")
        rows = [x for x in (8, 6, 4, 3, 2, 1) if x <= max(m, 1)]
        cols = [x for x in (4, 3, 2, 1) if (x - 1) * lanes < n]
        mr, nv = _best_tile(rows, cols, 1, target.vector_registers - 1,
                            lambda r, c: tile_waste(m, r) * tile_waste(n, c * lanes))
        return Config(self.name, (("tile_m", mr), ("tile_n_vectors", nv), ("outer", "n"), ("unroll_k", 4)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        red, _m, _n, k_ext = self._shape(cdef)
        pat = pattern(cdef)
        lanes = target.vector_lanes("int32")
        g = self._group(red, target)
        mr, nr, uk = config["tile_m"], config["tile_n_vectors"] * lanes, config["unroll_k"]
        weight = red.op.attrs["weight"]  # type: ignore[union-attr]
        out = pat.output.name
        k = red.op.reduce_axes[0].name  # type: ignore[union-attr]
        i, j = (a.name for a in pat.output.op.axes)  # type: ignore[union-attr]
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in pat.others]
        if pat.reduce is pat.output:
            steps.append(S.CacheWrite(out))
            acc = f"{out}_local"
        else:
            acc = red.name
        ai, aj = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        # K padded to a multiple of g (before packing: Pad reads the bare axis), then the weight
        # [N, K] -> [N/NR, K, NR] -> [N/NR, K/g, NR, g]
        pad = [S.Pad(red.name, k, g)] if k_ext % g else []
        steps[:0] = [*pad, S.Pack(weight, 0, nr), S.Pack(weight, 1, g)]
        steps += [S.Split(out, i, mr), S.Split(out, j, nr)]
        blocks = (f"{j}_o", f"{i}_o") if config["outer"] == "n" else (f"{i}_o", f"{j}_o")
        steps += [
            S.Reorder(out, (*blocks, f"{i}_i", f"{j}_i")),
            S.ComputeAt(acc, out, blocks[1]),
            S.Split(acc, aj, lanes),
            S.Split(acc, k, g, f"{k}_o", f"{k}_g"),
        ]
        order: tuple[str, ...] = (f"{k}_o",)
        if uk > 1:
            steps.append(S.Split(acc, f"{k}_o", uk, f"{k}_u", f"{k}_v"))
            order = (f"{k}_u", f"{k}_v")
        steps.append(S.Reorder(acc, (*order, ai, f"{aj}_o", f"{k}_g", f"{aj}_i")))
        if uk > 1:
            steps.append(S.Unroll(acc, f"{k}_v"))
        steps += [
            S.Unroll(acc, ai),
            S.Unroll(acc, f"{aj}_o"),
            S.Tensorize(acc, f"{k}_g", "dot_narrow" if _narrow(red, target, lanes) else "dot"),
            S.Vectorize(acc, f"{aj}_i"),
            S.Split(out, f"{j}_i", lanes, f"{j}_v", f"{j}_w"),
            S.Vectorize(out, f"{j}_w"),
            S.Parallel(out, blocks[0]),
        ]
        return tuple(steps)


register(Conv2dNCHWcInt8Template())
register(DenseInt8Template())
