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
from autorelay.errors import AutoRelayError
from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import post_order
from autorelay.kernel import Kernel, compile_kernel
from autorelay.lower import model_key, workload_key
from autorelay.lower.lower import lower
from autorelay.lower.relayout import relayout_compute
from autorelay.op.dynamic import VALUE_ARGS as DYNAMIC_OPS
from autorelay.primitive import PrimitiveKernels, compile_primitive
from autorelay.runtime import aot, vm
from autorelay.runtime.executable import Executable, KernelArtifact
from autorelay.runtime.fallback import ReferenceFunction, op_names
from autorelay.runtime.graph_executor import GraphPlan, workspace_offsets
from autorelay.runtime.graph_plan import Slot, Step, plan_memory
from autorelay.runtime.specializing import SpecializingExecutable
from autorelay.runtime.views import view_offset
from autorelay.schedule.relayout import packed_shape, relayout
from autorelay.schedule.source import PipelineSource, ScheduleSource
from autorelay.target import Target, TargetError, parse_target
from autorelay.transform.bind_shapes import bind_shapes, dynamic_inputs
from autorelay.transform.layout_plan import logged_plan_pipeline
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import default_pipeline
from autorelay.transform.prepare import prepare
from autorelay.utils.deep import deep


class BuildError(AutoRelayError):
    """The model cannot be built by this backend (control flow, dynamic shapes, …)."""


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


def _tensor_types(t: Type | None, what: str) -> list[TensorType]:
    if isinstance(t, TensorType):
        if not t.is_static:
            raise BuildError(f"build: {what} has a dynamic shape {t}; the graph executor needs static shapes")
        return [t]
    if isinstance(t, TupleType):
        return [x for f in t.fields for x in _tensor_types(f, what)]
    raise BuildError(f"build: {what} has type {t}, expected tensors")


def _wrap_op(call: Call) -> tuple[Function, list[Expr]]:
    """A bare op call (no fusion ran) as a one-op primitive function and its outside arguments."""
    params = [Var(f"p{i}", a.checked_type if a.has_checked_type else None) for i, a in enumerate(call.args)]
    inner = Call(call.op, tuple(params), call.attrs, call.type_args)
    if call.has_checked_type:
        inner.set_checked_type(call.checked_type)
    ret = call.checked_type if call.has_checked_type else None
    return Function(tuple(params), inner, ret, (), Attrs({"Primitive": 1})), list(call.args)


