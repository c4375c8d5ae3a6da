"""The simulated accelerator's parameters: one frozen value, loadable from JSON.

The geometry is a BATCH x BLOCK_IN x BLOCK_OUT int8 GEMM core (1 x 16 x 16: 256 multiply-adds a
cycle), int32 accumulators, int8 outputs. Each on-chip buffer holds whole *tiles*: an input tile is
BATCH x BLOCK_IN int8 values, a weight tile BLOCK_OUT x BLOCK_IN int8, an accumulator tile
BATCH x BLOCK_OUT int32, a micro-op 32 bits; a buffer's depth is its size over its tile's bytes.
The output buffer is the accumulator read as int8 (the low byte of each value), as on VTA.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from autorelay.errors import AutoRelayError

KIB = 1024


class VTAConfigError(AutoRelayError, ValueError):
    """A configuration the simulator cannot take; the message names the field."""


@dataclass(frozen=True)
class VTAConfig:
    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    uop_buffer_bytes: int = 32 * KIB
    inp_buffer_bytes: int = 32 * KIB
    wgt_buffer_bytes: int = 256 * KIB
    acc_buffer_bytes: int = 128 * KIB
    clock_mhz: float = 100.0
    dram_bytes_per_cycle: float = 8.0  # the memory interface's sustained bandwidth
    dram_latency_cycles: int = 64  # fixed cost of every LOAD / STORE before data streams
    gemm_pipeline_cycles: int = 4  # fill of the GEMM core's pipeline, per instruction
    alu_pipeline_cycles: int = 4

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int | float) or v <= 0:
                raise VTAConfigError(f"VTA config: {f.name} must be a positive number, got {v!r}")
        for name in ("inp", "wgt", "acc", "uop"):
            if self.depth(name) < 1:
                raise VTAConfigError(f"VTA config: the {name} buffer holds no tile")

    # ---- tiles and buffers ----------------------------------------------------------------------
    def tile_shape(self, mem: str) -> tuple[int, ...]:
        return {"inp": (self.batch, self.block_in), "wgt": (self.block_out, self.block_in),
                "acc": (self.batch, self.block_out), "out": (self.batch, self.block_out),
                "uop": (1,)}[mem]

    def tile_dtype(self, mem: str) -> str:
        return {"inp": "int8", "wgt": "int8", "acc": "int32", "out": "int8", "uop": "uint32"}[mem]

    def tile_bytes(self, mem: str) -> int:
        n = 1
        for d in self.tile_shape(mem):
            n *= d
        return n * {"int8": 1, "int32": 4, "uint32": 4}[self.tile_dtype(mem)]

    def depth(self, mem: str) -> int:
        """Tiles the buffer of `mem` holds (the output buffer is the accumulator's)."""
        size = {"inp": self.inp_buffer_bytes, "wgt": self.wgt_buffer_bytes, "acc": self.acc_buffer_bytes,
                "out": self.acc_buffer_bytes, "uop": self.uop_buffer_bytes}[mem]
        return int(size // self.tile_bytes("acc" if mem == "out" else mem))

    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    # ---- names and files ----------------------------------------------------------------------
    def target_options(self) -> str:
        """The hardware parameters as they enter a `vta` target's key (every field, sorted)."""
        return ",".join(f"{k}={v}" for k, v in sorted(asdict(self).items()))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str | dict[str, Any]) -> VTAConfig:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        known = {f.name for f in fields(VTAConfig)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise VTAConfigError(f"VTA config: unknown field(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
        return VTAConfig(**data)


__all__ = ["VTAConfig", "VTAConfigError"]
