"""Resolving a `cuda` target: its architecture and the device limits templates and codegen check.

With a GPU present (and no `-arch` given, or the same one) the limits come from the driver;
otherwise from the documented defaults of the architecture (CUDA C Programming Guide, "Compute
Capabilities"): 1024 threads per block, 48 KiB of static shared memory per block (more needs a
dynamic opt-in this backend does not use), warps of 32, 64 Ki 32-bit registers per block; and
the multiprocessor count of the architecture's data-centre part (V100 80, T4 40, A100 108, A10 72,
Orin 16, L4 58, H100 132), which only sizes default grids: `-multiprocessor_count=` overrides it.

`-device=emulated` makes a target whose kernels are still emitted as PTX (and checked by ptxas)
but run as their CPU emulation on host memory (`autorelay.codegen.nvptx.host_device`): whole
GPU-scheduled models then run, and are checked, where no GPU exists. Its limits are the arch's
defaults, never a present GPU's.
"""

from __future__ import annotations

from autorelay.codegen.nvptx.driver import CudaDriverError, open_driver
from autorelay.target import CUDA_LIMITS, Target, TargetError, TargetSpec

DEFAULT_ARCH = "sm_80"
# per multiprocessor on sm_70 to sm_90 alike: resident threads, resident blocks, shared memory
SM_THREADS, SM_BLOCKS, SM_SHARED = 2048, 32, 164 * 1024
# architectures LLVM's NVPTX target and ptxas accept here (sm_90a-style variants are not used)
ARCHES = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")
_DEFAULTS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 48 * 1024,
             "warp_size": 32, "registers_per_block": 65536}
_MULTIPROCESSORS = {"sm_70": 80, "sm_75": 40, "sm_80": 108, "sm_86": 72, "sm_87": 16, "sm_89": 58,
                    "sm_90": 132}
ARCH_LIMITS: dict[str, dict[str, int]] = {a: {**_DEFAULTS, "multiprocessor_count": _MULTIPROCESSORS[a]}
                                          for a in ARCHES}


def driver_limits(arch: str | None) -> tuple[str, dict[str, int]] | None:
    """(arch, limits) of GPU 0 from the driver, or None without a driver/GPU or if `arch` was
    asked for and the GPU is a different one."""
    try:
        drv = open_driver()
        found = drv.arch
        limits = {name: drv.attribute(name) for name in CUDA_LIMITS}
    except CudaDriverError:
        return None
    if arch is not None and arch != found:
        return None
    return found, limits


def resolve_cuda(spec: TargetSpec) -> Target:
    """The concrete cuda target of `spec`: its arch (given, the GPU's, or DEFAULT_ARCH) and every
    limit in CUDA_LIMITS (given as an option, the GPU's, or the arch's default)."""
    opts = dict(spec.options)
    unknown = set(opts) - {"arch", "device", *CUDA_LIMITS}
    if unknown:
        raise TargetError(f"unknown option(s) for cuda: {', '.join('-' + u for u in sorted(unknown))} "
                          f"(known: -arch, -device, {', '.join('-' + n for n in CUDA_LIMITS)}, -threads)")
    device = opts.pop("device", None)
    if device not in (None, "emulated"):
        raise TargetError(f"cuda -device={device}: unknown device (known: emulated; leave it out for "
                          "the GPU)")
    arch = opts.get("arch")
    if arch is not None and arch not in ARCH_LIMITS:
        raise TargetError(f"cuda -arch={arch}: unknown architecture (known: {', '.join(ARCHES)})")
    have = all(n in opts for n in CUDA_LIMITS)
    probed = None if have or device else driver_limits(arch)
    if probed is not None:
        arch, limits = probed[0], dict(probed[1])
        if arch not in ARCH_LIMITS:
            raise TargetError(f"the GPU is {arch}, which this backend does not know "
                              f"(known: {', '.join(ARCHES)}); give -arch= explicitly")
    else:
        arch = arch or DEFAULT_ARCH
        limits = dict(ARCH_LIMITS[arch])
    for n in CUDA_LIMITS:
        if n in opts:
            if not opts[n].isdigit() or int(opts[n]) < 1:
                raise TargetError(f"cuda -{n} must be a positive integer, got {opts[n]!r}")
            limits[n] = int(opts[n])
    named = {"arch": arch, **{n: str(v) for n, v in limits.items()}, **({"device": device} if device else {})}
    options = tuple(sorted(named.items()))
    # host threads do not change GPU code or timing: one unless the text asks otherwise
    return Target(cpu=arch, kind="cuda", threads=spec.threads or 1, triple="nvptx64-nvidia-cuda",
                  options=options)
