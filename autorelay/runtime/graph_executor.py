"""Graph executor: runs a dataflow model as a flat list of kernel calls on preallocated buffers.

Everything that can be decided once is decided in the constructor: every slot's array (a view
into its planned storage block), every kernel's argument addresses (inputs, outputs, its scratch
buffers in the shared workspace arena), and every kernel segment's program record (its job
thunk, argument array, parallel extent and chunk size). A call then binds the inputs and runs the
records in native code (`team.Team.run_program`), one ctypes call for each run of records
between Python steps: no allocation, no argument checking, and no return to Python between
kernels. Per call to a tiny parallel kernel, Python's dispatch (`threads.run_job`) measured 2.3 us
against 1.1 us for the native team call alone on the 2-core AVX-512 host; a model of 50-60
kernel calls (MobileNet-v2) paid that each time.

Inputs are read where the caller keeps them, as ONNX Runtime does: a contiguous input that only
compiled kernels read has its address patched into the calls that read it (and their views), so a
decoder step's megabytes of KV cache are not copied in first. An input that Python code reads (a
fallback, a relayout, an offloaded layer), or one that is not contiguous, is copied into the
executor's own buffer.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.codegen.llvm.team import RECORD
from autorelay.codegen.llvm.threads import Record, chunk_size, pack_records, pointer_array, run_program
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
    jobs: list[int] = field(default_factory=list)  # per segment, its job thunk's address

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
    # a tuple output's shape: nested lists of positions in `output_slots` (None: one flat tuple)
    output_tree: list | None = None

    def pack(self, outs: Sequence[Any]) -> Any:
        """The outputs (one per output slot) in the structure @main returns: one value, a tuple, or
        tuples nested as the function's result nests them."""
        if not self.output_is_tuple:
            return outs[0]
        return _nested(self.output_tree if self.output_tree is not None else list(range(len(outs))), outs)


def _nested(tree: list, outs: Sequence[Any]) -> tuple:
    return tuple(_nested(t, outs) if isinstance(t, list) else outs[t] for t in tree)


