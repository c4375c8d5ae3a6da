"""Writing LLVM instructions into basic blocks, with the values of a block numbered.

An instruction whose text (opcode, types, operands) was written before in the same basic block is
that earlier value, so it is not written again. Unrolled code repeats its index arithmetic and, in
a Winograd transform, whole subexpressions per position: numbering them as they are written keeps
the IR small (a Winograd kernel's 34-90K lines became 6-8K) and LLVM's time on it shorter. A value
is reused only inside the block that computed it, which it dominates; entering another block
forgets the table. Loads are numbered only from buffers that no statement of the function stores
to (`stored`); phis and other instructions whose value is not a function of their text are
written with `pure=False`.
"""

from __future__ import annotations

from autorelay.codegen.llvm.values import Val, llvm_type
from autorelay.tir.nodes import Buffer

__all__ = ["InstructionWriter"]


class InstructionWriter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counter = 0
        self._values: dict[tuple[str, str, int], Val] = {}
        self.block = "entry"
        self.stored: set[int] | None = None  # ids of the buffers stored to (None: unknown)
        self.unnumbered = 0  # instructions written with pure=False so far

    def tmp(self) -> str:
        self.counter += 1
        return f"%t{self.counter}"

    def new_block(self, hint: str) -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    @property
    def block(self) -> str:
        """The basic block being emitted into; entering another forgets the numbered values."""
        return self._block

    @block.setter
    def block(self, name: str) -> None:
        self._block = name
        self.forget()

    def forget(self) -> None:
        """Drop what is known of the block left: its values do not dominate the block entered."""
        self._values.clear()

    def op(self, text: str, dtype: str, lanes: int = 0, *, pure: bool = True) -> Val:
        """The value of instruction `text`; `pure`: its value depends only on its operands (no
        memory read, no phi), so the same text earlier in this block is reused."""
        key = (text, dtype, lanes)
        if pure:
            hit = self._values.get(key)
            if hit is not None:
                return hit
        else:
            self.unnumbered += 1
        t = self.tmp()
        self.lines.append(f"  {t} = {text}")
        v = Val(t, dtype, lanes)
        if pure:
            self._values[key] = v
        return v

    def load_op(self, buf: Buffer, text: str, dtype: str, lanes: int = 0) -> Val:
        """A load (or masked load) from `buf`: reused within the block only if nothing stores to `buf`."""
        return self.op(text, dtype, lanes, pure=self.stored is not None and id(buf) not in self.stored)

    def ty(self, dtype: str, lanes: int) -> str:
        return f"<{lanes} x {llvm_type(dtype)}>" if lanes else llvm_type(dtype)
