"""A loaded GPU kernel: its CUDA module, one function and launch per segment, and the calls that
copy NumPy arrays to the device, launch the segments in order and copy the outputs back."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autorelay.codegen.nvptx.driver import Driver, open_driver
from autorelay.codegen.nvptx.launch import Launch


@dataclass(eq=False)
class GPUModule:
    key: str
    driver: Driver  # or a `HostDevice` for emulated targets
    functions: list[tuple[object, Launch]]
    ptx: str

    def launch_all(self, pointers: list[int]) -> None:
        for call in self.bind_launches(pointers):
            call()

    def bind_launches(self, pointers: list[int]) -> list[Callable[[], None]]:
        """One prepared call per segment, launching it on `pointers` (see `Driver.bind_launch`)."""
        return [self.driver.bind_launch(fn, launch, pointers) for fn, launch in self.functions]

    def bind(self, ins: list[np.ndarray], outs: list[np.ndarray], ws: list[np.ndarray]) -> GPUBoundKernel:
        return GPUBoundKernel(self, ins, outs, ws)

    def run(self, arrays: list[np.ndarray], repeat: int = 0) -> float | None:
        """Run once on `arrays` (contiguous; every parameter then workspace, in order): all are
        copied to the device and back, so outputs are written in place. With `repeat` > 0 also
        time that many further launches with CUDA events; returns ms per launch."""
        drv = self.driver
        if not all(a.flags.c_contiguous for a in arrays):
            raise ValueError("GPUModule.run: arrays must be C-contiguous (they are written in place)")
        ptrs = [drv.alloc(a.nbytes) for a in arrays]
        try:
            for p, a in zip(ptrs, arrays):
                drv.to_device(p, a.ctypes.data, a.nbytes)
            calls = self.bind_launches(ptrs)

            def launch() -> None:
                for call in calls:
                    call()

            launch()
            drv.synchronize()
            ms = drv.time_ms(launch, repeat) if repeat else None
            for p, a in zip(ptrs, arrays):
                drv.to_host(a.ctypes.data, p, a.nbytes)
            return ms
        finally:
            for p in ptrs:
                drv.free(p)


class GPUBoundKernel:
    """A GPU kernel with its host arrays fixed (the `BoundKernel` of `Kernel.bind` for cuda
    targets): device buffers are allocated once; each call copies the inputs in, launches every
    segment and copies the outputs back, so `Kernel.run` works as it does on the CPU."""

    def __init__(self, module: GPUModule, ins: list[np.ndarray], outs: list[np.ndarray],
                 ws: list[np.ndarray]):
        self.module, self.inputs, self.outputs, self.workspaces = module, ins, outs, ws
        drv = module.driver
        self.pointers = [drv.alloc(a.nbytes) for a in (*ins, *outs, *ws)]
        self._launches = module.bind_launches(self.pointers)

    def launch(self) -> None:
        """Launch every segment on the bound device buffers (no copies, no synchronisation)."""
        for call in self._launches:
            call()

    def time(self, number: int) -> float:
        """Seconds per launch of the kernel on the device, over `number` back-to-back launches
        (CUDA events: the copies in and out that `__call__` adds are not counted)."""
        return self.module.driver.time_ms(self.launch, number) / 1e3

    def __call__(self) -> None:
        drv = self.module.driver
        for p, a in zip(self.pointers, self.inputs):
            drv.to_device(p, a.ctypes.data, a.nbytes)
        self.launch()
        drv.synchronize()
        for p, a in zip(self.pointers[len(self.inputs):], self.outputs):
            drv.to_host(a.ctypes.data, p, a.nbytes)

    def __del__(self) -> None:
        for p in getattr(self, "pointers", ()):
            with contextlib.suppress(Exception):  # the context may be gone at interpreter exit
                self.module.driver.free(p)


def load_module(ptx: str, names: list[str], launches: list[Launch], key: str,
                driver: Driver | None = None) -> GPUModule:
    drv = driver or open_driver()
    mod = drv.load_module(ptx)
    return GPUModule(key, drv, [(drv.function(mod, n), launch) for n, launch in zip(names, launches)], ptx)
