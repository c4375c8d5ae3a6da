"""Schedule steps: small frozen values. A schedule is a tuple of them, applied in order.

Stages are named by their tensor's name, axes by the compute's lambda parameter names (and the
names that Split/Fuse give their results). Steps are plain data so that heuristics, tuners, the
tuning log and tests share them; `to_json`/`from_json` round-trip a step exactly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Split:
    """Split `axis` into `outer` x `inner` (inner has `factor` iterations; a ragged tail is guarded).

    `shift_tail`: instead of guarding a ragged last tile, shift it back to end where the axis ends
    (it overlaps the previous tile and computes those points again), so every tile is full and
    guard-free. Only for data-parallel axes whose points are written once with their final value;
    lowering refuses it on reduction axes and on stages that accumulate into their output."""

    stage: str
    axis: str
    factor: int
    outer: str = ""
    inner: str = ""
    shift_tail: bool = False

    @property
    def outer_name(self) -> str:
        return self.outer or f"{self.axis}_o"

    @property
    def inner_name(self) -> str:
        return self.inner or f"{self.axis}_i"


@dataclass(frozen=True)
class Reorder:
    """Put the named leaf axes, in this order, into the positions they currently occupy."""

    stage: str
    order: tuple[str, ...]


@dataclass(frozen=True)
class Fuse:
    """Fuse two adjacent axes (outer directly before inner) into one."""

    stage: str
    outer: str
    inner: str
    name: str = ""

    @property
    def fused_name(self) -> str:
        return self.name or f"{self.outer}_{self.inner}"


@dataclass(frozen=True)
class Vectorize:
    stage: str
    axis: str


@dataclass(frozen=True)
class Unroll:
    stage: str
    axis: str


@dataclass(frozen=True)
class Parallel:
    stage: str
    axis: str


@dataclass(frozen=True)
class Bind:
    """Bind a data-parallel loop to a GPU index: `thread` is one of blockIdx.{x,y,z} or
    threadIdx.{x,y,z}. The loop disappears from the kernel; each block or thread runs one
    iteration (see `autorelay.tir.nodes.BLOCK_TAGS`)."""

    stage: str
    axis: str
    thread: str


@dataclass(frozen=True)
class CacheRead:
    """Read input `tensor` in the stages `readers` through a copy in GPU `scope` memory ("shared"):
    a new stage `<tensor>_<scope>`, to be computed at a loop of a reader (ComputeAt) — the region
    that loop's block needs, filled cooperatively by its threads, with barriers around it."""

    tensor: str
    readers: tuple[str, ...]
    scope: str = "shared"


@dataclass(frozen=True)
class CacheWrite:
    """Compute `stage` into a new local stage `<stage>_local` (register accumulators); `stage`
    becomes a copy-out that keeps the name, so later steps on `stage` schedule the copy."""

    stage: str


@dataclass(frozen=True)
class ComputeAt:
    """Compute `stage` inside `target`'s loop `axis`, only the region that iteration needs."""

    stage: str
    target: str
    axis: str


@dataclass(frozen=True)
class ComputeInline:
    """Substitute an injective stage's expression into its consumers."""

    stage: str


@dataclass(frozen=True)
class Pack:
    """Re-layout an input placeholder once at bind time: dimension `axis` is split by `factor`
    (zero-padded to a multiple) and the inner part becomes a new dimension at `position`
    (default: last). Meant for constant inputs such as weights."""

    tensor: str
    axis: int
    factor: int
    position: int = -1