class _GraphBuilder:
    """Turns a fused `@main` into a plan, compiling one kernel per distinct workload.

    `offload`: a device's hook (the accelerator's `autorelay.vta.build`): given a primitive
    function, the callable that runs it on the device, or None to compile it for the CPU."""

    def __init__(self, target: Target, schedules: ScheduleSource | None,
                 offload: Callable[[Function], Any] | None = None) -> None:
        self.target, self.schedules, self.offload = target, schedules, offload
        self.externals: dict[int, Any] = {}  # functions-table index -> the device's callable
        self.slots: list[Slot] = []
        self.steps: list[Step] = []
        self.consts: list[np.ndarray] = []
        self.kernels: list[Kernel] = []
        self.kernel_index: dict[tuple[str, int], int] = {}
        self.pack_kernels: dict[tuple, int] = {}
        self.compiled: dict[str, PrimitiveKernels] = {}  # workload key -> its kernels
        self.functions: list[Function] = []
        self.values: dict[int, Any] = {}  # expr id -> slot id | list (tuple value)

    def slot(self, shape: tuple[int, ...], dtype: str, kind: str, index: int = -1, offset: int = 0) -> int:
        self.slots.append(Slot(tuple(int(d) for d in shape), dtype, kind, index, offset))
        return len(self.slots) - 1

    def const_slot(self, arr: np.ndarray) -> int:
        self.consts.append(np.ascontiguousarray(arr))
        return self.slot(arr.shape, str(arr.dtype), "const", len(self.consts) - 1)

    def build(self, fn: Function) -> GraphPlan:
        names, in_slots = [], []
        for i, p in enumerate(fn.params):
            t = _tensor_types(p.type_annotation or (p.checked_type if p.has_checked_type else None),
                              f"input %{p.name_hint}")
            if len(t) != 1 or not isinstance(p.type_annotation or p.checked_type, TensorType):
                raise BuildError(f"build: input %{p.name_hint} must be a tensor")
            s = self.slot(t[0].concrete_shape, t[0].dtype, "input", i)
            self.values[id(p)] = s
            names.append(p.name_hint)
            in_slots.append(s)
        for node in post_order(fn.body, _dataflow_children):
            self.visit(node)
        out = self.values[id(fn.body)]
        outs = _flatten(out)
        for k, o in enumerate(outs):  # an output that is an input or a constant gets its own buffer
            if self.slots[self.storage_of(o)].kind != "temp":
                s = self.slots[o]
                t = self.slot(s.shape, s.dtype, "temp")
                self.steps.append(Step("relayout", f"copy_output{k}", [o], [t], relayout=[], source="copy"))
                outs[k] = t
        ws = max((_ws_bytes(k) for k in self.kernels), default=0)
        mem = plan_memory(self.slots, self.steps, outs, ws)
        return GraphPlan(self.slots, self.steps, names, in_slots, outs, isinstance(out, list), mem)

    def visit(self, node: Expr) -> None:
        if id(node) in self.values or isinstance(node, Op | Function):
            return
        if isinstance(node, Var):
            raise BuildError(f"build: free variable %{node.name_hint} in @main")
        if isinstance(node, Constant):
            self.values[id(node)] = self.const_slot(np.asarray(node.data))
        elif isinstance(node, Tuple):
            self.values[id(node)] = [self.values[id(f)] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            self.values[id(node)] = self.values[id(node.tuple_value)][node.index]
        elif isinstance(node, Call) and isinstance(node.op, Function) and node.op.is_primitive:
            self.values[id(node)] = self.call(node.op, list(node.args), node)
        elif isinstance(node, Call) and isinstance(node.op, Op):
            fn, args = _wrap_op(node)
            self.values[id(node)] = self.call(fn, args, node)
        elif isinstance(node, Let):
            raise BuildError("build: let bindings in @main; run ToGraphNormalForm first (the default "
                             "pipeline does)")
        else:
            raise BuildError(f"build: cannot run {type(node).__name__} nodes in the graph executor")

    def storage_of(self, s: int) -> int:
        """The slot whose storage `s` uses (itself unless `s` is an alias)."""
        return self.slots[s].index if self.slots[s].kind == "alias" else s

    def call(self, fn: Function, args: list[Expr], site: Call) -> Any:
        arg_slots = [self.values[id(a)] for a in args]
        ret = site.checked_type if site.has_checked_type else fn.ret_type
        out_types = _tensor_types(ret, f"the result of {'+'.join(op_names(fn)) or 'a function'}")
        single = isinstance(ret, TensorType) and len(arg_slots) == 1 and isinstance(arg_slots[0], int)
        offset = view_offset(fn) if single else None
        if offset is not None:  # a contiguous piece of its input: a view, no step (`runtime.views`)
            src = self.slots[arg_slots[0]]
            start = src.offset if src.kind == "alias" else 0
            return self.slot(out_types[0].concrete_shape, out_types[0].dtype, "alias",
                             self.storage_of(arg_slots[0]), start + offset)
        out_slots = [self.slot(t.concrete_shape, t.dtype, "temp") for t in out_types]
        device = self.offload(fn) if self.offload is not None else None
        if device is not None:
            self.functions.append(fn)
            self.externals[len(self.functions) - 1] = device
            self.steps.append(Step("external", device.name, _flatten(arg_slots), out_slots,
                                   function=len(self.functions) - 1, workload_key=device.key,
                                   source=f"vta {device.source}", detail=device.detail))
            return out_slots if isinstance(ret, TupleType) else out_slots[0]
        prim = self.compile(fn)
        key, name = prim.key, prim.name
        if prim.lowered is None:
            self.functions.append(fn)
            self.steps.append(Step("fallback", name, _flatten(arg_slots), out_slots,
                                   function=len(self.functions) - 1,
                                   workload_key=key, source="fallback", detail=prim.detail))
        else:
            consts = _constants(fn)
            if len(consts) != sum(1 for src in prim.lowered.sources if src.kind == "const"):
                raise BuildError(f"build: constants of {name} do not line up with its lowering")
            for k, o in enumerate(out_slots):
                kid = self.kernel_index[(key, k)]
                kern = self.kernels[kid]
                ins = self.kernel_inputs(kern, prim.lowered, arg_slots, consts)
                self.steps.append(Step("kernel", name if len(out_slots) == 1 else f"{name}.{k}", ins, [o],
                                       kernel=kid, workload_key=key, source=prim.source,
                                       detail=prim.detail))
        return out_slots if isinstance(ret, TupleType) else out_slots[0]

    def kernel_inputs(self, kern: Kernel, lowered: Any, arg_slots: list[Any],
                      consts: list[np.ndarray]) -> list[int]:
        """Slot ids of a kernel's inputs; constants are re-laid-out (packed) once, here."""
        ins: list[int] = []
        ci = 0
        for t, src in zip(kern.cdef.inputs, lowered.sources):
            ops = kern.relayouts.get(t.name, [])
            if src.kind == "const":
                ins.append(self.const_slot(relayout(consts[ci], ops)))
                ci += 1
                continue
            s = arg_slots[src.index]
            if isinstance(s, list):
                raise BuildError("build: a tuple-typed kernel parameter is not supported")
            if ops:  # a non-constant input the kernel reads blocked: a packing kernel runs first
                s = self.pack(s, ops)
            ins.append(s)
        return ins

    def pack(self, s: int, ops: list) -> int:
        """A compiled packing step from slot `s` into a new temp slot; returns the new slot."""
        shape, dtype = self.slots[s].shape, self.slots[s].dtype
        cache_key = (shape, dtype, tuple(map(tuple, ops)))
        if cache_key not in self.pack_kernels:
            cdef = relayout_compute(shape, dtype, ops)
            self.kernels.append(compile_kernel(cdef, None, self.target))
            self.pack_kernels[cache_key] = len(self.kernels) - 1
        kid = self.pack_kernels[cache_key]
        p = self.slot(packed_shape(shape, ops), dtype, "temp")
        self.steps.append(Step("kernel", "pack", [s], [p], kernel=kid, source="relayout",
                               detail=f"re-layout {list(shape)} for a blocked read: {ops}"))
        return p

    def compile(self, fn: Function) -> PrimitiveKernels:
        """A workload's kernels, compiled once per distinct workload key."""
        key = workload_key(fn)
        if key not in self.compiled:
            prim = self.compiled[key] = compile_primitive(fn, self.schedules, self.target,
                                                          split_outputs=True)
            for k, kern in enumerate(prim.kernels):
                self.kernels.append(kern)
                self.kernel_index[(key, k)] = len(self.kernels) - 1
        return self.compiled[key]


def _dataflow_children(node: Expr) -> list[Expr]:
    """Children of a node of `@main`, not entering functions (primitive bodies are kernels)."""
    if isinstance(node, Call):
        return list(node.args) if isinstance(node.op, Function | Op) else [node.op, *node.args]
    if isinstance(node, Tuple):
        return list(node.fields)
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, Let):
        return [node.value, node.body]
    return []


