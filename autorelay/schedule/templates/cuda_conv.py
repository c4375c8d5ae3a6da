"""GPU direct convolution (target kind `cuda`): NCHW/OIHW `conv2d_nchw` computes, groups == 1.

Each thread accumulates a `tile_oc` x `tile_p` register tile: `tile_oc` output channels x
`tile_p` consecutive pixels of one output row (CacheWrite + ComputeAt at the innermost thread
loop, both tile loops unrolled, as in `cuda_dense`). The pixel tile runs along the row, not along
the fused rows x columns, because a ComputeAt region must be an interval in every axis: a tile of
the fused index would straddle rows and its `// OW` would mix the loops inside and outside the
thread loop. The row's tiles and the rows are fused into one index q instead, split over
threadIdx.x and blockIdx.x; output channels over threadIdx.y and blockIdx.y; the batch is
blockIdx.z. The reduction (input channels, kernel rows, kernel columns) is outermost in the
accumulator, so each input value loaded serves `tile_oc` channels and each weight `tile_p` pixels.

With `shared_ic` > 0 the input channels are tiled by it and the block's weight slab
[threads_y·tile_oc, shared_ic, KH, KW] is copied to shared memory by all the block's threads
between barriers (the threads of one threadIdx.y row all read the same weights); the input is read
through L1/L2 (a shared copy of it would need its region across fused rows, not an interval).
Padding and the epilogue (bias, relu, residual add) are inlined into the accumulator and the
copy-out respectively. Depthwise convolutions have their own tag and stay on `cuda_reduction`.
"""

from __future__ import annotations

from autorelay.errors import ScheduleError
from autorelay.schedule import steps as S
from autorelay.schedule.space import Config, Knob, Space
from autorelay.schedule.templates.base import Template, pattern, register, tile_waste
from autorelay.schedule.templates.cuda import check_threads, max_threads
from autorelay.schedule.templates.generic import _outer_fuse
from autorelay.target import Target
from autorelay.te.tensor import ComputeDef, Tensor

FILL_THREADS_PER_SM = 512  # resident threads per multiprocessor that hide latency well enough


def _conv(cdef: ComputeDef) -> Tensor:
    red = pattern(cdef).reduce
    if red is None or red.op is None or len(red.shape) != 4 or len(red.op.reduce_axes) != 3:
        raise ScheduleError(f"{cdef.name}: the cuda_conv2d template needs an NCHW conv2d stage")
    return red


def _dims(red: Tensor) -> tuple[int, int, int, int, int, int]:
    """(batch, output channels, output rows, output columns, input channels, kernel taps)."""
    n, oc, oh, ow = red.shape
    rc, rh, rw = red.op.reduce_axes  # type: ignore[union-attr]
    return n, oc, oh, ow, rc.extent, rh.extent * rw.extent


def _shared_ok(red: Tensor) -> bool:
    """A weight slab is an interval only for OIHW weights read at [f, rc, rh, rw]; a transposed
    convolution (IOHW, phase-dependent taps) reads its weight at indices that are not."""
    return "weight" in red.op.attrs and "weight_oc_axis" not in red.op.attrs  # type: ignore[union-attr]


def _registers(toc: int, tp: int) -> int:
    """A per-thread register bound, calibrated on ptxas (sm_80/sm_90): the PTX carries no
    .maxntid, so ptxas may spend up to ~100 registers on addressing and unrolled taps even for a
    1x1 tile, plus about two per accumulator. Blocks whose threads would need more registers than
    an SM's block may hold fail at launch, so `steps` refuses them (ScheduleError)."""
    return 2 * toc * tp + toc + tp + 96


