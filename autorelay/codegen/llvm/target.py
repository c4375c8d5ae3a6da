"""The CPU target: host CPU name and features as LLVM reports them, vector width, thread count.

Passed explicitly everywhere (no ambient global): templates read `vector_lanes` to choose tile
shapes, codegen reads `cpu`/`features`, the runtime reads `threads`.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, replace

import llvmlite.binding as llvm


@functools.cache
def init_llvm() -> None:
    """Initialise LLVM once (llvmlite >= 0.50: `initialize()` is gone and raises)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@dataclass(frozen=True)
class Target:
    cpu: str
    features: str
    threads: int = 1
    triple: str = ""

    @staticmethod
    def host(threads: int = 1) -> Target:
        init_llvm()
        return Target(
            llvm.get_host_cpu_name(),
            llvm.get_host_cpu_features().flatten(),
            threads,
            llvm.get_process_triple(),
        )

    def with_threads(self, threads: int) -> Target:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        return replace(self, threads=threads)

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
        width = {"float32": 32, "float64": 64, "int32": 32, "int64": 64, "int8": 8, "uint8": 8,
                 "bool": 8}[dtype]  # bools are bytes in memory
        return self.vector_bits // width

    @property
    def vector_registers(self) -> int:
        return 32 if self.has("avx512f") else 16

    def key(self) -> str:
        """What changes generated code (threads do not)."""
        return f"{self.triple}|{self.cpu}|{self.features}"

    def tuning_name(self) -> str:
        """The name the tuning log files measurements under, and the name `build` asks it about:
        what changes generated code (CPU, features) and timing (threads)."""
        feat = hashlib.sha1(self.features.encode()).hexdigest()[:10]
        return f"llvm -mcpu={self.cpu} -mattr-hash={feat} -threads={self.threads}"

    def json(self) -> dict:
        return {"kind": "llvm", "cpu": self.cpu, "features": self.features, "triple": self.triple}

    @functools.cached_property
    def _machine(self) -> llvm.TargetMachine:
        return self.new_machine()

    def machine(self) -> llvm.TargetMachine:
        """A shared machine for passes and assembly. Never hand it to an execution engine."""
        return self._machine

    def new_machine(self) -> llvm.TargetMachine:
        """A machine of one's own: an MCJIT engine takes ownership of (and frees) its machine, so
        sharing one between engines crashes the process once any engine is freed."""
        init_llvm()
        tgt = llvm.Target.from_triple(self.triple or llvm.get_process_triple())
        return tgt.create_target_machine(cpu=self.cpu, features=self.features, opt=3, codemodel="jitdefault")
