"""Device memory in host RAM, for `cuda -device=emulated` targets: the `Driver`'s memory, launch
and timing interface, with each kernel's "launch" running its CPU emulation
(`autorelay.codegen.nvptx.emulate`) on host addresses.

It lets the GPU runtime itself — device buffers, the static device-memory plan, copies only at a
model's edges, launches by pointer — run and be checked against NumPy where no GPU exists. A
"device pointer" here is a host address, so pointer arithmetic (views at an offset) means the
same as on the GPU.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence

import numpy as np

from autorelay.codegen.nvptx.launch import Launch

EmulatedFunction = tuple[Callable[..., None], int]  # a CPU segment of the emulation and its extent


class HostDevice:
    """The `Driver` interface over host memory (see the module docstring)."""

    def __init__(self) -> None:
        self._blocks: dict[int, np.ndarray] = {}  # address -> the array that owns it

    def alloc(self, nbytes: int) -> int:
        block = np.zeros(max(int(nbytes), 1) + 64, np.uint8)
        ptr = -(-block.ctypes.data // 64) * 64  # aligned like cuMemAlloc's allocations
        self._blocks[ptr] = block
        return ptr

    def free(self, ptr: int) -> None:
        self._blocks.pop(ptr, None)

    def to_device(self, ptr: int, host_addr: int, nbytes: int) -> None:
        ctypes.memmove(ptr, host_addr, nbytes)

    def to_host(self, host_addr: int, ptr: int, nbytes: int) -> None:
        ctypes.memmove(host_addr, ptr, nbytes)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def synchronize(self) -> None:
        pass

    def bind_launch(self, fn: EmulatedFunction, launch: Launch,
                    pointers: Sequence[int]) -> Callable[[], None]:
        """A call that runs the emulated segment `fn` on `pointers` (the grid is loops inside it)."""
        cfn, extent = fn
        args = (*[int(p) for p in pointers], 0, extent)
        return lambda: cfn(*args)

    def time_ms(self, run: Callable[[], None], repeat: int) -> float:
        t0 = time.perf_counter()
        for _ in range(repeat):
            run()
        return (time.perf_counter() - t0) / max(repeat, 1) * 1e3
