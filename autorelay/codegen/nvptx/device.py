"""Resolving a `cuda` target: its architecture and the device limits templates and codegen check;
and the theoretical occupancy those limits allow a kernel.

With a GPU present (and no `-arch` given, or the same one) the limits come from the driver;
otherwise from the documented defaults of the architecture (CUDA C Programming Guide, "Compute
Capabilities" and "Technical Specifications per Compute Capability"): 1024 threads per block, 48
KiB of static shared memory per block (more needs a dynamic opt-in this backend does not use),
warps of 32, 64 Ki 32-bit registers per block and per multiprocessor; per multiprocessor the
resident threads (2048 on sm_70/80/90, 1024 on sm_75, 1536 on sm_86/87/89), resident blocks (32;
16 on sm_75/86/87, 24 on sm_89) and shared memory (96 KiB on sm_70, 64 on sm_75, 164 on sm_80/87,
100 on sm_86/89, 228 on sm_90), with 1 KiB of it reserved by the system per block from sm_80 on;
and the multiprocessor count of the architecture's data-centre part (V100 80, T4 40, A100 108, A10
72, Orin 16, L4 58, H100 132), which only sizes default grids: `-multiprocessor_count=` overrides it.

`-device=emulated` makes a target whose kernels are still emitted as PTX (and checked by ptxas)
but run as their CPU emulation on host memory (`autorelay.codegen.nvptx.host_device`): whole
GPU-scheduled models then run, and are checked, where no GPU exists. Its limits are the arch's
defaults, never a present GPU's.
"""

from __future__ import annotations

from autorelay.codegen.nvptx.driver import CudaDriverError, open_driver
from autorelay.target import CUDA_LIMITS, Target, TargetError, TargetSpec

DEFAULT_ARCH = "sm_80"
# resident threads per multiprocessor on sm_70/80/90: what `cuda_reduction`'s default rule sizes by
SM_THREADS = 2048
# architectures LLVM's NVPTX target and ptxas accept here (sm_90a-style variants are not used)
ARCHES = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")
_DEFAULTS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 48 * 1024,
             "warp_size": 32, "registers_per_block": 65536, "registers_per_multiprocessor": 65536}
_KIB = 1024
# per arch: multiprocessors, and per multiprocessor: threads, blocks, shared bytes; reserved per block
_PER_ARCH = {"sm_70": (80, 2048, 32, 96 * _KIB, 0), "sm_75": (40, 1024, 16, 64 * _KIB, 0),
             "sm_80": (108, 2048, 32, 164 * _KIB, _KIB), "sm_86": (72, 1536, 16, 100 * _KIB, _KIB),
             "sm_87": (16, 1536, 16, 164 * _KIB, _KIB), "sm_89": (58, 1536, 24, 100 * _KIB, _KIB),
             "sm_90": (132, 2048, 32, 228 * _KIB, _KIB)}
_PER_ARCH_NAMES = ("multiprocessor_count", "max_threads_per_multiprocessor", "max_blocks_per_multiprocessor",
                   "max_shared_memory_per_multiprocessor", "reserved_shared_memory_per_block")
ARCH_LIMITS: dict[str, dict[str, int]] = {a: {**_DEFAULTS, **dict(zip(_PER_ARCH_NAMES, _PER_ARCH[a]))}
                                          for a in ARCHES}
# How the hardware hands out what a block uses, sm_70 to sm_90 alike (CUDA's occupancy calculator,
# cuda_occupancy.h): registers go to warps in units of 256, from a register file split into 4
# sub-partitions (a warp's registers come from one); shared memory to blocks in units of 128 bytes
# (256 on sm_7x).
REGISTER_UNIT, SUBPARTITIONS = 256, 4


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(target: Target, threads: int, shared: int, registers: int | None = None) -> float:
    """Theoretical occupancy of a kernel launched in blocks of `threads` threads using `shared`
    bytes of static shared memory and `registers` registers per thread (None: registers not
    counted, e.g. without ptxas): resident warps per multiprocessor over the most it holds, with
    resident blocks the least of the warp, block, shared-memory and register limits, as
    `cudaOccMaxActiveBlocksPerMultiprocessor` computes them. 0 when such a block cannot launch."""
    ws = target.warp_size
    warps = -(-threads // ws)
    max_warps = target.limit("max_threads_per_multiprocessor") // ws
    if threads > target.max_threads_per_block or shared > target.max_shared_memory_per_block:
        return 0.0
    blocks = min(max_warps // warps, target.limit("max_blocks_per_multiprocessor"))
    smem = shared + target.limit("reserved_shared_memory_per_block")
    if smem:
        smem = _round_up(smem, 256 if target.arch.startswith("sm_7") else 128)
        blocks = min(blocks, target.limit("max_shared_memory_per_multiprocessor") // smem)
    if registers:
        per_warp = _round_up(registers * ws, REGISTER_UNIT)
        if per_warp * warps > target.registers_per_block:
            return 0.0
        per_partition = target.limit("registers_per_multiprocessor") // SUBPARTITIONS // per_warp
        blocks = min(blocks, per_partition * SUBPARTITIONS // warps)
    return blocks * warps / max_warps


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
