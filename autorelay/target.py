"""`Target`: what a kernel is compiled for, for every backend, as one frozen value.

A target has a kind (`cpu` today; `cuda` and `vta` plug in beside it), the fields the CPU backend
reads (LLVM CPU name, feature string, triple), the thread count the runtime uses, and free-form
options for other kinds (`-arch=sm_90`, `-config=…`). It is plain data: templates read
`vector_lanes` to pick tile shapes, codegen reads `cpu`/`features`, the runtime reads `threads`.
Nothing here talks to LLVM, so the schedule templates can import it without importing codegen;
host detection lives with the LLVM backend (`autorelay.codegen.llvm.host`) and
`autorelay.codegen.resolve_target` turns a string such as ``llvm`` into a concrete target.

One string form, parsed by `parse_target` and printed by `str(target)`; the printed form is also
the tuning log's key for the target:

    llvm                                     the host CPU (resolved by the LLVM backend)
    llvm -mcpu=znver3 -threads=2             a named CPU (features from LLVM's table of CPUs)
    llvm -mcpu=znver5 -mattr=+avx2,+fma      a named CPU with explicit features
    llvm -mattr-hash=… -mcpu=znver5 -threads=2   the canonical form: the feature string by digest,
                                                  options sorted (the tuning log's spelling)
    cuda -arch=sm_90                         an NVIDIA GPU (resolved by the NVPTX backend, which adds
                                             the device limits: -max_threads_per_block=1024 …)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from autorelay.errors import AutoRelayError
from autorelay.te.expr import DTYPE_BITS

# The string a target's kind is spelled with at the front of its text form.
KIND_PREFIX = {"cpu": "llvm", "cuda": "cuda", "vta": "vta"}
PREFIX_KIND = {v: k for k, v in KIND_PREFIX.items()}



# The device limits a resolved cuda target carries as options (the driver's values when a GPU is
# present, else the documented defaults of its architecture). The per-multiprocessor ones decide
# how many blocks of a kernel are resident at once (its occupancy, `codegen.nvptx.device`).
CUDA_LIMITS = ("max_threads_per_block", "max_shared_memory_per_block", "warp_size", "registers_per_block",
               "multiprocessor_count", "max_threads_per_multiprocessor", "max_blocks_per_multiprocessor",
               "max_shared_memory_per_multiprocessor", "registers_per_multiprocessor",
               "reserved_shared_memory_per_block")


class TargetError(AutoRelayError, ValueError):
    """A target string or value that cannot be used; the message names the part that is wrong."""


@dataclass(frozen=True)
class Target:
    """One compilation target (see the module docstring). Hashable, comparable, picklable."""

    cpu: str = ""
    features: str = ""
    threads: int = 1
    triple: str = ""
    kind: str = "cpu"
    options: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.kind not in KIND_PREFIX:
            raise TargetError(f"unknown target kind {self.kind!r}; known: {', '.join(KIND_PREFIX)}")
        if not isinstance(self.threads, int) or self.threads < 1:
            raise TargetError(f"threads must be an integer >= 1, got {self.threads!r}")

    def with_threads(self, threads: int) -> Target:
        if not isinstance(threads, int) or threads < 1:
            raise TargetError(f"threads must be an integer >= 1, got {threads!r}")
        return replace(self, threads=threads)

    def option(self, name: str, default: str | None = None) -> str | None:
        return dict(self.options).get(name, default)

    # ---- CPU vector shape ---------------------------------------------------------------------
    def has(self, feature: str) -> bool:
        return f"+{feature}" in self.features.split(",")

    @property
    def vector_bits(self) -> int:
        if self.has("avx512f"):
            return 512
        if self.has("avx2") or self.has("avx"):
            return 256
        return 128

    def vector_lanes(self, dtype: str = "float32") -> int:
        return self.vector_bits // DTYPE_BITS[dtype]

    @property
    def vector_registers(self) -> int:
        return 32 if self.has("avx512f") else 16

    @property
    def local_bytes(self) -> int:
        """Bytes one CPU kernel segment may hold in local buffers. They are allocas in its frame,
        and a segment runs on whichever thread calls the kernel (and on the team's workers): a
        Linux thread's stack is 8 MiB by default and the caller's own frames share it, so a
        quarter of that is left to a kernel."""
        return 2 << 20

    # ---- GPU limits (cuda targets; `autorelay.codegen.nvptx.device` fills them in) -----------
    @property
    def arch(self) -> str:
        """The CUDA compute capability as an LLVM CPU name (`sm_90`); cuda targets only."""
        return self.option("arch") or ""

    @property
    def emulated(self) -> bool:
        """A cuda target whose kernels run as their CPU emulation (`-device=emulated`)."""
        return self.option("device") == "emulated"

    def limit(self, name: str) -> int:
        """A device limit of a cuda target (see `CUDA_LIMITS`), as resolved into its options."""
        if name not in CUDA_LIMITS:
            raise TargetError(f"unknown device limit {name!r}; known: {', '.join(CUDA_LIMITS)}")
        value = self.option(name)
        if value is None:
            raise TargetError(f"target {self} has no {name}; resolve it with resolve_target first")
        return int(value)

    @property
    def max_threads_per_block(self) -> int:
        return self.limit("max_threads_per_block")

    @property
    def max_shared_memory_per_block(self) -> int:
        return self.limit("max_shared_memory_per_block")

    @property
    def warp_size(self) -> int:
        return self.limit("warp_size")

    @property
    def registers_per_block(self) -> int:
        return self.limit("registers_per_block")

    @property
    def multiprocessors(self) -> int:
        """Streaming multiprocessors: how many blocks run at once, what a default grid must fill."""
        return self.limit("multiprocessor_count")

    # ---- names --------------------------------------------------------------------------------
    def key(self) -> str:
        """What changes generated code (threads do not): part of every kernel's cache key."""
        if self.kind == "cpu":
            return f"{self.triple}|{self.cpu}|{self.features}"
        return f"{self.kind}|{self.cpu}|{self.options}"

    def features_hash(self) -> str:
        return hashlib.sha1(self.features.encode()).hexdigest()[:10]

    def __str__(self) -> str:
        """The canonical text form: the name the tuning log files measurements under and the name
        a build asks it about — what changes generated code and what changes timing (threads)."""
        if self.kind == "cpu":
            opts = [f"-mattr-hash={self.features_hash()}", f"-mcpu={self.cpu}"]
        else:
            opts = [f"-{k}={v}" for k, v in self.options]
        # options sorted, single-spaced: the same text `tuning_db` files a target under
        return " ".join([KIND_PREFIX[self.kind], *sorted([*opts, f"-threads={self.threads}"])])

    def without_threads(self) -> str:
        """The canonical form minus `-threads=…`: targets whose schedules can stand in for each other."""
        return strip_threads(str(self))

    def json(self) -> dict:
        return {"kind": "llvm" if self.kind == "cpu" else self.kind, "cpu": self.cpu,
                "features": self.features, "triple": self.triple, "options": dict(self.options)}


def strip_threads(text: str) -> str:
    """A target string without its `-threads=` option (the rest kept in order)."""
    return " ".join(p for p in text.split() if not p.startswith("-threads="))


@dataclass(frozen=True)
class TargetSpec:
    """A parsed target string before the backend fills in what the text leaves to the machine
    (the host CPU for a bare ``llvm``, a named CPU's features)."""

    kind: str
    cpu: str | None = None
    features: str | None = None
    features_hash: str | None = None
    threads: int | None = None
    options: tuple[tuple[str, str], ...] = ()


def parse_target(text: str) -> TargetSpec:
    """Parse the text form (see the module docstring); raises TargetError naming the bad part."""
    parts = str(text).split()
    if not parts:
        raise TargetError("empty target string; use e.g. 'llvm' or 'llvm -mcpu=znver3'")
    kind = PREFIX_KIND.get(parts[0])
    if kind is None:
        raise TargetError(f"target {text!r}: unknown kind {parts[0]!r}; "
                          f"known: {', '.join(PREFIX_KIND)}")
    cpu = features = fhash = None
    threads: int | None = None
    options: list[tuple[str, str]] = []
    for p in parts[1:]:
        name, eq, value = p.lstrip("-").partition("=")
        if not p.startswith("-") or not eq or not value:
            raise TargetError(f"target {text!r}: option {p!r} is not of the form -name=value")
        if name == "threads":
            if not value.isdigit() or int(value) < 1:
                raise TargetError(f"target {text!r}: -threads must be an integer >= 1, got {value!r}")
            threads = int(value)
        elif kind == "cpu" and name == "mcpu":
            cpu = value
        elif kind == "cpu" and name == "mattr":
            features = value
        elif kind == "cpu" and name == "mattr-hash":
            fhash = value
        elif kind == "cpu":
            raise TargetError(f"target {text!r}: unknown option -{name} for llvm "
                              f"(known: -mcpu, -mattr, -mattr-hash, -threads)")
        else:
            options.append((name, value))
    if features is not None and fhash is not None:
        raise TargetError(f"target {text!r}: give -mattr or -mattr-hash, not both")
    return TargetSpec(kind, cpu, features, fhash, threads, tuple(sorted(options)))


__all__ = ["CUDA_LIMITS", "Target", "TargetError", "TargetSpec", "parse_target", "strip_threads"]
