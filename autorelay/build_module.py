"""`autorelay.build` (this module is `build_module` so that the name `autorelay.build` stays the
function): the one place that composes passes, fusion, lowering, schedule choice, codegen and the
runtime.

    exe = autorelay.build(mod, target="llvm", params=params, schedules=source)
    out = exe(data)                      # or exe.run(data=data)
    print(exe.profile())                 # every kernel: workload key, config source, time share

Order of work: resolve the target (`autorelay.codegen.resolve_target`); pick the pipeline (the one
given, else the one the schedule source logged for this model, else `default`); prepare the module
once (`autorelay.transform.prepare`: bind `params` as constants so weight folding sees them, push
invariant weights into recursive globals, run the pipeline ending in FuseOps); then hand it to the
executor: the graph executor for dataflow programs, the VM (or AoT) for control flow. Every executor
turns each fused primitive function into kernels with `autorelay.primitive.compile_primitive` (the
one schedule choice, the one compile seam); a function whose ops lack computes — or whose kernel
cannot be scheduled — runs the ops' NumPy references, marked "fallback" in the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autorelay.codegen import resolve_target
from autorelay.errors import BuildError
from autorelay.graph_builder import GraphBuilder
from autorelay.ir.expr import (
    Constructor,
    Function,
    GlobalVar,
    If,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
)
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import post_order
from autorelay.lower import model_key
from autorelay.op.dynamic import VALUE_ARGS as DYNAMIC_OPS
from autorelay.primitive import KernelMemo
from autorelay.runtime import aot, vm
from autorelay.runtime.executable import Executable, KernelArtifact
from autorelay.runtime.fallback import ReferenceFunction
from autorelay.runtime.specializing import SpecializingExecutable
from autorelay.schedule.source import PipelineSource, ScheduleSource
from autorelay.target import Target, TargetError, parse_target
from autorelay.transform.bind_shapes import bind_shapes, dynamic_inputs
from autorelay.transform.layout_plan import logged_plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import default_pipeline
from autorelay.transform.prepare import prepare
from autorelay.utils.deep import deep


def control_flow_reason(mod: IRModule, entry: str = "main") -> str | None:
    """Why @entry needs the VM (control flow, recursion, closures, ADTs, refs, dynamic ops whose output
    shapes are run-time values), or None for dataflow the graph executor can plan statically."""
    others = sorted(g.name_hint for g in mod.functions if g.name_hint != entry)
    fn = mod[entry]
    for node in post_order(fn.body):
        bad = None
        if isinstance(node, If | Match):
            bad = f"control flow ({type(node).__name__})"
        elif isinstance(node, Constructor):
            bad = f"an ADT constructor ({node.name})"
        elif isinstance(node, RefCreate | RefRead | RefWrite):
            bad = "references"
        elif isinstance(node, GlobalVar):
            bad = f"a call of the global function @{node.name_hint}"
        elif isinstance(node, Function) and not node.is_primitive:
            bad = "a closure (nested function)"
        elif isinstance(node, Op) and node.name in DYNAMIC_OPS:
            bad = (f"the dynamic op {node.name} (its output shape or value depends on run-time shapes, so "
                   "its kernels are compiled per shape)")
        if bad is not None:
            extra = f"; module also defines {', '.join('@' + o for o in others)}" if others else ""
            return f"@{entry} uses {bad}{extra}"
    return None


def check_dataflow(mod: IRModule, entry: str = "main") -> None:
    """Raise BuildError when the program needs the VM rather than the graph executor."""
    reason = control_flow_reason(mod, entry)
    if reason is not None:
        raise BuildError(f"build: {reason}; the graph executor runs dataflow programs only "
                         f"(use executor='vm' or 'auto')")


def choose_pipeline(mod: IRModule, schedules: ScheduleSource | None, target: Target,
                    pipeline: str | Pipeline | None) -> str | Pipeline:
    """The pipeline to build with: the one given, else the one the schedule source logged for this
    model on this target (what `autorelay tune --pipeline auto` picked), else the target kind's
    default (`default`; `gpu` for cuda)."""
    if pipeline is not None:
        return pipeline
    if isinstance(schedules, PipelineSource):
        logged = schedules.pipeline_for(model_key(mod), str(target))
        if logged == "plan":
            return logged_plan_pipeline(mod, schedules, str(target))
        if logged is not None:
            return logged
    return default_pipeline(target.kind)


@deep
def build(
    mod: IRModule | Function,
    target: str | Target = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    schedules: ScheduleSource | None = None,
    pipeline: str | Pipeline | None = None,
    *,
    threads: int | None = None,
    executor: str = "auto",
    shapes: Mapping[str, Sequence[int]] | None = None,
    max_builds: int = 8,
    device_schedules: ScheduleSource | None = None,
) -> Any:
    """Compile a model into an executable (see the module docstring).

    `executor`: "graph" (dataflow programs: the static-memory graph executor), "vm" (control flow,
    closures, recursion, ADTs), "aot" (first-order loops compiled to native code), or "auto"
    (graph for dataflow, otherwise the VM).

    `target`: a target string (``llvm``, ``llvm -mcpu=znver3 -threads=2``) or `Target`.
    `schedules`: a `ScheduleSource` (e.g. `tuning_db.open().schedule_source("llvm")`) or None for
    heuristic defaults. `pipeline`: a name (`autorelay.transform.PIPELINES`), a Pipeline value, or
    None for the one the source logged for this model (else `default`). `threads`: kernel threads
    (default: the target string's `-threads=`, else every core of this machine; the VM and AoT run
    one thread unless told otherwise, since their fused kernel blocks are single-threaded).

    `target="vta"` (or ``vta -config=hw.json``): the model's offloadable int8 layers run on the
    simulated accelerator and the rest on the host CPU (`autorelay.vta.build`); `schedules` is then
    the host's source and `device_schedules` the accelerator layers' (opened for its target).

    Dynamic input shapes (`Tensor[(batch, 3, 224, 224), float32]`): `shapes={"x": (4, 3, 224, 224)}`
    fixes them for one static build; without `shapes` a dataflow model becomes a
    `SpecializingExecutable` that builds once per concrete input shape on first sight and keeps the
    `max_builds` most recently used.
    """
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if isinstance(target, str) and parse_target(target).kind == "vta":
        from autorelay.vta.build import build_for_accelerator

        return build_for_accelerator(mod, parse_target(target), params, schedules, pipeline, threads=threads,
                                     executor=executor, shapes=shapes, device_schedules=device_schedules)
    if executor not in ("auto", "graph", "vm", "aot"):
        raise BuildError(f"build: unknown executor {executor!r}; use auto, graph, vm or aot")
    if executor == "auto":
        executor = "graph" if control_flow_reason(mod) is None else "vm"
    if executor == "graph":
        check_dataflow(mod)
    serial = executor != "graph" and threads is None and "-threads=" not in str(target)
    tgt = resolve_target(target, 1 if serial else threads)
    chosen = choose_pipeline(mod, schedules, tgt, pipeline)
    if shapes:
        mod = bind_shapes(mod, shapes)
    elif executor == "graph" and dynamic_inputs(mod):
        def build_for(given: dict[str, tuple[int, ...]]) -> Any:
            return build(mod, tgt, params, schedules, chosen, executor="graph", shapes=given)

        names = [p.name_hint for p in mod["main"].params if not params or p.name_hint not in params]
        return SpecializingExecutable(build_for, names, dynamic_inputs(mod), max_builds)
    exe = build_prepared(prepare(mod, params, chosen), tgt, schedules, executor=executor)
    exe.pipeline = chosen if isinstance(chosen, str) else "custom"
    return exe


@deep
def build_prepared(prepared: IRModule, target: Target, schedules: ScheduleSource | None = None, *,
                   executor: str = "graph", offload: Callable[[Function], Any] | None = None,
                   memo: KernelMemo | None = None) -> Any:
    """Compile a module `autorelay.transform.prepare` already prepared (weights bound, pipeline run):
    what `build` does after preparing. The tuner prepares a model once and builds it from here.
    `offload` and `memo` (kernels shared with other builds): see `GraphBuilder` (graph executor
    only). It runs on a big-stack thread as a whole (`autorelay.utils.deep`), so the hundreds of
    walks it makes (a hash and a lowering per call site) run there directly: each hop to such a
    thread costs about 0.35 ms on the 2-core Zen 3 host, and a search builds a model dozens of
    times."""
    if target.kind == "cuda" and executor != "graph":  # the VM and AoT call host-memory kernels
        why = control_flow_reason(prepared)
        raise TargetError(f"build: on cuda targets models run on the graph executor (dataflow, static "
                          f"shapes); executor={executor!r} is not supported there"
                          + (f": {why}" if why else ""))
    if target.kind not in ("cpu", "cuda"):
        raise TargetError(f"build: models for {str(target).split()[0]} targets are not supported yet "
                          "(single kernels are: autorelay.kernel.compile_kernel)")
    if executor == "vm":
        return vm.from_prepared(prepared, vm.CompiledProvider(target, schedules))
    if executor == "aot":
        return aot.from_prepared(prepared, aot.KernelTable(target, schedules))
    builder = GraphBuilder(target, schedules, offload, memo)
    plan = builder.build(prepared["main"])
    artifacts = [KernelArtifact.from_kernel(k) for k in builder.kernels]
    funcs = [builder.externals.get(i) or ReferenceFunction(f, flat_args=True)
             for i, f in enumerate(builder.functions)]
    return Executable(plan, artifacts, builder.consts, builder.functions, funcs, target)
