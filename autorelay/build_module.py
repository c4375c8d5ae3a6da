"""`autorelay.build` (this module is `build_module` so that the name `autorelay.build` stays the
function): the one place that composes passes, fusion, lowering, schedule choice, codegen and the
runtime.

    exe = autorelay.build(mod, target="llvm", params=params, schedules=source)
    out = exe(data)                      # or exe.run(data=data)
    print(exe.profile())                 # every kernel: workload key, config source, time share

Order of work: send programs with control flow to the VM (or AoT) by `executor`; bind `params`
as constants (so weight folding passes see them); run the named pipeline (which ends in FuseOps); then for
each primitive function called from `@main`, in dependency order: lower it to a compute DAG, ask
`schedules.lookup(workload_key, target)` for a config (None: the template's heuristic default),
compile it (the kernel cache makes a repeated workload free), and record a plan step. A function
whose ops lack computes — or whose kernel cannot be scheduled — becomes a fallback step running the
ops' NumPy references, marked "fallback" with the reason in the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from autorelay.codegen.llvm.target import Target
from autorelay.errors import AutoRelayError, ScheduleError
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
from autorelay.kernel import Kernel, build_kernel
from autorelay.lower import NoCompute, describe_workload, lower, workload_key
from autorelay.lower.relayout import packed_shape, relayout_compute
from autorelay.runtime.executable import Executable, KernelArtifact
from autorelay.runtime.fallback import ReferenceFunction, op_names
from autorelay.runtime.graph_executor import GraphPlan
from autorelay.runtime.graph_plan import Slot, Step, plan_memory
from autorelay.schedule.source import lookup_schedule
from autorelay.schedule.space import Config
from autorelay.schedule.state import relayout
from autorelay.schedule.templates import check_in_space
from autorelay.transform.bind import bind_params
from autorelay.utils.deep import deep


class BuildError(AutoRelayError):
    """The model cannot be built by this backend (control flow, dynamic shapes, …)."""


def _target(target: str | Target, threads: int) -> tuple[Target, str]:
    if isinstance(target, Target):
        tgt = target.with_threads(threads)
    elif isinstance(target, str) and target.split()[:1] == ["llvm"]:
        tgt = Target.host(threads)
    else:
        raise BuildError(f"build: unsupported target {target!r} (only 'llvm' for the CPU so far)")
    return tgt, tgt.tuning_name()


def control_flow_reason(mod: IRModule, entry: str = "main") -> str | None:
    """Why @entry needs the VM (control flow, recursion, closures, ADTs, refs), or None for dataflow."""
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
    """Turns a fused `@main` into a plan, compiling one kernel per distinct workload."""

    def __init__(self, target: Target, target_name: str, schedules: Any) -> None:
        self.target, self.target_name, self.schedules = target, target_name, schedules
        self.slots: list[Slot] = []
        self.steps: list[Step] = []
        self.consts: list[np.ndarray] = []
        self.kernels: list[Kernel] = []
        self.kernel_index: dict[tuple[str, int], int] = {}
        self.pack_kernels: dict[tuple, int] = {}
        self.choices: dict[str, tuple[Any, str, str]] = {}  # key -> (lowered | None, source, detail)
        self.functions: list[Function] = []
        self.values: dict[int, Any] = {}  # expr id -> slot id | list (tuple value)

    def slot(self, shape: tuple[int, ...], dtype: str, kind: str, index: int = -1) -> int:
        self.slots.append(Slot(tuple(int(d) for d in shape), dtype, kind, index))
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
            if self.slots[o].kind != "temp":
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

    def call(self, fn: Function, args: list[Expr], site: Call) -> Any:
        arg_slots = [self.values[id(a)] for a in args]
        ret = site.checked_type if site.has_checked_type else fn.ret_type
        out_types = _tensor_types(ret, f"the result of {'+'.join(op_names(fn)) or 'a function'}")
        out_slots = [self.slot(t.concrete_shape, t.dtype, "temp") for t in out_types]
        key = workload_key(fn)
        choice = self.choose(key, fn)
        name = "_".join(n.split(".")[-1] for n in op_names(fn)) or "identity"
        lowered, source, detail = choice
        if lowered is None:
            self.functions.append(fn)
            self.steps.append(Step("fallback", name, _flatten(arg_slots), out_slots,
                                   function=len(self.functions) - 1,
                                   workload_key=key, source="fallback", detail=detail))
        else:
            consts = _constants(fn)
            if len(consts) != sum(1 for src in lowered.sources if src.kind == "const"):
                raise BuildError(f"build: constants of {name} do not line up with its lowering")
            for k, o in enumerate(out_slots):
                kid = self.kernel_index[(key, k)]
                kern = self.kernels[kid]
                ins = self.kernel_inputs(kern, lowered, arg_slots, consts)
                self.steps.append(Step("kernel", name if len(out_slots) == 1 else f"{name}.{k}", ins, [o],
                                       kernel=kid, workload_key=key, source=source, detail=detail))
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
            self.kernels.append(build_kernel(cdef, None, self.target))
            self.pack_kernels[cache_key] = len(self.kernels) - 1
        kid = self.pack_kernels[cache_key]
        p = self.slot(packed_shape(shape, ops), dtype, "temp")
        self.steps.append(Step("kernel", "pack", [s], [p], kernel=kid, source="relayout",
                               detail=f"re-layout {list(shape)} for a blocked read: {ops}"))
        return p

    def choose(self, key: str, fn: Function) -> tuple[Any, str, str]:
        """Lower and compile a workload once: (lowered | None for fallback, config source, detail)."""
        if key in self.choices:
            return self.choices[key]
        try:
            lowered = lower(fn)
        except NoCompute as e:
            self.choices[key] = (None, "fallback", f"no compute: {e}")
            return self.choices[key]
        config, source = self.lookup(key, fn)
        detail = ""
        try:
            if config is not None:  # a logged config may predate a change of its template
                check_in_space(lowered.cdef, config, self.target)
            kernels = self.compile(lowered, config)
        except ScheduleError as e:
            if config is None:
                self.choices[key] = (None, "fallback", f"default schedule failed: {e}")
                return self.choices[key]
            detail = f"logged config rejected ({e}); "
            source, kernels = "default", self.compile(lowered, None)
        for k, kern in enumerate(kernels):
            self.kernels.append(kern)
            self.kernel_index[(key, k)] = len(self.kernels) - 1
        detail += _config_text(kernels[0], config)
        self.choices[key] = (lowered, source, detail)
        return self.choices[key]

    def compile(self, lowered: Any, config: Config | None) -> list[Kernel]:
        cdef = lowered.cdef
        if len(cdef.outputs) == 1:
            return [build_kernel(cdef, config, self.target)]
        from autorelay.te.tensor import ComputeDef

        return [build_kernel(ComputeDef(cdef.inputs, (o,), f"{cdef.name}_{k}"), config,
                             self.target) for k, o in enumerate(cdef.outputs)]

    def lookup(self, key: str, fn: Function) -> tuple[Config | None, str]:
        return lookup_schedule(self.schedules, key, self.target_name, describe_workload(fn))


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
    """Tensor constants of a primitive function in the order lowering makes them inputs."""
    return [np.asarray(n.data) for n in post_order(fn.body)
            if isinstance(n, Constant) and np.asarray(n.data).size > 1]


def _ws_bytes(k: Kernel) -> int:
    from autorelay.runtime.graph_executor import KernelSpec

    return KernelSpec(k.module.key, [(b.shape, b.dtype) for b in k.func.workspaces]).workspace_offsets[1]


def _config_text(k: Kernel, config: Config | None) -> str:
    if config is not None:
        return f"{config.template} {config.as_dict()}"
    from autorelay.schedule.templates import template_for

    try:
        tmpl = template_for(k.cdef)
        return f"{tmpl.name} {tmpl.default(k.cdef, k.target).as_dict()}"
    except Exception:
        return "explicit steps"


@deep
def build(
    mod: IRModule | Function,
    target: str | Target = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    schedules: Any = None,
    pipeline: str | Any = "default",
    *,
    threads: int = 1,
    executor: str = "auto",
) -> Any:
    """Compile a model into an executable (see the module docstring).

    `executor`: "graph" (dataflow programs: the static-memory graph executor), "vm" (control flow,
    closures, recursion, ADTs), "aot" (first-order loops compiled to native code), or "auto"
    (graph for dataflow, otherwise the VM).

    `schedules`: an object with `lookup(workload_key, target) -> config dict | None` (e.g. a
    `tuning_db` ScheduleSource) or None for heuristic defaults. `pipeline`: a pipeline name
    (`autorelay.transform.PIPELINES`) or a Pipeline value. `threads`: kernel threads (changeable
    later with `exe.set_threads`).
    """
    from autorelay.transform.pipelines import pipeline as named_pipeline

    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if executor not in ("auto", "graph", "vm", "aot"):
        raise BuildError(f"build: unknown executor {executor!r}; use auto, graph, vm or aot")
    if executor == "auto":
        executor = "graph" if control_flow_reason(mod) is None else "vm"
    if executor == "vm":
        from autorelay.runtime import vm

        return vm.compile(mod, target, params=params, schedules=schedules, pipeline=pipeline, threads=threads)
    if executor == "aot":
        from autorelay.runtime import aot

        return aot.compile(mod, target, params=params, schedules=schedules, pipeline=pipeline)
    tgt, target_name = _target(target, threads)
    check_dataflow(mod)
    if params:
        mod = bind_params(mod, params)
    pipe = named_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    mod = pipe(mod)
    builder = _GraphBuilder(tgt, target_name, schedules)
    plan = builder.build(mod["main"])
    artifacts = [KernelArtifact.from_kernel(k) for k in builder.kernels]
    funcs = [ReferenceFunction(f) for f in builder.functions]
    return Executable(plan, artifacts, builder.consts, builder.functions, funcs, tgt)