class CudaConv2dTemplate(Template):
    """Knobs: threads_x / threads_y (the block), tile_oc / tile_p (the register tile), shared_ic
    (0: weights from global memory through L1; else the input-channel chunk of the shared weight
    slab), unroll_kw (unroll the kernel-column loop). Blocks beyond the target's threads or
    shared memory per block, or likely beyond its register file, are ScheduleErrors."""

    name = "cuda_conv2d"
    tags = ("conv2d_nchw",)
    kind = "cuda"

    def claims(self, cdef: ComputeDef) -> bool:
        """groups == 1 only: every output channel reads all input channels of its weight. A grouped
        transposed convolution shares the `conv2d_nchw` tag; its weight has C/groups output
        channels (depthwise computes have their own tag). Those stay on `cuda_reduction`."""
        red = pattern(cdef).reduce
        if red is None or red.op is None or len(red.shape) != 4 or len(red.op.reduce_axes) != 3:
            return False
        weight = next((t for t in cdef.inputs if t.name == red.op.attrs.get("weight")), None)
        return weight is not None and weight.shape[red.op.attrs.get("weight_oc_axis", 0)] == red.shape[1]

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        red = _conv(cdef)
        _, oc, _, ow, ic, _ = _dims(red)
        shared = [0] + ([c for c in (4, 8, 16) if c <= ic] if _shared_ok(red) else [])
        return Space(self.name, (
            Knob("threads_x", (8, 16, 32, 64)),
            Knob("threads_y", (1, 2, 4, 8, 16)),
            Knob("tile_oc", [t for t in (1, 2, 4, 8) if t == 1 or t <= oc]),
            Knob("tile_p", [t for t in (1, 2, 3, 4, 7, 8) if t == 1 or t <= ow]),
            Knob("shared_ic", shared),
            Knob("unroll_kw", (0, 1)),
        ))

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        """The best tile by multiply-adds per load (toc·tp / (toc + tp)), divided by the work ragged
        tiles waste, times how well the grid fills the GPU (threads against FILL_THREADS_PER_SM per
        multiprocessor, blocks against the target's multiprocessors): big layers and batches get
        up to 32 accumulators, batch-1 late layers 1-2 per thread so that their few outputs still
        spread over every multiprocessor."""
        red = _conv(cdef)
        n, oc, oh, ow, ic, taps = _dims(red)
        space = self.space(cdef, target)
        sms = target.multiprocessors
        best: tuple[float, int, int, int, int] | None = None
        for tx in (32, 16, 64, 8):
            for ty in (8, 4, 2, 16, 1):
                for toc in space.knob("tile_oc").values:
                    for tp in space.knob("tile_p").values:
                        threads = tx * ty
                        if not 64 <= threads <= min(256, max_threads(target)) or toc * tp > 32:
                            continue
                        q = oh * -(-ow // tp)
                        blocks = n * -(-oc // (ty * toc)) * -(-q // tx)
                        waste = tile_waste(oc, ty * toc) * tile_waste(q, tx) * tile_waste(ow, tp)
                        fill = (min(1.0, blocks * threads / waste / (FILL_THREADS_PER_SM * sms))
                                * min(1.0, blocks / sms))
                        score = toc * tp / (toc + tp) / waste * fill
                        if best is None or score > best[0] * 1.0001:
                            best = (score, tx, ty, toc, tp)
        assert best is not None
        _, tx, ty, toc, tp = best
        q = oh * -(-ow // tp)
        # a barrier needs every thread of the block in the loop nest; small slabs are not worth it
        full = oc % (ty * toc) == 0 and q >= tx and _shared_ok(red)
        chunk = max((c for c in space.knob("shared_ic").values if c and ic % c == 0), default=0)
        shared = chunk if full and ty * toc >= 8 else 0
        return Config(self.name, (("threads_x", tx), ("threads_y", ty), ("tile_oc", toc), ("tile_p", tp),
                                  ("shared_ic", shared), ("unroll_kw", int(taps <= 9))))

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[S.Step, ...]:
        self.check(config)
        tx, ty, toc, tp = (config[k] for k in ("threads_x", "threads_y", "tile_oc", "tile_p"))
        check_threads(self.name, tx * ty, target, f"{tx}x{ty}")
        if _registers(toc, tp) * tx * ty > target.registers_per_block:
            raise ScheduleError(f"{self.name}: a {toc}x{tp} register tile in {tx}x{ty} threads needs "
                                f"more than the target's {target.registers_per_block} registers per block")
        pat = pattern(cdef)
        red = _conv(cdef)
        out = pat.output.name
        steps: list[S.Step] = [S.ComputeInline(t.name) for t in pat.others]  # padding, epilogue
        if red is pat.output:
            steps.append(S.CacheWrite(out))
            acc = f"{out}_local"
        else:
            acc = red.name
        on, of, oy, ox = (a.name for a in pat.output.op.axes)  # type: ignore[union-attr]
        steps += [S.Split(out, ox, tp, "x.o", "x.r"), S.Fuse(out, oy, "x.o", "q"),
                  S.Split(out, "q", tx, "q.b", "q.t"),
                  S.Split(out, of, ty * toc, "f.b", "f.in"), S.Split(out, "f.in", toc, "f.t", "f.r"),
                  S.Reorder(out, (on, "f.b", "q.b", "f.t", "q.t", "f.r", "x.r")),
                  S.Bind(out, on, "blockIdx.z"), S.Bind(out, "f.b", "blockIdx.y"),
                  S.Bind(out, "q.b", "blockIdx.x"), S.Bind(out, "f.t", "threadIdx.y"),
                  S.Bind(out, "q.t", "threadIdx.x"),
                  S.ComputeAt(acc, out, "q.t"), S.Unroll(out, "f.r"), S.Unroll(out, "x.r")]
        an, af, ay, ax = (a.name for a in red.op.axes)  # type: ignore[union-attr]
        rc, rh, rw = (a.name for a in red.op.reduce_axes)  # type: ignore[union-attr]
        chunk = config["shared_ic"]
        channels = ["rc.s", "rc.in"] if chunk else [rc]
        if chunk:
            steps.append(S.Split(acc, rc, chunk, "rc.s", "rc.in"))
        steps += [S.Reorder(acc, (an, ay, *channels, rh, rw, af, ax)), S.Unroll(acc, af), S.Unroll(acc, ax)]
        if config["unroll_kw"]:
            steps.append(S.Unroll(acc, rw))
        if chunk:
            steps += _weight_copy(red.op.attrs["weight"], acc, tx, ty)  # type: ignore[union-attr]
        return tuple(steps)


def _weight_copy(weight: str, acc: str, tx: int, ty: int) -> list[S.Step]:
    """The block's weight slab into shared memory once per `rc.s` iteration, copied by all
    tx x ty threads (consecutive threads, consecutive elements: coalesced)."""
    copy = f"{weight}_shared"
    fs, ax = _outer_fuse(copy, [f"ax{d}" for d in range(4)])
    assert ax is not None
    return [S.CacheRead(weight, (acc,)), S.ComputeAt(copy, acc, "rc.s"), *fs,
            S.Split(copy, ax, tx, "c.o", "c.x"), S.Split(copy, "c.o", ty, "c.oo", "c.y"),
            S.Bind(copy, "c.x", "threadIdx.x"), S.Bind(copy, "c.y", "threadIdx.y")]


register(CudaConv2dTemplate())
