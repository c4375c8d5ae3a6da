"""A fused primitive function becomes kernels here, for every executor (graph, VM, AoT) alike.

`choose_schedule(fn, source, target)` is the one place a config is chosen: lower the function
(no compute: it runs through the NumPy references, a "fallback"), ask the schedule source (log ->
transfer -> default) under the build's workload key and target, and refuse a logged config that is
no longer a point of its template's space (the template changed since it was tuned), or a transferred
one tuned at another batch around a parallel unit this batch would not choose.

`compile_primitive(fn, source, target)` compiles what `choose_schedule` chose with
`autorelay.kernel.compile_kernel`; a logged config the scheduler rejects falls back to the
heuristic default, and the result says which (`source`: tuned / transferred / default / builtin /
fallback / empty, with a `detail` for the build report). `empty` is a function with no compute
whose inputs all have no elements (a pyramid level that got no proposals): kernels take no empty
buffers, and the references read nothing, so it is no hot kernel running through NumPy.

`KernelMemo` lets several builds in one process share those kernels. A function's kernels depend
only on its workload key, the chosen config, the target and whether outputs are split (the graph
builder already shares them among the functions of one build by workload key), so a memo keyed on
exactly that is safe. Why it matters: the layout search builds one model in up to eight forms
(four uniform layouts, then the chosen plan against three per-model pipelines) whose kernels
mostly coincide, and scheduling a kernel and emitting its LLVM IR cost 0.1-3 s each. The caches
keyed on the scheduled loop IR (`autorelay.kernel`'s emitted code, the JIT's modules) spare
emission and LLVM, but not scheduling, which comes before that key: about half of a rebuild of a
ResNet-18 with Winograd layers (profiled). A build given no memo schedules every kernel itself.

The memo also keeps the packed copies of large constants (`packed_constant`): the builds of one
model share its weight arrays, and packing VGG-16's 411 MB first dense weight into the dense
kernel's blocks took 0.9 s a build, about a tenth of its layout search (profiled, 2-core Zen 3).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from autorelay.errors import ScheduleError
from autorelay.ir.expr import Function
from autorelay.ir.types import TensorType
from autorelay.kernel import Kernel, compile_kernel
from autorelay.lower import LoweredFunction, NoCompute, describe_workload, lower, workload_key
from autorelay.lower.builtins import builtin_lowering
from autorelay.runtime.fallback import op_names
from autorelay.schedule.relayout import relayout
from autorelay.schedule.source import SOURCE_NAMES, ScheduleSource, as_config
from autorelay.schedule.space import Config
from autorelay.schedule.templates import check_in_space, template_for
from autorelay.target import Target
from autorelay.te.halo import DENSE, BufferPlan
from autorelay.te.tensor import ComputeDef


@dataclass(frozen=True)
class ScheduleChoice:
    """What `choose_schedule` decided for one primitive function."""

    key: str
    lowered: LoweredFunction | None  # None: no compute, the NumPy references run it
    config: Config | None  # None: the template's heuristic default
    source: str  # tuned | transferred | default | builtin | fallback | empty
    detail: str = ""


@dataclass(frozen=True)
class PrimitiveKernels:
    """How one primitive function runs: its kernels (one per output when split), or none (fallback)."""

    name: str
    choice: ScheduleChoice
    kernels: tuple[Kernel, ...]
    source: str
    detail: str

    @property
    def key(self) -> str:
        return self.choice.key

    @property
    def lowered(self) -> LoweredFunction | None:
        """The lowering the kernels compute; None when the function runs its NumPy references
        (no compute, or not even the default schedule compiles)."""
        return self.choice.lowered if self.kernels else None


@dataclass
class KernelMemo:
    """Kernels already compiled in this process, by (workload key, config, target, split outputs);
    passed to the builds that may share them (see the module docstring). `cache_dir`: a folder
    keeping the kernels it compiles across processes (`autorelay.kernel_store`)."""

    kernels: dict[tuple, tuple[Kernel, ...] | ScheduleError] = field(default_factory=dict)
    hits: int = 0
    cache_dir: str | None = None
    # constant id and re-layout -> its packed copy, dropped when the constant dies
    packed: dict[tuple, np.ndarray] = field(default_factory=dict)

    PACKED_MIN_BYTES = 1 << 20  # smaller constants pack in well under a millisecond: not kept

    def add(self, key: tuple, kernels: tuple[Kernel, ...]) -> None:
        """Kernels compiled elsewhere (in worker processes: `search.kernel_prefetch`)."""
        self.kernels.setdefault(key, kernels)

    def compile(self, key: tuple, cdefs: list[ComputeDef], config: Config | None,
                target: Target) -> tuple[Kernel, ...]:
        """The kernels of `cdefs` under `config`, compiled once per key; a config the scheduler
        refused is remembered and raised again."""
        got = self.kernels.get(key)
        if got is None:
            try:
                got = tuple(compile_kernel(c, config, target, cache_dir=self.cache_dir) for c in cdefs)
            except ScheduleError as e:
                got = e
            self.kernels[key] = got
        else:
            self.hits += 1
        if isinstance(got, ScheduleError):
            raise got
        return got

    def packed_constant(self, arr: np.ndarray, ops: list) -> np.ndarray:
        """`arr` re-laid-out by a kernel's recorded `ops` (`autorelay.schedule.relayout`), packed
        once per constant and re-layout. Constants are never written, so builds may share the
        copy. The memo does not keep `arr` alive: its entries go when it does, so an id is never
        read for another array, and the copy lives on only in the builds that use it."""
        if not ops or arr.nbytes < self.PACKED_MIN_BYTES:
            return relayout(arr, ops)
        key = (id(arr), repr(ops))
        got = self.packed.get(key)
        if got is None:
            got = self.packed[key] = relayout(arr, ops)
            weakref.finalize(arr, self.packed.pop, key, None)
        return got


def kernel_name(fn: Function) -> str:
    """The fused ops' short names joined by '_' (how reports and task lists name a kernel)."""
    return "_".join(n.split(".")[-1] for n in op_names(fn)) or "identity"


