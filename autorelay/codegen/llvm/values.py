"""LLVM types of the loop IR's dtypes, and `Val`, an emitted SSA value.

A bool is `i1` in registers but a byte in memory (NumPy's layout): `llvm_type` gives the register
type, `mem_type` the element type of buffers, allocas and pointer arithmetic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_TYPES = {
    "float16": "half",  # storage: WidenFloat16 leaves only conversions to and from it
    "float32": "float",
    "float64": "double",
    "int64": "i64",
    "uint64": "i64",
    "int32": "i32",
    "uint32": "i32",
    "int16": "i16",
    "uint16": "i16",  # also bfloat16 words (autorelay.te.expr.BF16_FUNCS)
    "int8": "i8",
    "uint8": "i8",
    "bool": "i1",
}


def llvm_type(dtype: str) -> str:
    """The register type of `dtype` (bool is `i1`)."""
    return _TYPES[dtype]


def mem_type(dtype: str) -> str:
    """The in-memory element type of `dtype`: bool is a byte, as NumPy stores it."""
    return "i8" if dtype == "bool" else _TYPES[dtype]


def mem_bytes(dtype: str) -> int:
    """Bytes per element of `dtype` in memory."""
    return {"i8": 1, "i16": 2, "half": 2, "i32": 4, "float": 4}.get(mem_type(dtype), 8)


def mem_align(dtype: str) -> int:
    """Alignment promised on loads/stores: the element size, capped at 4 (buffers are at least
    element-aligned; a byte buffer may start at any address, so promising 4 there would be wrong)."""
    return {"i8": 1, "i16": 2, "half": 2}.get(mem_type(dtype), 4)


@dataclass(frozen=True)
class Val:
    """An emitted value: its SSA name (or literal), dtype, and vector width."""

    ref: str
    dtype: str
    lanes: int = 0  # 0: scalar


def splat(literal: str, scalar_type: str, lanes: int) -> str:
    """A vector constant of `lanes` copies of `literal` (`scalar_type`), or `literal` itself when
    `lanes` is 0 (a scalar)."""
    return f"<{', '.join(f'{scalar_type} {literal}' for _ in range(lanes))}>" if lanes else literal


def splat_i32(value: int, lanes: int) -> str:
    """An i32 constant (a vector of `lanes` copies, or a scalar when `lanes` is 0) holding the 32
    bits of `value`: a pattern from 2^31 up is written as the negative number LLVM reads."""
    return splat(str(value - (1 << 32) if value >= 1 << 31 else value), "i32", lanes)


def float_hex(value: float, dtype: str) -> str:
    """LLVM's hex float literal (always 64-bit; a float32 or float16 value must be exactly
    representable, so it is rounded to that type first)."""
    if dtype == "float32":
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    elif dtype == "float16":
        value = struct.unpack("<e", struct.pack("<e", value))[0]
    return "0x{:016X}".format(struct.unpack("<Q", struct.pack("<d", value))[0])
