"""A loaded GPU kernel: its CUDA module, one function and launch per segment, and the calls that
copy NumPy arrays to the device, launch the segments in order and copy the outputs back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autorelay.codegen.nvptx.driver import Driver, open_driver
from autorelay.codegen.nvptx.launch import Launch


@dataclass(eq=False)
class GPUModule:
    key: str
    driver: Driver
    functions: list[tuple[object, Launch]]
    ptx: str

    def launch_all(self, pointers: list[int]) -> None:
        for fn, launch in self.functions:
            self.driver.launch(fn, launch.grid, launch.block, pointers)

    def run(self, arrays: list[np.ndarray], outputs: int, repeat: int = 0) -> float | None:
        """Run on `arrays` (inputs, outputs, workspaces in parameter order; the outputs and
        workspaces are written in place). Copies the first `len(arrays) - outputs…` in, launches,
        copies everything back; with `repeat` > 0 also times that many launches (ms per run)."""
        drv = self.driver
        arrays = [np.ascontiguousarray(a) for a in arrays]
        ptrs = [drv.alloc(a.nbytes) for a in arrays]
        try:
            for p, a in zip(ptrs, arrays):
                drv.to_device(p, a.ctypes.data, a.nbytes)
            self.launch_all(ptrs)
            drv.synchronize()
            ms = drv.time_ms(lambda: self.launch_all(ptrs), repeat) if repeat else None
            for p, a in zip(ptrs, arrays):
                drv.to_host(a.ctypes.data, p, a.nbytes)
            return ms
        finally:
            for p in ptrs:
                drv.free(p)


def load_module(ptx: str, names: list[str], launches: list[Launch], key: str,
                driver: Driver | None = None) -> GPUModule:
    drv = driver or open_driver()
    mod = drv.load_module(ptx)
    return GPUModule(key, drv, [(drv.function(mod, n), launch) for n, launch in zip(names, launches)], ptx)
