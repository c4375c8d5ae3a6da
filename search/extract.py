"""Task extraction: the distinct fused kernels of a model, as tuning tasks the build will look up.

`extract_tasks(mod, params, target)` runs exactly what `autorelay.build` runs before lowering (bind
the weights, the named pipeline ending in FuseOps), lowers each fused primitive function called
from `@main`, and returns one `ModelTask` per distinct workload with how often it occurs and its
share of the model's FLOPs.

The one thing that must hold: a task's `key`, `workload` and `str(target)` are the names
`autorelay.build` asks the tuning log about (`autorelay.lower.workload_key(fn)` and
`describe_workload(fn)`, and the canonical target string), so whatever the tuner logs under them is
what the next build applies. `extract_prepared` reads a module `autorelay.transform.prepare` has
already prepared, so a tuning run prepares its model once and builds from the same module.
A kernel-level `search.task.kernel_task` names its
workload by the compute alone; here the key is overridden with the build's.

Alternatives: a workload that several templates schedule (`template_choices`: a conv2d on cuda as
the direct `cuda_conv2d` and as the implicit GEMM `cuda_conv2d_igemm`) becomes one task per
template, all under the workload's one key — the build looks configs up by key and applies the
logged best whichever template it belongs to. Each alternative carries its workload's `count` and
`flop_share` (what the kernel is in the model, whichever template runs it), so a sum over tasks
must go over distinct keys (`workload_share`) and the task scheduler groups tasks by key: one
workload's alternatives compete for that workload's share of the budget, never add to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorelay.build_module import check_dataflow
from autorelay.codegen import resolve_target
from autorelay.errors import ScheduleError
from autorelay.ir.expr import Call, Function, Op
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import post_order
from autorelay.lower import NoCompute, describe_workload, lower, workload_key
from autorelay.primitive import kernel_name
from autorelay.runtime.views import is_view_function
from autorelay.schedule.space import Config
from autorelay.schedule.templates import check_in_space, template_choices
from autorelay.target import Target, TargetError
from autorelay.te.tensor import ComputeDef
from autorelay.transform.pass_memo import PassMemo
from autorelay.transform.prepare import prepare
from autorelay.utils.deep import deep
from search.task import Task, count_flops, kernel_task

# Injective kernels (copies, reshapes, elementwise chains left unfused) stream memory at bandwidth
# under the default schedule; trials spent there buy nothing measurable end to end.
UNTUNED_TEMPLATES = ("injective",)


@dataclass(eq=False)
class ModelTask(Task):
    """A kernel task that belongs to a model: how many times the kernel runs per inference and its
    share of the model's FLOPs (occurrences included), plus the fused ops it computes. Alternative
    templates of one workload are tasks with the same `key`, `count` and `flop_share`."""

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


def optimize(mod: IRModule, params: Mapping[str, np.ndarray] | None,
             pipeline: str | Any = "default", memo: PassMemo | None = None) -> IRModule:
    """The IR `autorelay.build` lowers for a dataflow model: `autorelay.transform.prepare` (with
    `memo`, sharing passes with the model's other preparations)."""
    check_dataflow(mod)
    return prepare(mod, params, pipeline, memo=memo)


def primitive_calls(mod: IRModule) -> list[Function]:
    """Every primitive function called from `@main`, in dependency order (repeats kept)."""
    return [n.op for n in primitive_call_sites(mod)]  # type: ignore[misc]


def primitive_call_sites(mod: IRModule) -> list[Call]:
    """The calls of primitive functions in `@main`, in dependency order."""
    return [n for n in post_order(mod["main"].body)
            if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive]


def function_tasks(fn: Function, key: str, count: int, target: Target, name: str, *,
                   untuned: tuple[str, ...] = UNTUNED_TEMPLATES) -> list[ModelTask] | str:
    """The tasks for one distinct primitive function, one per template that schedules it (named
    `name`, suffixed `@template` where there are several), or the reason it has none: the reason
    of the first template (the build's default), as when only that one was tried. `untuned`: the
    templates a model's tune leaves at their defaults (a layout search tunes the re-layouts it
    weighs: `search.transform_tuning`)."""
    if is_view_function(fn):
        return "a view of its input (reshape-like): the executor runs no kernel for it"
    try:
        lowered = lower(fn)
    except NoCompute as e:
        return f"no compute ({e}); runs through the NumPy references"
    cdef = lowered.cdef
    if len(cdef.outputs) != 1:
        return f"{len(cdef.outputs)} outputs: the build schedules each separately"
    try:
        choices = template_choices(cdef, target)
    except Exception as e:  # no template claims this compute: the build uses its default steps
        return f"no schedule space ({type(e).__name__}: {e})"
    tasks: list[ModelTask] = []
    first_reason = ""
    for template in choices:
        got = _template_task(cdef, fn, key, count, target, name, template, untuned)
        if isinstance(got, str):
            first_reason = first_reason or got
        else:
            tasks.append(got)
    if len(tasks) > 1:
        for t in tasks:
            t.name = f"{name}@{t.template}"
    return tasks or first_reason


def _template_task(cdef: ComputeDef, fn: Function, key: str, count: int, target: Target, name: str,
                   template: str, untuned: tuple[str, ...]) -> ModelTask | str:
    """The task of `cdef` under one template, or why that template is not tuned for it."""
    try:
        base = kernel_task(cdef, target, name=name, template=template)
    except Exception as e:  # no space for this compute: the build uses its default
        return f"no schedule space ({type(e).__name__}: {e})"
    if base.template in untuned:
        return f"template {base.template!r} is not tuned (memory-bound copy)"
    if len(base.space) <= 1:
        return f"template {base.template!r} has a single config for this shape"
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Task)
              if f.init and f.name != "_cache"}
    fields.update(key=key, workload=describe_workload(fn))
    ops = tuple(n.op.name for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op))
    return ModelTask(**fields, count=count, ops=ops)


