"""Graph executor: runs a dataflow model as a flat list of kernel calls on preallocated buffers.

Everything that can be decided once is decided in the constructor: every slot's array (a view
into its planned storage block), every kernel's argument addresses (inputs, outputs, its scratch
buffers in the shared workspace arena), and for each parallel segment the thread-pool dispatch.
A call then copies the inputs into their buffers and runs `for f, args in calls: f(*args)` — one
ctypes call per serial kernel segment, no allocation, no argument checking.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.codegen.llvm.threads import pointer_array, run_job
from autorelay.runtime.graph_plan import ALIGN, MemoryPlan, Slot, Step, aligned_empty, view
from autorelay.schedule.relayout import relayout


def workspace_offsets(workspaces: Sequence[tuple[tuple[int, ...], str]]) -> tuple[list[int], int]:
    """Byte offsets of a kernel's scratch buffers in the shared arena, and the bytes they take."""
    offs, total = [], 0
    for shape, dtype in workspaces:
        offs.append(total)
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        total += -(-n // ALIGN) * ALIGN
    return offs, total


@dataclass
class KernelSpec:
    """A compiled kernel as the plan needs it: its segment functions and scratch buffers."""

    key: str
    workspaces: list[tuple[tuple[int, ...], str]]
    functions: list[tuple[Callable[..., None], int]] = field(default_factory=list)  # (fn, parallel extent)
    jobs: list[int] = field(default_factory=list)  # per segment, its job thunk's address (0: serial)

    @property
    def workspace_offsets(self) -> tuple[list[int], int]:
        return workspace_offsets(self.workspaces)


@dataclass
class GraphPlan:
    slots: list[Slot]
    steps: list[Step]
    input_names: list[str]
    input_slots: list[int]
    output_slots: list[int]
    output_is_tuple: bool
    memory: MemoryPlan


class GraphExecutor:
    def __init__(self, plan: GraphPlan, kernels: Sequence[KernelSpec], consts: Sequence[np.ndarray],
                 functions: Sequence[Callable[..., Any]], threads: int = 1) -> None:
        self.plan, self.kernels, self.functions = plan, list(kernels), list(functions)
        self._storage = [aligned_empty(n) for n in plan.memory.storage_bytes]
        self._arena = aligned_empty(max(plan.memory.workspace_bytes, ALIGN))
        self.arrays: list[np.ndarray] = []
        for s in plan.slots:
            if s.kind == "input":
                self.arrays.append(view(aligned_empty(max(s.nbytes, 1)), s.shape, s.dtype))
            elif s.kind == "const":
                self.arrays.append(consts[s.index])
            elif s.kind == "alias":  # a view: the slot it views comes first
                n = int(np.prod(s.shape, dtype=np.int64))
                self.arrays.append(self.arrays[s.index].reshape(-1)[s.offset:s.offset + n].reshape(s.shape))
            else:
                self.arrays.append(view(self._storage[s.index], s.shape, s.dtype))
        self.inputs = [self.arrays[i] for i in plan.input_slots]
        self.set_threads(threads)

    def set_threads(self, threads: int) -> None:
        """Rebuild the call list for a thread count (threads do not change generated code)."""
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self.calls: list[tuple[Callable[..., Any], tuple]] = []
        self._argvs: list[ctypes.Array] = []  # the pointer arrays the calls' job thunks read
        self.step_ranges: list[tuple[int, int]] = []
        for st in self.plan.steps:
            start = len(self.calls)
            self.calls.extend(self._step_calls(st))
            self.step_ranges.append((start, len(self.calls)))

    def _step_calls(self, st: Step) -> list[tuple[Callable[..., Any], tuple]]:
        arrays = self.arrays
        if st.kind == "kernel":
            spec = self.kernels[st.kernel]
            offs, _ = spec.workspace_offsets
            base = int(self._arena.ctypes.data)
            ptrs = tuple(int(arrays[a].ctypes.data) for a in (*st.args, *st.outputs))
            ptrs += tuple(base + o for o in offs)
            out = []
            argv = pointer_array(ptrs)
            self._argvs.append(argv)
            for (fn, par), job in zip(spec.functions, spec.jobs):
                if par and self.threads > 1:
                    out.append((run_job, (job, ctypes.addressof(argv), par, self.threads)))
                else:
                    out.append((fn, (*ptrs, 0, par)))
            return out
        if st.kind in ("fallback", "external"):
            ref = self.functions[st.function]
            ins = [arrays[a] for a in st.args]
            outs = [arrays[o] for o in st.outputs]
            return [(_run_fallback, (ref, ins, outs))]
        if st.kind == "relayout":
            return [(_run_relayout, (arrays[st.args[0]], arrays[st.outputs[0]], st.relayout))]
        raise ValueError(f"unknown step kind {st.kind!r}")

    def run(self, args: Sequence[np.ndarray]) -> Any:
        """Run on already-checked input arrays; returns fresh output arrays."""
        for buf, a in zip(self.inputs, args):
            np.copyto(buf, a, casting="no")
        for f, a in self.calls:
            f(*a)
        outs = [self.arrays[o].copy() for o in self.plan.output_slots]
        return tuple(outs) if self.plan.output_is_tuple else outs[0]

    def profile(self, args: Sequence[np.ndarray], repeat: int = 10) -> list[float]:
        """Median seconds of each step over `repeat` runs (after one warm-up run)."""
        self.run(args)
        times = np.zeros((repeat, len(self.plan.steps)))
        for r in range(repeat):
            for buf, a in zip(self.inputs, args):
                np.copyto(buf, a, casting="no")
            for k, (lo, hi) in enumerate(self.step_ranges):
                t0 = time.perf_counter()
                for f, a in self.calls[lo:hi]:
                    f(*a)
                times[r, k] = time.perf_counter() - t0
        return [float(x) for x in np.median(times, axis=0)]


def _run_fallback(ref: Callable[..., Any], ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
    from autorelay.runtime.fallback import flatten_value

    res = flatten_value(ref(*ins))
    for o, r in zip(outs, res):
        np.copyto(o, r, casting="unsafe")


def _run_relayout(src: np.ndarray, dst: np.ndarray, ops: list) -> None:
    np.copyto(dst, relayout(src, ops))