@dataclass(frozen=True)
class Tensorize:
    """Compute reduction loop `axis` with one instruction of `intrinsic` per vector. "dot": the
    axis (extent g, typically an 8-bit weight layout's channel group) sits directly outside the
    stage's vectorized loop, and each vector of int32 accumulators takes `sum_k a[k] * b[lane, k]`
    in one integer dot-product instruction the code generator picks from the target (VNNI
    `vpdpbusd`, `vpmaddwd`, or exact widening arithmetic; see `autorelay.codegen.llvm.dot`). With
    bf16 operands (`bf16_to_f32` of uint16 words, float32 accumulators, g = 2) it is `vdpbf16ps`
    where the target has AVX512-BF16, two multiply-adds elsewhere. "dot_narrow": the same, and the
    schedule promises unsigned lane-invariant bytes and per-lane signed bytes whose adjacent pairs
    sum to at most 128 in magnitude (a template checks the constant weight), so on AVX2 without
    VNNI one `vpmaddubsw` + `vpmaddwd` takes a group of 4 exactly.
    Semantically the loop stays a serial reduction loop: a body the instruction cannot express
    (a guard inside it) is emitted as one."""

    stage: str
    axis: str
    intrinsic: str = "dot"


@dataclass(frozen=True)
class CrossThreadReduce:
    """Compute reduction stage `stage` with a block of `threads` GPU threads per output element
    (`threads` a power of two, 32..1024), instead of one thread reducing it alone: each thread
    folds a strided slice of the reduction into a register, then the block combines the partials
    in shared memory by a tree between barriers, and thread 0 stores the result. The stage keeps
    its root loops (no other step on it); its output elements are spread over blockIdx.x. For
    long reductions with few outputs, where one thread per output leaves most of a GPU idle.
    `warp` > 0 (the target's warp size, which templates fill in) combines within each warp of
    that many lanes by warp shuffles instead, with shared memory only for the per-warp partials;
    0 keeps the shared-memory tree throughout. See `autorelay.schedule.cross_thread`."""

    stage: str
    threads: int
    warp: int = 0


@dataclass(frozen=True)
class Pad:
    """Round the reduction axis `axis` of a sum stage up to a multiple of `multiple`, zero-padding
    every input it indexes, so that splits of it need no guard in the inner loop."""

    stage: str
    axis: str
    multiple: int


@dataclass(frozen=True)
class ImplicitGemm:
    """Compute the NCHW/OIHW convolution stage `stage` as a GEMM over flat axes: M = output
    channels, N = batch x output pixels, K = input channels x kernel taps. Adds the stages
    `<stage>_gemm` (axes m, p; reduction k: the accumulators), `<stage>_wt` (the weight as [M, K],
    axes m, k) and `<stage>_col` (the im2col matrix [K, N], axes k, p, padding as its guard); the
    two operand stages live in shared memory and must be computed at a loop of `<stage>_gemm`
    (ComputeAt), so only their tiles exist, never the whole matrix. `stage` becomes the view
    `stage[n, f, y, x] = <stage>_gemm[f, (n·OH + y)·OW + x]`, inlinable into its consumer. Must come
    before any other step on `stage`. See `autorelay.schedule.implicit_gemm`."""

    stage: str


Step = (
    Split
    | Reorder
    | Fuse
    | Vectorize
    | Unroll
    | Parallel
    | Bind
    | CacheRead
    | CacheWrite
    | ComputeAt
    | ComputeInline
    | Pack
    | Pad
    | Tensorize
    | CrossThreadReduce
    | ImplicitGemm
)
STEP_TYPES: dict[str, type] = {
    c.__name__: c
    for c in (
        Split,
        Reorder,
        Fuse,
        Vectorize,
        Unroll,
        Parallel,
        Bind,
        CacheRead,
        CacheWrite,
        ComputeAt,
        ComputeInline,
        Pack,
        Pad,
        Tensorize,
        CrossThreadReduce,
        ImplicitGemm,
    )
}


def to_json(step: Step) -> dict[str, Any]:
    d: dict[str, Any] = {"step": type(step).__name__}
    for f in dataclasses.fields(step):
        v = getattr(step, f.name)
        d[f.name] = list(v) if isinstance(v, tuple) else v
    return d


def from_json(d: dict[str, Any]) -> Step:
    d = dict(d)
    name = d.pop("step", None)
    if name not in STEP_TYPES:
        raise ValueError(f"unknown schedule step {name!r} (known: {', '.join(STEP_TYPES)})")
    cls = STEP_TYPES[name]
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    return cls(**kwargs)
