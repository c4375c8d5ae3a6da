"""The graph executor on a GPU: the same plan as the host's (`graph_plan`), with every slot in
device memory.

Decided once, in the constructor: one device allocation per storage block of the memory plan,
per input and per constant (weights are copied to the device here, once), a workspace arena
shared by all kernels, and for every step its prepared launches (`Driver.bind_launch`: arguments
converted once). A call copies the inputs to the device, replays the launches — one ctypes call
per kernel, no host copies between layers — synchronises once and copies the outputs back.

Steps that are not GPU kernels (a fallback's NumPy references, a re-layout) run on the host
between a copy down and a copy up; the build report lists them, so such a model is never
silently slow. A model output that is an input or a constant is a device-to-device copy.

`device` is a `Driver` (a real GPU) or a `HostDevice` (`cuda -device=emulated`: host memory,
emulated kernels), passed in explicitly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autorelay.runtime.graph_executor import GraphPlan, _run_fallback, _run_relayout, workspace_offsets
from autorelay.runtime.graph_plan import ALIGN, Slot, Step


class GPUGraphExecutor:
    """Runs a `GraphPlan` on device memory (see the module docstring)."""

    def __init__(self, plan: GraphPlan, modules: Sequence[Any], workspaces: Sequence[list], consts:
                 Sequence[np.ndarray], references: Sequence[Callable[..., Any]], device: Any) -> None:
        self.plan, self.modules, self.device = plan, list(modules), device
        self.threads = 1  # host threads do not run GPU kernels
        self._owned: list[int] = []
        storage = [self._alloc(n) for n in plan.memory.storage_bytes]
        arena = self._alloc(max(plan.memory.workspace_bytes, ALIGN))
        self.pointers: list[int] = []
        for s in plan.slots:
            if s.kind == "input":
                self.pointers.append(self._alloc(s.nbytes))
            elif s.kind == "const":
                c = np.ascontiguousarray(consts[s.index])
                p = self._alloc(c.nbytes)
                device.to_device(p, c.ctypes.data, c.nbytes)
                self.pointers.append(p)
            elif s.kind == "alias":  # a view at an element offset: set below, once its slot has one
                self.pointers.append(0)
            else:
                self.pointers.append(storage[s.index])
        for k, s in enumerate(plan.slots):
            if s.kind == "alias":
                self.pointers[k] = self.pointers[s.index] + s.offset * np.dtype(s.dtype).itemsize
        self.calls: list[Callable[[], None]] = []
        self.step_ranges: list[tuple[int, int]] = []
        for st in plan.steps:
            start = len(self.calls)
            self.calls.extend(self._step_calls(st, workspaces, arena, references))
            self.step_ranges.append((start, len(self.calls)))

    def _alloc(self, nbytes: int) -> int:
        p = self.device.alloc(nbytes)
        self._owned.append(p)
        return p

    def _step_calls(self, st: Step, workspaces: Sequence[list], arena: int,
                    references: Sequence[Callable[..., Any]]) -> list[Callable[[], None]]:
        ptrs = self.pointers
        if st.kind == "kernel":
            offs, _ = workspace_offsets(workspaces[st.kernel])
            args = [ptrs[a] for a in (*st.args, *st.outputs)] + [arena + o for o in offs]
            return self.modules[st.kernel].bind_launches(args)
        if st.kind == "relayout" and not st.relayout:  # a plain copy stays on the device
            src, dst = st.args[0], st.outputs[0]
            nbytes = self.plan.slots[dst].nbytes
            return [lambda: self.device.copy(ptrs[dst], ptrs[src], nbytes)]
        if st.kind in ("fallback", "external"):
            ref = references[st.function]
            return [lambda: self._on_host(st, lambda ins, outs: _run_fallback(ref, ins, outs))]
        if st.kind == "relayout":
            return [lambda: self._on_host(st, lambda ins, outs: _run_relayout(ins[0], outs[0], st.relayout))]
        raise ValueError(f"unknown step kind {st.kind!r}")

    def _on_host(self, st: Step, run: Callable[[list[np.ndarray], list[np.ndarray]], None]) -> None:
        """A host step between the device's buffers: copy its inputs down, run, copy outputs up."""
        self.device.synchronize()
        ins = [self._download(a) for a in st.args]
        outs = [np.empty(self.plan.slots[o].shape, self.plan.slots[o].dtype) for o in st.outputs]
        run(ins, outs)
        for o, arr in zip(st.outputs, outs):
            self.device.to_device(self.pointers[o], arr.ctypes.data, arr.nbytes)

    def _download(self, slot_id: int) -> np.ndarray:
        s: Slot = self.plan.slots[slot_id]
        arr = np.empty(s.shape, s.dtype)
        self.device.to_host(arr.ctypes.data, self.pointers[slot_id], arr.nbytes)
        return arr

    def set_threads(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")

    def _upload(self, args: Sequence[np.ndarray]) -> None:
        for sid, a in zip(self.plan.input_slots, args):
            a = np.ascontiguousarray(a)
            self.device.to_device(self.pointers[sid], a.ctypes.data, a.nbytes)

    def launch(self) -> None:
        """Every step's launches, without synchronising (inputs already on the device)."""
        for call in self.calls:
            call()

    def run(self, args: Sequence[np.ndarray]) -> Any:
        """Run on already-checked input arrays; returns fresh host output arrays."""
        self._upload(args)
        self.launch()
        self.device.synchronize()
        return self.plan.pack([self._download(o) for o in self.plan.output_slots])

    def time_ms(self, args: Sequence[np.ndarray], repeat: int = 20) -> float:
        """Device milliseconds per forward pass (inputs already copied), by the device's timer."""
        self._upload(args)
        self.launch()
        self.device.synchronize()
        return self.device.time_ms(self.launch, repeat)

    def profile(self, args: Sequence[np.ndarray], repeat: int = 10) -> list[float]:
        """Seconds of each step (device time, the median of `repeat` runs of it alone)."""
        self.run(args)
        out = []
        for lo, hi in self.step_ranges:
            def step(calls=self.calls[lo:hi]) -> None:
                for c in calls:
                    c()

            out.append(float(np.median([self.device.time_ms(step, 1) for _ in range(repeat)])) / 1e3)
        return out

    def __del__(self) -> None:
        for p in getattr(self, "_owned", ()):
            with contextlib.suppress(Exception):  # the context may be gone at interpreter exit
                self.device.free(p)
