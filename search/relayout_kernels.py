"""One re-layout of a plan's graph as a kernel: its module, its tuning task, and its time.

A re-layout (`Relayout`: NCHW shape, from block, to block; block 0 is NCHW) is the single
`layout_transform` kernel a plan's build runs where two layers disagree on the layout of a
value. The layout program weighs one on every edge (`search.layout_costs`); a plan tune tunes
them into the log (`search.transform_tuning`).

Their seconds are kernel seconds, timed as the tuner times any candidate (`measure.jobs.
time_candidate`: on bound buffers, the first call checked against the reference), because the
layout program adds them to kernel times profiled inside the model's runs. Timing the built
module instead, a call per re-layout, counted a fresh output allocation and the call's overhead as
well: on MobileNet-v2's 40 re-layouts (Zen 3, 2 threads) that read mostly 1.4-3x the kernel's
time, and the re-layout of 192x28x28 that a plan's build ran took 70 us in place, its kernel 67 us
and the module's call 132 us.
"""

from __future__ import annotations

import shutil

from autorelay.ir.expr import Function, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.lower import lower, workload_key
from autorelay.op import registry
from autorelay.target import Target
from autorelay.transform.prepare import prepare
from search.extract import ModelTask, function_tasks, primitive_calls
from search.measure.jobs import TimingSettings, time_candidate
from search.measure.scratch import make_scratch_dir
from search.task import kernel_task

Relayout = tuple[tuple[int, ...], int, int]  # (NCHW shape, from block, to block; 0: NCHW)


def layout_name(block: int) -> str:
    return "NCHW" if block == 0 else f"NCHW{block}c"


def blocked_shape(shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    """The shape of an NCHW `shape` in NCHW{block}c (the block divides the channels)."""
    if block == 0:
        return shape
    n, c, h, w = shape
    return (n, c // block, h, w, block)


def transform_key(shape: tuple[int, ...], src: int, dst: int, target: Target) -> tuple:
    """How `Model.transforms` files the seconds of one re-layout on one target."""
    return (tuple(shape), src, dst, str(target))


def transform_label(edge: Relayout) -> str:
    """`relayout 1x96x56x56 NCHW->NCHW8c`: how reports name a re-layout."""
    shape, src, dst = edge
    return f"relayout {'x'.join(map(str, shape))} {layout_name(src)}->{layout_name(dst)}"


def transform_module(shape: tuple[int, ...], src: int, dst: int) -> IRModule:
    """The prepared module of one re-layout of a float tensor of NCHW `shape` from NCHW{src}c (0:
    NCHW) to NCHW{dst}c: a single `layout_transform` kernel, as a plan's build runs it between two
    layers."""
    x = Var("x", TensorType(blocked_shape(shape, src), "float32"))
    body = registry.call("layout_transform", x, src_layout=layout_name(src), dst_layout=layout_name(dst))
    return prepare(IRModule.from_expr(Function((x,), body)), {}, "default")


def _kernel_function(edge: Relayout) -> Function:
    """The primitive function of `transform_module`'s one kernel."""
    return primitive_calls(transform_module(*edge))[0]


def transform_task(edge: Relayout, target: Target) -> ModelTask | None:
    """The tuning task of one re-layout's kernel on `target` (its workload key is the one a plan's
    build of the same re-layout looks up), or None when its schedule space has a single config."""
    fn = _kernel_function(edge)
    got = function_tasks(fn, workload_key(fn), 1, target, transform_label(edge), untuned=())
    return None if isinstance(got, str) else got[0]


def transform_seconds(shape: tuple[int, ...], src: int, dst: int, target: Target, *,
                      memo: dict[tuple, float] | None = None) -> float:
    """Seconds per call of the re-layout kernel NCHW{src}c -> NCHW{dst}c (0: NCHW) of an NCHW
    `shape` (blocks already divisors of its channels) with its default schedule, timed in this
    process (see the module docstring); `memo` keeps the figures by `transform_key`. A plan tune
    fills the memo first with the log's re-measured picks (`search.transform_tuning`)."""
    if src == dst:
        return 0.0
    key = transform_key(shape, src, dst, target)
    memo = {} if memo is None else memo
    if key not in memo:
        edge = (tuple(shape), src, dst)
        # the template a build compiles it with, whether or not its space is worth tuning
        task = kernel_task(lower(_kernel_function(edge)).cdef, target, name=transform_label(edge))
        scratch = make_scratch_dir()
        try:
            got = time_candidate(task, task.default, scratch, TimingSettings(min_repeat_ms=5.0, repeat=7))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if not got.ok:
            raise RuntimeError(f"{task.name}: the default kernel failed ({got.error.value}: {got.message})")
        memo[key] = got.median
    return memo[key]


__all__ = ["Relayout", "blocked_shape", "layout_name", "transform_key", "transform_label", "transform_module",
           "transform_seconds", "transform_task"]
