"""Task extraction: the distinct fused kernels of a model, as tuning tasks the build will look up.

`extract_tasks(mod, params, target)` runs exactly what `autorelay.build` runs before lowering (bind
the weights, the named pipeline ending in FuseOps), lowers each fused primitive function called
from `@main`, and returns one `ModelTask` per distinct workload with how often it occurs and its
share of the model's FLOPs.

The one thing that must hold: a task's `key`, `workload` and `target_str` are the names
`autorelay.build` asks the tuning log about (`autorelay.lower.workload_key(fn)` and
`describe_workload(fn)`, and the tuning target via `BoundSource`), so whatever the tuner logs
under them is what the next build applies. A kernel-level `search.task.kernel_task` names its
workload by the compute alone; here the key is overridden with the build's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.codegen.llvm.target import Target
from autorelay.ir.expr import Call, Function, Op
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import post_order
from autorelay.lower import NoCompute, describe_workload, lower, workload_key
from autorelay.schedule.space import Config
from autorelay.utils.deep import deep
from search.task import Task, count_flops, kernel_task

# Injective kernels (copies, reshapes, elementwise chains left unfused) stream memory at bandwidth
# under the default schedule; trials spent there buy nothing measurable end to end.
UNTUNED_TEMPLATES = ("injective",)


@dataclass(eq=False)
class ModelTask(Task):
    """A kernel task that belongs to a model: how many times the kernel runs per inference and its
    share of the model's FLOPs (occurrences included), plus the fused ops it computes."""

    count: int = 1
    flop_share: float = 0.0
    ops: tuple[str, ...] = ()

    @property
    def total_flops(self) -> float:
        return self.flops * self.count


@dataclass
class Skipped:
    """A distinct fused kernel that got no task, and why (reported by `tune`, never silent)."""

    name: str
    key: str
    count: int
    reason: str


@dataclass
class Extraction:
    """All of `extract_all`'s answer: the tasks, the kernels left out, and the model's FLOPs."""

    tasks: list[ModelTask]
    skipped: list[Skipped]
    total_flops: float


def as_target(target: str | Target, threads: int = 1) -> Target:
    """The host LLVM target for `"llvm"` (or a Target), with `threads` kernel threads."""
    if isinstance(target, Target):
        return target.with_threads(threads)
    if not isinstance(target, str) or target.split()[:1] != ["llvm"]:
        raise ValueError(f"unsupported target {target!r}: only 'llvm' (the host CPU) can be tuned so far")
    return Target.host(threads)


def optimize(mod: IRModule, params: Mapping[str, np.ndarray] | None,
             pipeline: str | Any = "default") -> IRModule:
    """The IR `autorelay.build` lowers: weights bound as constants, then the named pipeline."""
    from autorelay.build_module import check_dataflow
    from autorelay.transform.bind import bind_params
    from autorelay.transform.pipelines import pipeline as named_pipeline

    check_dataflow(mod)
    if params:
        mod = bind_params(mod, params)
    pipe = named_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    return pipe(mod)


def _kernel_name(fn: Function) -> str:
    """Like the build report's step names: the fused ops' short names joined by '_'."""
    names = [n.op.name.split(".")[-1] for n in post_order(fn.body)
             if isinstance(n, Call) and isinstance(n.op, Op)]
    return "_".join(names) or "identity"


def _primitive_calls(mod: IRModule) -> list[Function]:
    """Every primitive function called from `@main`, in dependency order (repeats kept)."""
    return [n.op for n in post_order(mod["main"].body)
            if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive]


def _model_task(fn: Function, key: str, count: int, target: Target, name: str) -> ModelTask | str:
    """The task for one distinct primitive function, or the reason it has none."""
    try:
        lowered = lower(fn)
    except NoCompute as e:
        return f"no compute ({e}); runs through the NumPy references"
    cdef = lowered.cdef
    if len(cdef.outputs) != 1:
        return f"{len(cdef.outputs)} outputs: the build schedules each separately"
    try:
        base = kernel_task(cdef, target, name=name)
    except Exception as e:  # no template / space for this compute: the build uses its default
        return f"no schedule space ({type(e).__name__}: {e})"
    if base.template in UNTUNED_TEMPLATES:
        return f"template {base.template!r} is not tuned (memory-bound copy)"
    if len(base.space) <= 1:
        return f"template {base.template!r} has a single config for this shape"
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Task)
              if f.init and f.name != "_cache"}
    fields.update(key=key, workload=describe_workload(fn))
    ops = tuple(n.op.name for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op))
    return ModelTask(**fields, count=count, ops=ops)


