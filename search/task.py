"""A kernel tuning task: one compute, its schedule space on a target, and how to check a candidate.

A `Task` carries everything a measurement worker needs to rebuild and verify a candidate in another
process (it pickles: the compute definition is plain data, the target travels as its fields), and
everything the tuning log needs to file the result: a stable workload key derived from the compute's
structure, shapes and dtypes (the structural hash of its naive lowering), a workload description for
nearest-neighbour transfer, and a FLOP count for GFLOP/s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.codegen.llvm.host import host_target
from autorelay.kernel import as_compute_def, compile_kernel
from autorelay.lower.workload import compute_key
from autorelay.schedule.space import Config, Space
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te.expr import Bin, Call, Expr, Reduce, Select, is_float
from autorelay.te.tensor import ComputeDef, topo_order
from autorelay.te.traverse import children

Reference = Callable[..., "np.ndarray | Sequence[np.ndarray]"]


def _float_ops(e: Expr) -> int:
    """Float arithmetic nodes evaluated for one element: of a select, its condition and the costlier
    branch (one runs; a Winograd transform is a chain of selects on the position, one per row)."""
    if isinstance(e, Select):
        return _float_ops(e.cond) + max(_float_ops(e.t), _float_ops(e.f))
    own = 1 if isinstance(e, (Bin, Call)) and is_float(e.dtype) else 0
    return own + sum(_float_ops(c) for c in children(e))


def count_flops(cdef: ComputeDef) -> float:
    """Floating-point operations of one kernel call: per computed element, the float arithmetic in
    its body (plus one combine per reduction step) times the reduction extent."""
    total = 0.0
    for t in topo_order(list(cdef.outputs)):
        if t.op is None:
            continue
        body = t.op.body
        red = 1
        ops = 0
        if isinstance(body, Reduce):
            for a in body.axes:
                red *= a.extent
            ops += 1
            body = body.body
        ops += _float_ops(body)
        total += float(np.prod(t.shape)) * red * ops
    return total


@dataclass(eq=False)
class Task:
    """One kernel to tune. Build it with `kernel_task`."""

    name: str
    cdef: ComputeDef
    target: Target
    template: str
    space: Space
    default: Config
    flops: float
    key: str
    workload: dict[str, Any]
    reference: Reference | None = None
    seed: int = 0
    rtol: float = 1e-3
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        # inputs and reference outputs are recomputed (and cached) by whichever process needs them
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "_cache"}

    def __setstate__(self, d: dict[str, Any]) -> None:
        for k, v in d.items():
            setattr(self, k, v)
        self._cache = {}

    def config(self, index: int) -> Config:
        return self.space.get(index)

    def config_from_json(self, d: dict[str, Any]) -> Config:
        """A logged config (the log sorts JSON keys) back in this space's knob order, so it compares
        equal to `space.get(...)` and its knob features line up."""
        cfg = Config.from_json(d)
        names = [k.name for k in self.space.knobs]
        if cfg.template == self.template and sorted(names) == sorted(n for n, _ in cfg.values):
            cfg = Config(cfg.template, tuple((n, cfg[n]) for n in names))
        return cfg

    def index(self, config: Config) -> int:
        """The config's index in the space, or -1 when it lies outside (e.g. a transferred config)."""
        try:
            return self.space.index(config)
        except (ValueError, KeyError):
            return -1

    def inputs(self) -> list[np.ndarray]:
        """Deterministic random inputs (seeded), cached: every candidate sees the same data."""
        if "inputs" not in self._cache:
            rng = np.random.default_rng(self.seed)
            arrays = []
            for t in self.cdef.inputs:
                if is_float(t.dtype):
                    arrays.append(rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype))
                else:
                    arrays.append(rng.integers(-4, 5, t.shape).astype(t.dtype))
            self._cache["inputs"] = arrays
        return self._cache["inputs"]

    def expected(self) -> list[np.ndarray]:
        """Reference outputs: the task's NumPy oracle, or else the unscheduled (naive loop nest)
        kernel, which shares no schedule decision with any candidate."""
        if "expected" not in self._cache:
            ins = self.inputs()
            if self.reference is not None:
                out = self.reference(*ins)
            else:
                out = compile_kernel(self.cdef, (), self.target.with_threads(1)).run(*ins)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            for o, t in zip(outs, self.cdef.outputs):
                if tuple(np.shape(o)) != t.shape:
                    raise ValueError(f"task {self.name}: reference output has shape {np.shape(o)}, "
                                     f"the compute's output {t.name} is {list(t.shape)}")
            self._cache["expected"] = [np.asarray(o) for o in outs]
        return self._cache["expected"]

    def check(self, outputs: Sequence[np.ndarray]) -> str | None:
        """None when `outputs` match the reference, else a message naming the worst mismatch."""
        for t, got, want in zip(self.cdef.outputs, outputs, self.expected()):
            got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
            if not np.all(np.isfinite(got64) | ~np.isfinite(want64)):
                return f"output {t.name} has non-finite values where the reference has none"
            scale = float(np.max(np.abs(want64), initial=0.0)) + 1e-6
            err = np.abs(got64 - want64)
            worst = float(np.max(err, initial=0.0))
            if worst > self.rtol * scale:
                at = tuple(int(x) for x in np.unravel_index(int(np.argmax(err)), err.shape))
                return (f"output {t.name} differs from the reference: max |error| {worst:.3g} at {at} "
                        f"(got {got64[at]:.6g}, want {want64[at]:.6g}; tolerance {self.rtol * scale:.3g})")
        return None


def kernel_task(
    cdef_or_builder: Any,
    target: Target | None = None,
    *,
    name: str | None = None,
    reference: Reference | None = None,
    template: str | None = None,
    seed: int = 0,
    rtol: float = 1e-3,
) -> Task:
    """A task for one compute: a ComputeDef, an output Tensor, (inputs, outputs), or a zero-argument
    callable returning one of those. `reference(*inputs)` is the NumPy oracle (default: the naive
    loop nest compiled without a schedule)."""
    is_builder = callable(cdef_or_builder) and not hasattr(cdef_or_builder, "op")
    obj = cdef_or_builder() if is_builder else cdef_or_builder
    cdef = as_compute_def(obj)
    target = target or host_target()
    tmpl = template_for(cdef, template, target)
    space = tmpl.space(cdef, target)
    default = tmpl.default(cdef, target)
    shapes = [list(t.shape) for t in (*cdef.inputs, *cdef.outputs)]
    workload = {
        "family": tmpl.name,
        "name": name or cdef.name,
        "shapes": shapes,
        "dtypes": [t.dtype for t in (*cdef.inputs, *cdef.outputs)],
    }
    return Task(name or cdef.name, cdef, target, tmpl.name, space, default, count_flops(cdef),
                compute_key(cdef, tmpl.name), workload, reference, seed, rtol)
