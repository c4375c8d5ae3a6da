"""The graph executor's builder: a fused `@main` becomes a `GraphPlan` (slots, steps, memory plan)
and the kernels its steps call, one compiled kernel per distinct workload.

Views cost nothing: a primitive that only reshapes or picks a contiguous block of its input
(`runtime.views.view_offset`) becomes an ``alias`` slot, and a concatenation whose pieces are
contiguous blocks of its result (`runtime.views.concat_offsets`) has its pieces' producers write
straight into the result: the pieces become aliases of it and the concatenation runs no step.

Padding costs nothing either, on CPU targets: a value a convolution pads with zeros is written by
its producer into the interior of a zero-bordered buffer (an ``interior`` slot of a ``padded``
one, chosen up front by `autorelay.halo_plan`), and the convolution reads that buffer whole, its
pad stage gone (`autorelay.te.halo`). A model fused under a plan without halos
(`FusionPlan.halos`) is built without.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from autorelay.errors import BuildError
from autorelay.halo_plan import HaloChoice, buffer_plans, call_buffer_plans, dataflow_children, plan_halos
from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import post_order
from autorelay.kernel import Kernel
from autorelay.lower import NoCompute, workload_key
from autorelay.lower.lower import LoweredFunction, lower
from autorelay.lower.relayout import compile_pack, pack_detail
from autorelay.primitive import KernelMemo, PrimitiveKernels, compile_primitive
from autorelay.runtime.fallback import op_names
from autorelay.runtime.graph_executor import GraphPlan, workspace_offsets
from autorelay.runtime.graph_plan import Slot, Step, plan_memory, storage_of
from autorelay.runtime.views import concat_offsets, view_offset
from autorelay.schedule.relayout import packed_shape, relayout
from autorelay.schedule.source import ScheduleSource
from autorelay.target import Target
from autorelay.te.halo import DENSE, BufferPlan, padded_shape
from autorelay.transform.fusion_plan import halos_allowed


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


class GraphBuilder:
    """Turns a fused `@main` into a plan, compiling one kernel per distinct workload.

    `offload`: a device's hook (the accelerator's `autorelay.vta.build`): given a primitive
    function, the callable that runs it on the device, or None to compile it for the CPU.
    `memo`: kernels earlier builds compiled (`autorelay.primitive.KernelMemo`). Values convolutions pad
    are stored with a zero border (see the module docstring; CPU targets only), unless the
    fusion plan said not to (`fusion_plan.halos_allowed`)."""

    def __init__(self, target: Target, schedules: ScheduleSource | None,
                 offload: Callable[[Function], Any] | None = None, memo: KernelMemo | None = None
                 ) -> None:
        self.target, self.schedules, self.offload, self.memo = target, schedules, offload, memo
        self.use_halos = target.kind == "cpu" and offload is None
        self.halos: dict[int, HaloChoice] = {}  # id of a producing call -> its value's border
        self.plans: dict[int, BufferPlan] = {}  # id of a call site -> where its kernel's buffers lie
        self._lowered: dict[int, LoweredFunction | None] = {}  # id of a call site -> its lowering
        self.externals: dict[int, Any] = {}  # functions-table index -> the device's callable
        self.slots: list[Slot] = []
        self.steps: list[Step] = []
        self.consts: list[np.ndarray] = []
        self.kernels: list[Kernel] = []
        self.kernel_index: dict[tuple[str, BufferPlan, int, int], int] = {}
        self.pack_kernels: dict[tuple, int] = {}
        # (workload key, buffers, parameter count) -> kernels; see `compile`
        self.compiled: dict[tuple[str, BufferPlan, int], PrimitiveKernels] = {}
        self.functions: list[Function] = []
        self.values: dict[int, Any] = {}  # expr id -> slot id | list (tuple value)

    def halos_for(self, fn: Function) -> bool:
        """Whether this build stores `fn`'s padded values with zero borders: a CPU build with no
        device hook, of a model its fusion plan did not mark (`fusion_plan.halos_allowed`)."""
        return self.use_halos and halos_allowed(fn)

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
        if self.halos_for(fn):
            self.halos = plan_halos(fn.body, self.lowering)
            self.plans = buffer_plans(fn.body, self.halos, self.lowering)
        nodes = post_order(fn.body, dataflow_children)
        if any(isinstance(node, Let) for node in nodes):  # before a let-bound variable reads as free
            raise BuildError("build: let bindings in @main; run ToGraphNormalForm first (every named "
                             "pipeline does)")
        for node in nodes:
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
        return GraphPlan(self.slots, self.steps, names, in_slots, outs, isinstance(out, list), mem,
                         _positions(out, iter(range(len(outs)))) if isinstance(out, list) else None)

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
        else:
            raise BuildError(f"build: cannot run {type(node).__name__} nodes in the graph executor")

    def lowering(self, site: Call, fn: Function | None = None) -> LoweredFunction | None:
        """The lowering of the primitive function `fn` a call site calls (default: its callee),
        None when it has no compute. Per call site: a kernel is shared by every function of its
        workload key, their constants are not."""
        if id(site) not in self._lowered:
            try:
                self._lowered[id(site)] = lower(fn if fn is not None else site.op)  # type: ignore[arg-type]
            except NoCompute:
                self._lowered[id(site)] = None
        return self._lowered[id(site)]

    def storage_of(self, s: int) -> int:
        """The slot whose storage `s` uses (itself unless `s` is an alias)."""
        return storage_of(self.slots, s)

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
        if isinstance(ret, TensorType) and (placed := self.concat_in_place(fn, arg_slots, ret)) is not None:
            return placed
        out_slots = [self.slot(t.concrete_shape, t.dtype, "temp") for t in out_types]
        if all(t.has_no_elements for t in out_types):  # empty results: nothing to compute
            return out_slots if isinstance(ret, TupleType) else out_slots[0]
        if (halo := self.halos.get(id(site))) is not None:  # the value lives inside a zero border
            t = out_types[0]
            lows = tuple(lo for lo, _ in halo.halo)
            whole = self.slot(padded_shape(t.concrete_shape, halo.halo), t.dtype, "padded")
            self.slots[whole].halo = lows
            self.slots[out_slots[0]] = Slot(tuple(t.concrete_shape), t.dtype, "interior", whole, halo=lows)
        device = self.offload(fn) if self.offload is not None else None
        if device is not None:
            self.functions.append(fn)
            self.externals[len(self.functions) - 1] = device
            self.steps.append(Step("external", device.name, _flatten(arg_slots), out_slots,
                                   function=len(self.functions) - 1, workload_key=device.key,
                                   source=f"vta {device.source}", detail=device.detail))
            return out_slots if isinstance(ret, TupleType) else out_slots[0]
        buffers = self.plans.get(id(site), DENSE)
        prim = self.compile(fn, buffers)
        key, name = prim.key, prim.name
        if prim.lowered is None:
            self.functions.append(fn)
            self.steps.append(Step("fallback", name, _flatten(arg_slots), out_slots,
                                   function=len(self.functions) - 1,
                                   workload_key=key, source=prim.source, detail=prim.detail))
        else:
            own = self.lowering(site, fn)
            consts = [np.asarray(src.value) for src in own.sources if src.kind == "const"] if own else []
            if len(consts) != sum(1 for src in prim.lowered.sources if src.kind == "const"):
                raise BuildError(f"build: constants of {name} do not line up with its lowering")
            for k, o in enumerate(out_slots):
                kid = self.kernel_index[(key, buffers, len(fn.params), k)]
                kern = self.kernels[kid]
                ins = self.kernel_inputs(kern, prim.lowered, arg_slots, consts, buffers.padded_reads)
                detail = f"{prim.detail}; {buffers.describe()}" if buffers else prim.detail
                self.steps.append(Step("kernel", name if len(out_slots) == 1 else f"{name}.{k}", ins, [o],
                                       kernel=kid, workload_key=key, source=prim.source, detail=detail))
        return out_slots if isinstance(ret, TupleType) else out_slots[0]

    def concat_in_place(self, fn: Function, arg_slots: list[Any], ret: TensorType) -> int | None:
        """The result slot of a concatenation whose pieces' producers write into it (see the
        module docstring), or None when some piece cannot be placed there: a model input or a
        constant, a view of only part of its buffer, a buffer already placed inside another
        result, or the same buffer twice."""
        offsets = concat_offsets(fn)
        if len(arg_slots) == 1 and isinstance(arg_slots[0], list):  # an unfused concatenate's tuple
            arg_slots = arg_slots[0]
        if offsets is None or len(offsets) != len(arg_slots):
            return None
        if not all(isinstance(s, int) for s in arg_slots):
            return None
        roots = [self.storage_of(s) for s in arg_slots]
        for s, r in zip(arg_slots, roots):
            piece, buf = self.slots[s], self.slots[r]
            if buf.kind != "temp" or piece.offset or piece.nbytes != buf.nbytes or buf.dtype != ret.dtype:
                return None
        if len(set(roots)) != len(roots):
            return None
        out = self.slot(ret.concrete_shape, ret.dtype, "temp")
        for r, off in zip(roots, offsets):
            for view in self.slots:  # the piece's views now view the result
                if view.kind == "alias" and view.index == r:
                    view.index, view.offset = out, view.offset + off
            buf = self.slots[r]
            self.slots[r] = Slot(buf.shape, buf.dtype, "alias", out, off)
        return out

    def kernel_inputs(self, kern: Kernel, lowered: Any, arg_slots: list[Any],
                      consts: list[np.ndarray], padded_reads: tuple[int, ...] = ()) -> list[int]:
        """Slot ids of a kernel's inputs; constants are re-laid-out (packed) once, here. An input
        in `padded_reads` is its value's whole zero-bordered buffer."""
        ins: list[int] = []
        ci = 0
        for k, (t, src) in enumerate(zip(kern.cdef.inputs, lowered.sources)):
            ops = kern.relayouts.get(t.name, [])
            if src.kind == "const":
                pack = self.memo.packed_constant if self.memo is not None else relayout
                ins.append(self.const_slot(pack(consts[ci], ops)))
                ci += 1
                continue
            s = arg_slots[src.index]
            if isinstance(s, list):
                raise BuildError("build: a tuple-typed kernel parameter is not supported")
            if k in padded_reads:
                s = self.slots[s].index
            if ops:  # a non-constant input the kernel reads blocked: a packing kernel runs first
                s = self.pack(s, ops)
            ins.append(s)
        return ins

    def pack(self, s: int, ops: list) -> int:
        """A compiled packing step from slot `s` into a new temp slot; returns the new slot."""
        shape, dtype = self.slots[s].shape, self.slots[s].dtype
        pitch = self.slots[self.slots[s].index].shape if self.slots[s].kind == "interior" else None
        cache_key = (shape, dtype, tuple(map(tuple, ops)), pitch)
        if cache_key not in self.pack_kernels:  # a bordered buffer's interior: read with its pitch
            pitches = ((0, pitch),) if pitch is not None else ()
            self.kernels.append(compile_pack(shape, dtype, ops, self.target, pitches))
            self.pack_kernels[cache_key] = len(self.kernels) - 1
        kid = self.pack_kernels[cache_key]
        p = self.slot(packed_shape(shape, ops), dtype, "temp")
        self.steps.append(Step("kernel", "pack", [s], [p], kernel=kid, source="relayout",
                               detail=pack_detail(shape, ops)))
        return p

    def compile(self, fn: Function, buffers: BufferPlan = DENSE) -> PrimitiveKernels:
        """A workload's kernels, compiled once per distinct workload key, buffer plan and number of
        parameters. The key counts a tensor constant as an input, so `abs(%x)` and an unfolded
        `abs(<constant>)` share it (and their schedules); but the kernel reads its inputs in the
        order of its own lowering, parameters before constants, so each split compiles its own."""
        key = workload_key(fn)
        own = (key, buffers, len(fn.params))
        if own not in self.compiled:
            prim = self.compiled[own] = compile_primitive(
                fn, self.schedules, self.target, split_outputs=True, memo=self.memo, buffers=buffers)
            for k, kern in enumerate(prim.kernels):
                self.kernels.append(kern)
                self.kernel_index[(*own, k)] = len(self.kernels) - 1
        return self.compiled[own]


def graph_buffer_plans(module: IRModule, target: Target) -> dict[int, BufferPlan]:
    """Per call site (by id) of `module`'s @main, the buffer plan a graph build on `target`
    compiles that call's kernel with (see the module docstring): what compiling ahead needs."""
    builder = GraphBuilder(target, None)
    if not builder.halos_for(module["main"]):
        return {}
    return call_buffer_plans(module["main"].body, builder.lowering)


def _flatten(v: Any) -> list[int]:
    return [x for f in v for x in _flatten(f)] if isinstance(v, list) else [v]


def _positions(v: Any, count: Iterator[int]) -> Any:
    """`v`'s nesting with each slot replaced by its position in `_flatten(v)`."""
    return [_positions(f, count) for f in v] if isinstance(v, list) else next(count)


def _ws_bytes(k: Kernel) -> int:

    return workspace_offsets([(b.shape, b.dtype) for b in k.func.workspaces])[1]