def _flatten(v: Any) -> list[int]:
    return [x for f in v for x in _flatten(f)] if isinstance(v, list) else [v]


def _constants(fn: Function) -> list[np.ndarray]:
    """Tensor constants of a primitive function in the order lowering makes them inputs: the IR's
    own and those its computes derive from them (a requantize's multipliers). Lowered per call
    site: the kernel is shared by every function of its workload key, the constants are not."""
    return [np.asarray(s.value) for s in lower(fn).sources if s.kind == "const"]


def _ws_bytes(k: Kernel) -> int:

    return workspace_offsets([(b.shape, b.dtype) for b in k.func.workspaces])[1]


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


def build_prepared(prepared: IRModule, target: Target, schedules: ScheduleSource | None = None, *,
                   executor: str = "graph", offload: Callable[[Function], Any] | None = None) -> Any:
    """Compile a module `autorelay.transform.prepare` already prepared (weights bound, pipeline run):
    what `build` does after preparing. The tuner prepares a model once and builds it from here.
    `offload`: see `_GraphBuilder` (graph executor only)."""
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
    builder = _GraphBuilder(target, schedules, offload)
    plan = builder.build(prepared["main"])
    artifacts = [KernelArtifact.from_kernel(k) for k in builder.kernels]
    funcs = [builder.externals.get(i) or ReferenceFunction(f) for i, f in enumerate(builder.functions)]
    return Executable(plan, artifacts, builder.consts, builder.functions, funcs, target)