@deep
def extract_all(
    mod: IRModule,
    params: Mapping[str, np.ndarray] | None = None,
    target: str | Target = "llvm",
    *,
    pipeline: str | Any = "default",
    threads: int = 1,
) -> Extraction:
    """Tasks plus the kernels left out (see `extract_tasks`)."""
    tgt = as_target(target, threads)
    fused = optimize(mod, params, pipeline)
    order: list[str] = []
    first: dict[str, Function] = {}
    counts: dict[str, int] = {}
    for fn in _primitive_calls(fused):
        key = workload_key(fn)
        if key not in first:
            first[key] = fn
            order.append(key)
        counts[key] = counts.get(key, 0) + 1
    tasks: list[ModelTask] = []
    skipped: list[Skipped] = []
    flops: dict[str, float] = {}
    for key in order:
        fn = first[key]
        name = f"t{len(tasks)}.{_kernel_name(fn)}"
        got = _model_task(fn, key, counts[key], tgt, name)
        if isinstance(got, str):
            skipped.append(Skipped(_kernel_name(fn), key, counts[key], got))
            try:
                flops[key] = count_flops(lower(fn).cdef)
            except NoCompute:
                flops[key] = 0.0
        else:
            tasks.append(got)
            flops[key] = got.flops
    total = sum(flops[k] * counts[k] for k in order)
    for t in tasks:
        t.flop_share = t.total_flops / total if total > 0 else 0.0
    return Extraction(tasks, skipped, total)


def extract_tasks(
    mod: IRModule,
    params: Mapping[str, np.ndarray] | None = None,
    target: str | Target = "llvm",
    *,
    pipeline: str | Any = "default",
    threads: int = 1,
) -> list[ModelTask]:
    """One task per distinct fused kernel of `mod` that has a tunable schedule template, in the
    order the model first runs them. Each task carries `count` (occurrences per inference) and
    `flop_share` (its FLOPs times `count`, over the FLOPs of every lowered kernel of the model).
    Use the same `pipeline` and `threads` as the later `build`: they change the kernels and the
    tuning target."""
    return extract_all(mod, params, target, pipeline=pipeline, threads=threads).tasks


class BoundSource:
    """The tuning log's schedule source for one tuning target, as `autorelay.build` consults it.

    `build` asks under its target's `tuning_name()`, the name measurements are filed under, so a
    plain `db.schedule_source(name)` works too (and, like it, gives a workload that `search.tune`
    re-measured the winner of those interleaved rounds: the log's `pick`). What this adapter
    adds is a check on transfers: given the model's `tasks`, a config transferred from a
    neighbouring workload must be a point of this workload's space — same template, same knobs,
    values it offers (a depthwise and a dense conv share the family `nn.conv2d` but not a
    schedule; a channel block of 64 means nothing to a 32-channel conv); otherwise the
    next-nearest donor is tried.
    """

    def __init__(self, db: Any, target_str: str, tasks: list[ModelTask] | None = None) -> None:
        self.db = db
        self.spaces = {t.key: t.space for t in tasks or []}
        self.source = db.schedule_source(target_str, validate=self._fits)

    def _fits(self, key: str, config: dict[str, Any]) -> bool:
        """Whether a donor's config is a point of this workload's space (same template, same
        knobs, every value one this workload's template offers)."""
        space = self.spaces.get(key)
        if space is None:
            return True
        try:
            space.index(Config.from_json(config))
        except (KeyError, ValueError, TypeError):
            return False
        return True

    def lookup(self, workload_key: str, target: str | None = None, *,
               workload: dict[str, Any] | None = None) -> dict[str, Any] | None:
        return self.source.lookup(workload_key, workload=workload)

    @property
    def last_lookup_kind(self) -> Any:
        return self.source.last_lookup_kind

    @property
    def counts(self) -> Any:
        return self.source.counts


__all__ = ["BoundSource", "Extraction", "ModelTask", "Skipped", "as_target", "extract_all", "extract_tasks",
           "optimize"]
