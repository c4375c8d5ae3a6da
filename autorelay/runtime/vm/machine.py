"""The VM's executor: one loop over the bytecode with an explicit frame stack.

A frame is (function, code, registers, return pc, destination register). `CALL`/`CALLG` push the
caller's frame and start the callee with fresh registers; `RET` pops it and stores the value;
`TAILCALLG` of the running function overwrites its parameters and jumps to pc 0, other tail calls
swap the frame's function and registers. A 10,000-deep non-tail recursion is a 10,000-element
Python list, never 10,000 nested Python calls.

Values: tensors are NumPy arrays, tuples are Python tuples, ADT values and references are the
interpreter's `ConstructorValue` / `RefValue` (so results compare directly with the reference
interpreter's, and `to_list` works on them), functions are `VMClosure`s.
"""

from __future__ import annotations

from typing import Any

from autorelay.runtime.values import ConstructorFn, ConstructorValue, RefValue
from autorelay.runtime.vm import bytecode as bc
from autorelay.runtime.vm.bytecode import VMClosure, VMFunction


class VMRuntimeError(RuntimeError):
    """A run-time failure of a VM program (non-exhaustive match, calling a non-function, …)."""


def run(functions: list[VMFunction], findex: int, args: list[Any]) -> Any:
    """Call function `findex` on `args` and run until it returns."""
    MOVE, CONST, KERNEL1, KERNEL, TUPLE, GET = bc.MOVE, bc.CONST, bc.KERNEL1, bc.KERNEL, bc.TUPLE, bc.GET
    CONSTRUCT, CLOSURE, CALL, CALLG, TAILCALL, TAILCALLG = (bc.CONSTRUCT, bc.CLOSURE, bc.CALL, bc.CALLG,
                                                            bc.TAILCALL, bc.TAILCALLG)
    RET, BRFALSE, JMP, TAGNE, BLOCK = bc.RET, bc.BRFALSE, bc.JMP, bc.TAGNE, bc.BLOCK
    CV = ConstructorValue
    f = functions[findex]
    code = f.code
    regs: list[Any] = [None] * f.nregs
    regs[: len(args)] = args
    pc = 0
    stack: list[tuple[VMFunction, list[tuple], list[Any], int, int]] = []
    while True:
        ins = code[pc]
        op = ins[0]
        pc += 1
        if op == BLOCK:
            ins[1](regs)
        elif op == KERNEL:
            regs[ins[1]] = ins[2](*ins[3](regs))
        elif op == KERNEL1:
            regs[ins[1]] = ins[2](regs[ins[3]])
        elif op == GET:
            v = regs[ins[2]]
            regs[ins[1]] = v.fields[ins[3]] if type(v) is CV else v[ins[3]]
        elif op == BRFALSE:
            if not regs[ins[1]]:
                pc = ins[2]
        elif op == TAILCALLG:
            new = [regs[a] for a in ins[2]]
            callee = functions[ins[1]]
            if callee is f:
                regs[: len(new)] = new
            else:
                f, code = callee, callee.code
                regs = [None] * f.nregs
                regs[: len(new)] = new
            pc = 0
        elif op == RET:
            value = regs[ins[1]]
            if not stack:
                return value
            f, code, regs, pc, dst = stack.pop()
            regs[dst] = value
        elif op == CONST:
            regs[ins[1]] = ins[2]
        elif op == MOVE:
            regs[ins[1]] = regs[ins[2]]
        elif op == TUPLE:
            regs[ins[1]] = tuple([regs[a] for a in ins[2]])
        elif op == CALLG:
            callee = functions[ins[2]]
            new = [None] * callee.nregs
            for k, a in enumerate(ins[3]):
                new[k] = regs[a]
            for r in ins[4]:
                regs[r] = None
            stack.append((f, code, regs, pc, ins[1]))
            f, code, regs, pc = callee, callee.code, new, 0
        elif op == TAGNE:
            if regs[ins[1]].constructor.tag != ins[2]:
                pc = ins[3]
        elif op == CONSTRUCT:
            regs[ins[1]] = CV(ins[2], tuple([regs[a] for a in ins[3]]))
        elif op == JMP:
            pc = ins[1]
        elif op in (CALL, TAILCALL):
            dst, callee_reg, arg_regs = (ins[1], ins[2], ins[3]) if op == CALL else (-1, ins[1], ins[2])
            target = regs[callee_reg]
            argv = [regs[a] for a in arg_regs]
            if type(target) is ConstructorFn:
                value = CV(target.constructor, tuple(argv))
                if op == CALL:
                    regs[dst] = value
                    continue
                if not stack:
                    return value
                f, code, regs, pc, dst = stack.pop()
                regs[dst] = value
                continue
            if type(target) is not VMClosure:
                raise VMRuntimeError(f"VM: {f.name} calls a value that is not a function: {target!r}")
            callee = functions[target.findex]
            if len(argv) != callee.arity:
                raise VMRuntimeError(f"VM: {callee.name} takes {callee.arity} argument(s), got {len(argv)}")
            new = [None] * callee.nregs
            new[: callee.arity] = argv
            new[callee.arity: callee.arity + callee.nfree] = target.captured
            if op == CALL:
                for r in ins[4]:
                    regs[r] = None
                stack.append((f, code, regs, pc, dst))
            f, code, regs, pc = callee, callee.code, new, 0
        elif op == CLOSURE:
            callee = functions[ins[2]]
            captured = [regs[a] for a in ins[3]]
            clo = VMClosure(ins[2], captured, callee.name)
            if ins[4] >= 0:
                captured[ins[4]] = clo
            regs[ins[1]] = clo
        elif op == bc.REFNEW:
            regs[ins[1]] = RefValue(regs[ins[2]])
        elif op == bc.REFREAD:
            regs[ins[1]] = regs[ins[2]].value
        elif op == bc.REFWRITE:
            regs[ins[2]].value = regs[ins[3]]
            regs[ins[1]] = ()
        elif op == bc.FAIL:
            raise VMRuntimeError(f"VM: {ins[1]}")
        else:
            raise VMRuntimeError(f"VM: unknown opcode {op} in {f.name} at pc {pc - 1}")
