"""The VM's instruction set: register-based, one flat code list per function.

A function's registers are a Python list: its parameters first, then the variables its closure
captured, then temporaries. An instruction is a tuple whose first element is its opcode; operands
are register numbers, jump targets (code indices), or objects resolved at compile time (the
kernel callable of a `KERNEL`, the constructor of a `CONSTRUCT`), so executing one is a couple of
list reads. Calls push a frame on an explicit stack (recursion never grows the Python stack); tail
calls replace the current frame, and a tail call of the function itself is a jump to pc 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# (opcode, operands...)                                             operands
MOVE = 0        # dst, src
CONST = 1       # dst, value
KERNEL1 = 2     # dst, callable, a                 dst = f(a)
KERNEL = 3      # dst, callable, getter, (regs)    dst = f(*getter(regs))  (itemgetter of the regs)
TUPLE = 4       # dst, (regs)
GET = 5         # dst, src, index                  tuple field or ADT field
CONSTRUCT = 6   # dst, constructor, (regs)
CLOSURE = 7     # dst, function index, (captured regs), self slot (-1: none)
CALL = 8        # dst, callee reg, (regs), (dead)  a closure / constructor / global value; `dead`:
CALLG = 9       # dst, function index, (regs), (dead)   registers cleared before the call (liveness)
TAILCALL = 10   # callee reg, (regs)
TAILCALLG = 11  # function index, (regs)
RET = 12        # src
BRFALSE = 13    # cond reg, target
JMP = 14        # target
TAGNE = 15      # src, tag, target                 jump when the ADT value's tag differs
REFNEW = 16     # dst, src
REFREAD = 17    # dst, src
REFWRITE = 18   # dst, ref reg, value reg          dst = ()
FAIL = 19       # message
BLOCK = 20      # stub                             a fused run of kernels (`blocks`): stub(regs)

NAMES = {v: k for k, v in dict(globals()).items() if k.isupper() and isinstance(v, int)}


@dataclass
class VMFunction:
    """Compiled code of one global function or closure body."""

    name: str
    arity: int
    nfree: int
    code: list[tuple] = field(default_factory=list)
    nregs: int = 0

    def disassemble(self) -> str:
        lines = [f"{self.name}: arity={self.arity} free={self.nfree} regs={self.nregs}"]
        for pc, ins in enumerate(self.code):
            ops = ", ".join(_operand_text(x) for x in ins[1:])
            lines.append(f"  {pc:4d}  {NAMES[ins[0]]:<10} {ops}")
        return "\n".join(lines)


def _operand_text(x: Any) -> str:
    if isinstance(x, int | tuple | str):
        return repr(x)
    name = getattr(x, "name", None)
    return f"<{type(x).__name__} {name}>" if isinstance(name, str) else f"<{type(x).__name__}>"


class VMClosure:
    """A function value: compiled function index and the captured values (a list, so that a
    recursive `let %f = fn ...` can put itself in its own captured slot)."""

    __slots__ = ("captured", "findex", "name")

    def __init__(self, findex: int, captured: list[Any], name: str = "") -> None:
        self.findex, self.captured, self.name = findex, captured, name

    def __repr__(self) -> str:
        return f"<vm closure {self.name or self.findex}>"