def workload_share(tasks: list[ModelTask]) -> float:
    """The model's FLOP share the tasks cover, each workload once (its alternatives share it)."""
    return sum({t.key: t.flop_share for t in tasks}.values())


@deep
def extract_all(
    mod: IRModule,
    params: Mapping[str, np.ndarray] | None = None,
    target: str | Target = "llvm",
    *,
    pipeline: str | Any = "default",
    threads: int | None = None,
) -> Extraction:
    """Tasks plus the kernels left out (see `extract_tasks`)."""
    return extract_prepared(optimize(mod, params, pipeline), resolve_target(target, threads))


def extract_prepared(fused: IRModule, target: Target) -> Extraction:
    """`extract_all` of a module that is already prepared (weights bound, pipeline run)."""
    if target.kind not in ("cpu", "cuda"):
        raise TargetError(f"tuning models for {str(target).split()[0]} targets is not supported yet; "
                          "tune with an llvm or cuda target")
    order: list[str] = []
    first: dict[str, Function] = {}
    counts: dict[str, int] = {}
    for fn in primitive_calls(fused):
        key = workload_key(fn)
        if key not in first:
            first[key] = fn
            order.append(key)
        counts[key] = counts.get(key, 0) + 1
    tasks: list[ModelTask] = []
    skipped: list[Skipped] = []
    flops: dict[str, float] = {}
    tuned = 0  # workloads with tasks: the `t<n>` of their names
    for key in order:
        fn = first[key]
        name = f"t{tuned}.{kernel_name(fn)}"
        got = function_tasks(fn, key, counts[key], target, name)
        if isinstance(got, str):
            skipped.append(Skipped(kernel_name(fn), key, counts[key], got))
            try:
                flops[key] = count_flops(lower(fn).cdef)
            except NoCompute:
                flops[key] = 0.0
        else:
            tuned += 1
            tasks.extend(got)
            flops[key] = got[0].flops
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
    threads: int | None = None,
) -> list[ModelTask]:
    """One task per distinct fused kernel of `mod` that has a tunable schedule template, in the
    order the model first runs them. Each task carries `count` (occurrences per inference) and
    `flop_share` (its FLOPs times `count`, over the FLOPs of every lowered kernel of the model).
    Use the same `pipeline` and `threads` as the later `build`: they change the kernels and the
    tuning target."""
    return extract_all(mod, params, target, pipeline=pipeline, threads=threads).tasks


class BoundSource:
    """The tuning log's schedule source as `autorelay.build` consults it for one model, with a check
    on transfers: given the model's `tasks`, a config transferred from a neighbouring workload must
    be a point of this workload's space under the config's own template — a template that
    schedules this workload (a depthwise and a dense conv share the family `nn.conv2d` but not a
    schedule), same knobs, values its space offers here (a channel block of 64 means nothing to a
    32-channel conv); otherwise the next-nearest donor is tried. A workload with alternative
    templates accepts a donor config of any of them. Lookups go to the log under the target the
    build asks about (`tuning_db.source.ScheduleSource`).
    """

    def __init__(self, db: Any, target: str | Target, tasks: list[ModelTask] | None = None) -> None:
        self.db = db
        self.spaces = {(t.key, t.template): t.space for t in tasks or []}
        # a template with no task here (one config for this shape) is checked on the compute itself
        self.computes = {t.key: (t.cdef, t.target) for t in tasks or []}
        self.source = db.schedule_source(str(target), validate=self._fits)

    def _fits(self, key: str, config: dict[str, Any]) -> bool:
        """Whether a donor's config is a point of this workload's space under its own template."""
        if key not in self.computes:
            return True  # not a kernel of this model: nothing to check against
        try:
            cfg = Config.from_json(config)
            space = self.spaces.get((key, cfg.template))
            if space is not None:
                space.index(cfg)
            else:  # also refuses a template that does not schedule this workload
                cdef, target = self.computes[key]
                check_in_space(cdef, cfg, target)
        except (KeyError, ValueError, TypeError, ScheduleError):
            return False
        return True

    def lookup(self, workload_key: str, target: str | None = None, *,
               workload: dict[str, Any] | None = None) -> Any:
        return self.source.lookup(workload_key, target, workload=workload)

    def pipeline_for(self, model_key: str, target: str | None = None) -> str | None:
        return self.source.pipeline_for(model_key, target)

    def layout_plan_for(self, model_key: str, target: str | None = None) -> dict[str, Any] | None:
        return self.source.layout_plan_for(model_key, target)

    @property
    def counts(self) -> Any:
        return self.source.counts


__all__ = ["BoundSource", "Extraction", "ModelTask", "Skipped", "extract_all", "extract_prepared",
           "extract_tasks", "function_tasks", "optimize", "primitive_call_sites", "primitive_calls",
           "workload_share"]