def reads_nothing(fn: Function) -> bool:
    """Whether `fn` takes tensors and every one of them has no elements."""
    types = [p.type_annotation for p in fn.params]
    return bool(types) and all(isinstance(t, TensorType) and t.has_no_elements for t in types)


def choose_schedule(fn: Function, source: ScheduleSource | None, target: Target, *,
                    builtins: bool = False) -> ScheduleChoice:
    """The config `fn` is compiled with on `target` (see the module docstring). `builtins`: an op
    without a compute may use a builtin one (argmax, one_hot: `autorelay.lower.builtins`)."""
    key = workload_key(fn)
    try:
        lowered = lower(fn)
    except NoCompute as e:
        built = builtin_lowering(fn) if builtins else None
        if built is None:
            source = "empty" if reads_nothing(fn) else "fallback"
            return ScheduleChoice(key, None, None, source, f"no compute: {e}")
        return ScheduleChoice(key, built, None, "builtin", f"builtin compute ({e})")
    if source is None:
        return ScheduleChoice(key, lowered, None, "default")
    workload = describe_workload(fn)
    found = source.lookup(key, str(target), workload=workload)
    config = as_config(found.config)
    if config is None:
        return ScheduleChoice(key, lowered, None, "default")
    kind, note = SOURCE_NAMES.get(str(found.kind), "tuned"), getattr(found, "detail", "") or ""
    try:
        check_in_space(lowered.cdef, config, target)
    except ScheduleError as e:
        return ScheduleChoice(key, lowered, None, "default", f"logged config rejected ({e}); ")
    if kind == "transferred":
        why = _batch_mismatch(config, lowered.cdef, target, workload, getattr(found, "donor_workload", None))
        if why:
            return ScheduleChoice(key, lowered, None, "default", f"{note}; {why}; " if note else f"{why}; ")
    return ScheduleChoice(key, lowered, config, kind, f"{note}; " if note else "")


def _output_batch(workload: dict | None) -> int | None:
    """The batch of a workload description: the leading extent of its last shape (an output, see
    `describe_workload`); None when it has none."""
    shapes = (workload or {}).get("shapes")
    last = shapes[-1] if isinstance(shapes, list) and shapes else None
    return last[0] if isinstance(last, list) and last and isinstance(last[0], int) else None


def _batch_mismatch(config: Config, cdef: ComputeDef, target: Target, workload: dict,
                    donor: dict | None) -> str:
    """Why a transferred `config` does not suit this workload's batch, or "" when it does: always
    when its donor ran at the same batch, else as `Template.carries_across_batch` judges."""
    ours, theirs = _output_batch(workload), _output_batch(donor)
    if ours is None or theirs is None or ours == theirs:
        return ""
    template = template_for(cdef, config.template)
    if template.carries_across_batch(config, cdef, target):
        return ""
    knobs = ", ".join(template.batch_knobs)
    return f"not transferred: tuned at batch {theirs} with a {knobs} that batch {ours} does not take"


