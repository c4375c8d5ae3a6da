"""The CUDA driver through ctypes on `libcuda.so.1`: device attributes, loading PTX, device memory,
launching kernels and timing them with events. No CUDA toolkit or Python binding is needed, only
the driver that every NVIDIA GPU machine has; where it is absent, `open_driver` raises one clear
`CudaDriverError("no CUDA driver found ...")` and GPU tests skip on it.

The driver is opened explicitly and passed around (no module-level "current" context): the
primary context of the chosen device is retained once and made current before each call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autorelay.codegen.nvptx.launch import Launch
from autorelay.errors import AutoRelayError

NO_DRIVER = "no CUDA driver found"

# CUdevice_attribute values (cuda.h)
ATTR = {
    "max_threads_per_block": 1,
    "max_shared_memory_per_block": 8,
    "warp_size": 10,
    "registers_per_block": 12,
    "multiprocessor_count": 16,
    "max_threads_per_multiprocessor": 39,
    "max_shared_memory_per_multiprocessor": 81,
    "registers_per_multiprocessor": 82,
    "max_blocks_per_multiprocessor": 106,
    "reserved_shared_memory_per_block": 111,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
}


class CudaDriverError(AutoRelayError, RuntimeError):
    """The CUDA driver is absent or a driver call failed (the message names the call and code)."""


def _load_library() -> ctypes.CDLL:
    errors = []
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise CudaDriverError(f"{NO_DRIVER} (libcuda.so.1 could not be loaded: {errors[0]})")


@dataclass
class Driver:
    """An initialised driver with the primary context of one device current."""

    lib: ctypes.CDLL
    device: int
    context: ctypes.c_void_p

    def check(self, rc: int, call: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise CudaDriverError(f"{call} failed: {(name.value or b'?').decode()} ({rc})")

    def call(self, fn: str, *args) -> None:
        self.check(getattr(self.lib, fn)(*args), fn)

    def attribute(self, name: str) -> int:
        v = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(v), ATTR[name], self.device)
        return v.value

    @property
    def arch(self) -> str:
        return f"sm_{self.attribute('compute_capability_major')}{self.attribute('compute_capability_minor')}"

    def current(self) -> None:
        self.call("cuCtxSetCurrent", self.context)

    # ---- modules and launches --------------------------------------------------------------
    def load_module(self, ptx: str) -> ctypes.c_void_p:
        self.current()
        mod = ctypes.c_void_p()
        log = ctypes.create_string_buffer(8192)
        opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
        rc = self.lib.cuModuleLoadDataEx(ctypes.byref(mod), ctypes.c_char_p(ptx.encode()), 2, opts, vals)
        if rc != 0:
            raise CudaDriverError(f"cuModuleLoadDataEx failed ({rc}): {log.value.decode(errors='replace')}")
        return mod

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
        return fn

    def bind_launch(self, fn: ctypes.c_void_p, launch: Launch, pointers: Sequence[int]) -> Callable[[], None]:
        """A call that launches `fn` on the default stream with device pointers `pointers` as its
        arguments, everything converted once: what an executor replays each run (one ctypes call
        per kernel, no per-call argument building)."""
        vals = (ctypes.c_uint64 * len(pointers))(*[int(p) for p in pointers])
        base, size = ctypes.addressof(vals), ctypes.sizeof(ctypes.c_uint64)
        params = (ctypes.c_void_p * len(pointers))(*[base + size * i for i in range(len(pointers))])
        cu = self.lib.cuLaunchKernel
        args = (fn, *map(ctypes.c_uint, launch.grid), *map(ctypes.c_uint, launch.block),
                ctypes.c_uint(0), None, params, None)

        def run(keep: tuple = (vals, params)) -> None:  # `keep`: the argument arrays outlive the call
            rc = cu(*args)
            if rc:
                self.check(rc, "cuLaunchKernel")

        return run

    def synchronize(self) -> None:
        self.call("cuCtxSynchronize")

    # ---- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.current()
        p = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1)))
        return p.value

    def free(self, ptr: int) -> None:
        self.call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def to_device(self, ptr: int, host_addr: int, nbytes: int) -> None:
        self.call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), ctypes.c_void_p(host_addr),
                  ctypes.c_size_t(nbytes))

    def to_host(self, host_addr: int, ptr: int, nbytes: int) -> None:
        self.call("cuMemcpyDtoH_v2", ctypes.c_void_p(host_addr), ctypes.c_uint64(ptr),
                  ctypes.c_size_t(nbytes))

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device to device."""
        self.call("cuMemcpyDtoD_v2", ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes))

    # ---- timing ------------------------------------------------------------------------------
    def time_ms(self, run, repeat: int) -> float:
        """Milliseconds per call of `run()` (which launches work), measured with CUDA events."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(start), 0)
        self.call("cuEventCreate", ctypes.byref(stop), 0)
        try:
            self.call("cuEventRecord", start, None)
            for _ in range(repeat):
                run()
            self.call("cuEventRecord", stop, None)
            self.call("cuEventSynchronize", stop)
            ms = ctypes.c_float()
            self.call("cuEventElapsedTime", ctypes.byref(ms), start, stop)
            return ms.value / repeat
        finally:
            self.lib.cuEventDestroy_v2(start)
            self.lib.cuEventDestroy_v2(stop)


def open_driver(device: int = 0) -> Driver:
    """Initialise the driver and retain `device`'s primary context; CudaDriverError (starting
    "no CUDA driver found") where libcuda is absent, or naming the failing call."""
    lib = _load_library()
    drv = Driver(lib, device, ctypes.c_void_p())
    drv.call("cuInit", 0)
    count = ctypes.c_int()
    drv.call("cuDeviceGetCount", ctypes.byref(count))
    if not 0 <= device < count.value:
        raise CudaDriverError(f"CUDA device {device} not found ({count.value} devices)")
    dev = ctypes.c_int()
    drv.call("cuDeviceGet", ctypes.byref(dev), device)
    drv.device = dev.value
    drv.call("cuDevicePrimaryCtxRetain", ctypes.byref(drv.context), drv.device)
    drv.current()
    return drv
