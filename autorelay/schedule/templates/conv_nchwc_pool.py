"""A direct NCHW[x]c convolution with its max pooling as the epilogue (`FusionPlan.pool_epilogues`).

The kernel's output is the pooled map. A parallel unit is `pool_rows` rows of pooled output for
`tile_oc_blocks` channel blocks: it computes the band of convolution rows those windows read into
a buffer (`pool_rows` x stride + window - stride rows of the whole width, a few tens of KB), with
the convolution's register tile, the same knobs as `conv2d_nchwc`, and then pools the band while it
is in cache. The elementwise ops between the two (bias, ReLU) are inlined into the pooling's reads.
Separately, the convolution writes its whole map to memory and the pooling reads it back: for
VGG's first block that is a 12.8 MB round trip per inference. Overlapping windows (3x3 at stride
2) make neighbouring units compute their shared row twice; `pool_rows` trades that against fewer,
larger units.

The fusion only pairs a pooling whose windows lie inside its input (`op.pool.windows_inside`), so
the band never reaches outside the convolution's output and the pooling has no padding stage.
"""

from __future__ import annotations

from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import POOL_TAG, Template, conv_and_pool, register
from autorelay.schedule.templates.conv import root_pad_copy
from autorelay.schedule.templates.conv_nchwc import (
    default_register_tile,
    register_tile,
    register_tile_defaults,
    register_tile_knobs,
)
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor, topo_order

CONV_TAG = "conv2d_nchwc"
POOL_ROWS = (1, 2, 3, 4, 6, 8)  # besides the whole map where it has at most 16 pooled rows


def _pool_rows(pooled_rows: int) -> list[int]:
    """The pooled rows a unit may span: divisors of the map's, so every unit is whole (a ragged
    last unit would compute, and read the input for, rows past the map)."""
    whole = (pooled_rows,) if pooled_rows <= 16 else ()
    return sorted({r for r in (*POOL_ROWS, *whole) if pooled_rows % r == 0})


def band_rows(pool: Tensor, rows: int) -> int:
    """The convolution rows that `rows` rows of `pool`'s output read (its compute records its
    window and strides)."""
    window, stride = pool.op.attrs["pool_size"][0], pool.op.attrs["strides"][0]  # type: ignore[union-attr]
    return stride * (rows - 1) + window


def _dividing(band: int) -> list[int]:
    return [t for t in (1, 2, 3, 4) if band % t == 0]


def tile_rows(band: int, tile_oh: int) -> int:
    """The register tile's rows in a band: the most, up to `tile_oh`, that divide the band (a
    ragged last tile would compute rows no window reads)."""
    return max(r for r in _dividing(band) if r <= tile_oh)


class Conv2dNCHWcPoolTemplate(Template):
    """Direct NCHW[x]c convolution computed per band of rows and max-pooled from the cache (see the
    module docstring). Knobs: `conv2d_nchwc`'s register tile, reduction order, kernel-width unroll
    and padding, and the pooled rows of a parallel unit."""

    name = "conv2d_nchwc_pool"
    tags = (POOL_TAG,)

    def claims(self, cdef: ComputeDef) -> bool:
        return conv_and_pool(cdef, CONV_TAG) is not None

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        conv, pool = conv_and_pool(cdef, CONV_TAG)  # type: ignore[misc]
        knobs = register_tile_knobs(cdef, conv)
        return Space(self.name, (*knobs, Knob("pool_rows", _pool_rows(pool.shape[2]))))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The convolution's default register tile (`default_register_tile`) with rows that divide
        the band, and the most pooled rows per unit that still leave every thread four units:
        the band's buffer stays small, and fewer, larger units recompute fewer shared rows of
        overlapping windows. Among those, the band whose register tile holds the most pixels."""
        conv, pool = conv_and_pool(cdef, CONV_TAG)  # type: ignore[misc]
        tb = default_register_tile(conv, target)[0]
        channel_tiles = pool.shape[0] * pool.shape[1] // tb
        fits = [r for r in _pool_rows(pool.shape[2])
                if channel_tiles * (pool.shape[2] // r) >= 4 * target.threads] or [1]
        tiles = {r: default_register_tile(conv, target, _dividing(band_rows(pool, r)))
                 for r in fits}
        rows = max(fits, key=lambda r: (tiles[r][1] * tiles[r][2], r))
        _, tow, toh = tiles[rows]
        return Config(self.name, (*register_tile_defaults(cdef, tb, tow, toh), ("pool_rows", rows)))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        conv, pool = conv_and_pool(cdef, CONV_TAG)  # type: ignore[misc]
        lanes = min(target.vector_lanes(), conv.op.attrs["oc_bn"])  # type: ignore[union-attr]
        steps: list[S.Step] = []
        for t in topo_order([pool]):
            if t.op is None or t is conv or t is pool:
                continue
            padding = t.op.tag == "pad" and config["pad"] == "root"
            steps += root_pad_copy(t, lanes) if padding else [S.ComputeInline(t.name)]
        tb, rows = config["tile_oc_blocks"], config["pool_rows"]
        n, oc, ph, pw, oci = (a.name for a in pool.op.axes)  # type: ignore[union-attr]
        rh, rw = (a.name for a in pool.op.reduce_axes)  # type: ignore[union-attr]
        unit = f"{n}_{oc}_o_{ph}_o"
        steps += [
            S.CacheWrite(conv.name),  # before the band is attached: the register tile then is its producer
            S.Split(pool.name, oc, tb),
            S.Split(pool.name, ph, rows),
            S.Split(pool.name, oci, lanes),
            S.Reorder(pool.name, (n, f"{oc}_o", f"{ph}_o", f"{ph}_i", pw, f"{oc}_i", rh, rw, f"{oci}_o",
                                  f"{oci}_i")),
            S.Fuse(pool.name, n, f"{oc}_o"),
            S.Fuse(pool.name, f"{n}_{oc}_o", f"{ph}_o"),
            S.Parallel(pool.name, unit),
            S.Vectorize(pool.name, f"{oci}_i"),
            S.ComputeAt(conv.name, pool.name, unit),
        ]
        # the band is the convolution's output, copied out of a register tile computed per tile
        _cn, coc, oh, ow, coci = (a.name for a in conv.op.axes)  # type: ignore[union-attr]
        acc = f"{conv.name}_local"
        toh = tile_rows(band_rows(pool, rows), config["tile_oh"])
        steps += [
            S.Split(conv.name, oh, toh),
            S.Split(conv.name, ow, config["tile_ow"]),
            S.Split(conv.name, coci, lanes),
            S.Reorder(conv.name, (_cn, f"{oh}_o", f"{ow}_o", coc, f"{oh}_i", f"{ow}_i", f"{coci}_o",
                                  f"{coci}_i")),
            S.Vectorize(conv.name, f"{coci}_i"),
            S.ComputeAt(acc, conv.name, f"{ow}_o"),
        ]
        steps += register_tile(acc, conv, config, lanes, (oh, ow))
        return tuple(steps)


register(Conv2dNCHWcPoolTemplate())
