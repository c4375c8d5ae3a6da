"""A simulated VTA-style accelerator: parameters (`config`), the instruction set (`isa`), the
functional + cycle simulator (`sim`) and instruction streams for int8 layers (`programs`)."""

from autorelay.vta.config import VTAConfig, VTAConfigError
from autorelay.vta.isa import ISAError, decode_program, encode_program
from autorelay.vta.sim import DeadlockError, DramRangeError, SimResult, SramOverflowError, VTAError, simulate

__all__ = ["DeadlockError", "DramRangeError", "ISAError", "SimResult", "SramOverflowError", "VTAConfig",
           "VTAConfigError", "VTAError", "decode_program", "encode_program", "simulate"]
