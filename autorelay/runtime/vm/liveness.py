"""Register liveness over VM bytecode, used to drop dead values before non-tail calls.

Why: a non-tail recursive call (`Cons(x, @sample(...))` in a generative RNN, `@tree_lstm` over a
tree) keeps the caller's frame alive for the whole call. Without help, every tensor the frame ever
computed would stay referenced by its registers, so memory would grow with the recursion depth
and the kernels' output pools (`call_stub`) could never reuse a buffer. The compiler attaches to
each `CALL`/`CALLG` the registers that are dead after it, and the machine clears them.
"""

from __future__ import annotations

from autorelay.runtime.vm import bytecode as bc


def uses_defs(ins: tuple) -> tuple[tuple[int, ...], int | None]:
    """(registers read, register written or None) of one instruction."""
    op = ins[0]
    if op == bc.MOVE:
        return (ins[2],), ins[1]
    if op == bc.CONST:
        return (), ins[1]
    if op == bc.KERNEL1:
        return (ins[3],), ins[1]
    if op == bc.KERNEL:
        return ins[4], ins[1]
    if op in (bc.TUPLE, bc.CONSTRUCT):
        return tuple(ins[-1]), ins[1]
    if op == bc.GET or op in (bc.REFNEW, bc.REFREAD):
        return (ins[2],), ins[1]
    if op == bc.CLOSURE:
        return tuple(r for r in ins[3] if r != ins[1]), ins[1]
    if op == bc.CALL:
        return (ins[2], *ins[3]), ins[1]
    if op == bc.CALLG:
        return tuple(ins[3]), ins[1]
    if op == bc.TAILCALL:
        return (ins[1], *ins[2]), None
    if op == bc.TAILCALLG:
        return tuple(ins[2]), None
    if op in (bc.RET, bc.BRFALSE, bc.TAGNE):
        return (ins[1],), None
    if op == bc.REFWRITE:
        return (ins[2], ins[3]), ins[1]
    return (), None  # JMP, FAIL


def successors(pc: int, ins: tuple) -> tuple[int, ...]:
    op = ins[0]
    if op in (bc.RET, bc.TAILCALL, bc.TAILCALLG, bc.FAIL):
        return ()
    if op == bc.JMP:
        return (ins[1],)
    if op == bc.BRFALSE:
        return (pc + 1, ins[2])
    if op == bc.TAGNE:
        return (pc + 1, ins[3])
    return (pc + 1,)


def live_out(code: list[tuple]) -> list[set[int]]:
    """For each instruction, the registers whose value may still be read after it."""
    n = len(code)
    info = [uses_defs(ins) for ins in code]
    succ = [successors(pc, ins) for pc, ins in enumerate(code)]
    live_in: list[set[int]] = [set() for _ in range(n)]
    out: list[set[int]] = [set() for _ in range(n)]
    changed = True
    while changed:
        changed = False
        for pc in range(n - 1, -1, -1):
            o: set[int] = set()
            for s in succ[pc]:
                if s < n:
                    o |= live_in[s]
            uses, d = info[pc]
            i = (o - {d}) | set(uses) if d is not None else o | set(uses)
            if i != live_in[pc] or o != out[pc]:
                live_in[pc], out[pc] = i, o
                changed = True
    return out


def dead_before_calls(code: list[tuple], arity: int) -> list[tuple]:
    """`code` with each CALL/CALLG extended by the value registers that are dead after it."""
    values = set(range(arity))
    for ins in code:
        d = uses_defs(ins)[1]
        if d is not None and ins[0] in (bc.KERNEL, bc.KERNEL1, bc.TUPLE, bc.GET, bc.CALL, bc.CALLG,
                                        bc.CONSTRUCT):
            values.add(d)
    out = live_out(code)
    new = []
    for pc, ins in enumerate(code):
        if ins[0] in (bc.CALL, bc.CALLG):
            dead = tuple(sorted(r for r in values - out[pc] if r != ins[1]))
            ins = (*ins, dead)
        new.append(ins)
    return new