class GraphExecutor:
    def __init__(self, plan: GraphPlan, kernels: Sequence[KernelSpec], consts: Sequence[np.ndarray],
                 functions: Sequence[Callable[..., Any]], threads: int = 1) -> None:
        self.plan, self.kernels, self.functions = plan, list(kernels), list(functions)
        self._storage = [aligned_empty(n) for n in plan.memory.storage_bytes]
        for b in plan.memory.zeroed:  # padded slots' borders are read as zeros, and never written
            self._storage[b][:] = 0
        self._arena = aligned_empty(max(plan.memory.workspace_bytes, ALIGN))
        self.arrays: list[np.ndarray] = []
        for s in plan.slots:
            if s.kind == "input":
                self.arrays.append(view(aligned_empty(max(s.nbytes, 1)), s.shape, s.dtype))
            elif s.kind == "const":
                self.arrays.append(consts[s.index])
            elif s.kind in ("alias", "interior"):  # views: made below, once their slot has its array
                self.arrays.append(np.empty(0))
            else:
                self.arrays.append(view(self._storage[s.index], s.shape, s.dtype))
        for k, s in enumerate(plan.slots):
            if s.kind == "alias":
                n = int(np.prod(s.shape, dtype=np.int64))
                self.arrays[k] = self.arrays[s.index].reshape(-1)[s.offset:s.offset + n].reshape(s.shape)
            elif s.kind == "interior":  # strided: its data pointer is its first element
                self.arrays[k] = self.arrays[s.index][tuple(slice(h, h + n) for h, n in zip(s.halo, s.shape))]
        self.inputs = [self.arrays[i] for i in plan.input_slots]
        self._input_of = _input_views(plan)
        self._direct = [True] * len(self.inputs)  # whether input k may be read in place
        for st in plan.steps:
            if st.kind != "kernel":
                for a in st.args:
                    if a in self._input_of:
                        self._direct[self._input_of[a][0]] = False
        self.set_threads(threads)

    def set_threads(self, threads: int) -> None:
        """Rebuild the calls for a thread count (threads do not change generated code).

        Every kernel segment becomes a program record (job thunk, argv, extent, grain; see
        `team.Team.run_program`); a run of consecutive records is one native call, so a model
        with no Python steps runs in one. `calls` keeps one entry per segment or Python step,
        for the profile's per-call times."""
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self._argvs: list[ctypes.Array] = []  # the pointer arrays the records' job thunks read
        # per input, where its address sits: (job argv, position, byte offset)
        self._patches: list[list[tuple[ctypes.Array, int, int]]] = [[] for _ in self.inputs]
        self._bound = [int(b.ctypes.data) for b in self.inputs]
        entries: list[Record | tuple[Callable[..., Any], tuple]] = []
        self.step_ranges: list[tuple[int, int]] = []
        for st in self.plan.steps:
            start = len(entries)
            entries.extend(self._step_entries(st))
            self.step_ranges.append((start, len(entries)))
        self._records = pack_records([e for e in entries if isinstance(e, Record)])
        base, size = ctypes.addressof(self._records), RECORD * 8
        self.calls: list[tuple[Callable[..., Any], tuple]] = []
        self._program: list[tuple[Callable[..., Any], tuple]] = []
        k, run_start = 0, None  # records so far; where the current run of records began
        for e in entries:
            if not isinstance(e, Record):  # a Python step: it ends a run of records
                self.calls.append(e)
                self._program.append(e)
                run_start = None
                continue
            self.calls.append((run_program, (base + k * size, 1, threads)))
            if run_start is None:
                run_start = len(self._program)
                self._program.append((run_program, (base + k * size, 1, threads)))
            else:
                first, count, _ = self._program[run_start][1]
                self._program[run_start] = (run_program, (first, count + 1, threads))
            k += 1

    def _step_entries(self, st: Step) -> list[Record | tuple[Callable[..., Any], tuple]]:
        """A step's program records (kernel segments) or its Python call."""
        arrays = self.arrays
        if st.kind == "kernel":
            spec = self.kernels[st.kernel]
            offs, _ = spec.workspace_offsets
            base = int(self._arena.ctypes.data)
            ptrs = tuple(int(arrays[a].ctypes.data) for a in (*st.args, *st.outputs))
            ptrs += tuple(base + o for o in offs)
            argv = pointer_array(ptrs)
            self._argvs.append(argv)
            for j, a in enumerate(st.args):
                if a in self._input_of:
                    k, off = self._input_of[a]
                    self._patches[k].append((argv, j, off))
            out: list[Record | tuple[Callable[..., Any], tuple]] = []
            for k, ((_fn, par), job) in enumerate(zip(spec.functions, spec.jobs)):
                if not job:
                    raise ValueError(f"kernel {spec.key}: segment {k} has no job thunk")
                out.append(Record(job, ctypes.addressof(argv), par, chunk_size(par, self.threads)))
            return out
        if st.kind in ("fallback", "external"):
            ref = self.functions[st.function]
            ins = [arrays[a] for a in st.args]
            outs = [arrays[o] for o in st.outputs]
            return [(_run_fallback, (ref, ins, outs))]
        if st.kind == "relayout":
            return [(_run_relayout, (arrays[st.args[0]], arrays[st.outputs[0]], st.relayout))]
        raise ValueError(f"unknown step kind {st.kind!r}")

    def bind_inputs(self, args: Sequence[np.ndarray]) -> None:
        """Point the calls at each input where it lies, or copy it into its own buffer (see the
        module docstring). The caller keeps `args` alive until the calls have run."""
        for k, (buf, a) in enumerate(zip(self.inputs, args)):
            if self._direct[k] and a.size and a.flags.c_contiguous and a.ctypes.data % a.itemsize == 0:
                self._bind(k, int(a.ctypes.data))
            else:
                self._bind(k, int(buf.ctypes.data))
                np.copyto(buf, a, casting="no")

    def _bind(self, k: int, address: int) -> None:
        if self._bound[k] == address:
            return
        self._bound[k] = address
        for argv, j, off in self._patches[k]:
            argv[j] = address + off

    def run(self, args: Sequence[np.ndarray]) -> Any:
        """Run on already-checked input arrays; returns fresh output arrays."""
        self.bind_inputs(args)
        for f, a in self._program:
            f(*a)
        return self.plan.pack([self.arrays[o].copy() for o in self.plan.output_slots])

    def _timed_runs(self, args: Sequence[np.ndarray], repeat: int) -> np.ndarray:
        """Seconds of every call in each of `repeat` runs, [repeat, calls], after a warm-up run.

        Before timing a kernel segment, an empty program runs through the same Python path: after
        a kernel that streamed megabytes of weights that path's code runs from cold caches, which
        a model's native program never pays, and it doubled the global pooling that follows
        ResNet-18's last convolution (21.6 against 10.7 us, 2-core AVX-512 host)."""
        self.run(args)
        times = np.zeros((repeat, len(self.calls)))
        for r in range(repeat):
            self.bind_inputs(args)
            for i, (f, a) in enumerate(self.calls):
                if f is run_program:
                    f(a[0], 0, a[2])
                t0 = time.perf_counter()
                f(*a)
                times[r, i] = time.perf_counter() - t0
        return times

    def profile(self, args: Sequence[np.ndarray], repeat: int = 10) -> list[float]:
        """Median seconds of each step over `repeat` runs (after one warm-up run)."""
        times = self._timed_runs(args, repeat)
        return [float(np.median(times[:, lo:hi].sum(axis=1))) for lo, hi in self.step_ranges]

    def profile_calls(self, args: Sequence[np.ndarray], repeat: int = 10) -> list[list[float]]:
        """Per step, the median seconds of each of its calls over `repeat` runs: a kernel makes
        one call per loop nest it compiled to (its segments: a padded copy, a Winograd stage)."""
        med = np.median(self._timed_runs(args, repeat), axis=0)
        return [[float(x) for x in med[lo:hi]] for lo, hi in self.step_ranges]


def _input_views(plan: GraphPlan) -> dict[int, tuple[int, int]]:
    """Each input slot and each view of one: (input position, byte offset into the input)."""
    pos = {sid: k for k, sid in enumerate(plan.input_slots)}
    out = {sid: (k, 0) for sid, k in pos.items()}
    for sid, s in enumerate(plan.slots):
        if s.kind == "alias" and s.index in pos:
            out[sid] = (pos[s.index], s.offset * np.dtype(s.dtype).itemsize)
    return out


def _run_fallback(ref: Callable[..., Any], ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
    from autorelay.runtime.fallback import flatten_value

    res = flatten_value(ref(*ins))
    for o, r in zip(outs, res):
        np.copyto(o, r, casting="unsafe")


def _run_relayout(src: np.ndarray, dst: np.ndarray, ops: list) -> None:
    np.copyto(dst, relayout(src, ops))