def compile_primitive(fn: Function, source: ScheduleSource | None, target: Target, *,
                      split_outputs: bool = False, builtins: bool = False,
                      memo: KernelMemo | None = None, buffers: BufferPlan = DENSE) -> PrimitiveKernels:
    """Choose and compile `fn`'s kernels. `split_outputs`: one kernel per output of a multi-output
    compute (the graph executor's plan has one step per kernel output); `memo`: kernels other
    builds compiled (see the module docstring); `buffers`: where the kernel's buffers lie, when
    some are zero-bordered (`autorelay.te.halo`; the schedule is chosen for `fn` as it is)."""
    name = kernel_name(fn)
    choice = choose_schedule(fn, source, target, builtins=builtins)
    if choice.lowered is None:
        return PrimitiveKernels(name, choice, (), choice.source, choice.detail)
    if choice.source == "builtin":  # naive loops: the default templates do not fit these computes
        kern = compile_kernel(choice.lowered.cdef, (), target)
        return PrimitiveKernels(name, choice, (kern,), "builtin", choice.detail)
    cdefs = [buffers.apply(c) for c in _computes(choice.lowered, split_outputs)]
    source_name, detail = choice.source, choice.detail
    memo = memo if memo is not None else KernelMemo()

    def kernels_for(config: Config | None) -> tuple[Kernel, ...]:
        key = memo_key(choice.key, config, target, split_outputs, buffers)
        return memo.compile(key, cdefs, config, target)

    try:
        kernels = kernels_for(choice.config)
    except ScheduleError as e:
        if choice.config is None:
            return PrimitiveKernels(name, choice, (), "fallback", f"default schedule failed: {e}")
        detail = f"{detail}logged config rejected ({e}); "
        source_name, kernels = "default", kernels_for(None)
        choice = ScheduleChoice(choice.key, choice.lowered, None, "default", detail)
    return PrimitiveKernels(name, choice, kernels, source_name,
                            detail + config_text(kernels[0].cdef, choice.config, target))


def memo_key(key: str, config: Config | None, target: Target, split_outputs: bool,
             buffers: BufferPlan = DENSE) -> tuple:
    """What a function's kernels depend on: its workload key, the config, the target, the split
    and where their buffers lie."""
    return (key, config, target, split_outputs) + ((buffers,) if buffers else ())


def kernel_request(fn: Function, source: ScheduleSource | None, target: Target, *,
                   split_outputs: bool = False, buffers: BufferPlan = DENSE
                   ) -> tuple[tuple, list[ComputeDef], Config | None] | None:
    """What `compile_primitive` will compile for `fn`, to compile it ahead (elsewhere): its memo
    key, computes and config; None for a function that runs no scheduled kernel."""
    choice = choose_schedule(fn, source, target)
    if choice.lowered is None:
        return None
    cdefs = [buffers.apply(c) for c in _computes(choice.lowered, split_outputs)]
    return memo_key(choice.key, choice.config, target, split_outputs, buffers), cdefs, choice.config


def _computes(lowered: LoweredFunction, split_outputs: bool) -> list[ComputeDef]:
    """The computes a function's kernels are compiled from: one, or one per output when split."""
    return _split(lowered.cdef) if split_outputs else [lowered.cdef]


def _split(cdef: ComputeDef) -> list[ComputeDef]:
    if len(cdef.outputs) == 1:
        return [cdef]
    return [ComputeDef(cdef.inputs, (o,), f"{cdef.name}_{k}") for k, o in enumerate(cdef.outputs)]


def config_text(cdef: ComputeDef, config: Config | None, target: Target) -> str:
    """The schedule a kernel was compiled with, for the build report."""
    if config is not None:
        return f"{config.template} {config.as_dict()}"
    try:
        tmpl = template_for(cdef, target=target)
        return f"{tmpl.name} {tmpl.default(cdef, target).as_dict()}"
    except Exception:  # a compute no template claims is scheduled by explicit steps
        return "explicit steps"


__all__ = ["KernelMemo", "PrimitiveKernels", "ScheduleChoice", "choose_schedule", "compile_primitive",
           "config_text", "kernel_name", "kernel_request", "memo_key"]
