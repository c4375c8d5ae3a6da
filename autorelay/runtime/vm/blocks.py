"""Kernel blocks: a straight run of compiled kernel calls becomes one native call.

Per kernel call the VM pays a few microseconds of Python (the stub, the ctypes call); an LSTM step
is seven kernels in a row. After compilation, each maximal run of `KERNEL` instructions (and `GET`s
projecting their tuple results) that no jump enters in the middle is replaced by one `BLOCK`
instruction. Its native function — generated LLVM, like the AoT path's — calls the kernels'
segment functions in order; values used only inside the run live in static scratch buffers,
values still live after it (by `liveness`) are written to a pooled output set (same reuse rule as
`call_stub`), and the block's stub stores them in their registers. Kernels inside a block run
single-threaded, so blocks are only formed when the VM is compiled with one thread.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from autorelay.runtime.aot.jit import jit_function
from autorelay.runtime.vm import bytecode as bc
from autorelay.runtime.vm.call_stub import AddressBook, CompiledCall
from autorelay.runtime.vm.liveness import live_out

_POOL = 3


def _kernel_of(ins: tuple) -> tuple[CompiledCall, tuple[int, ...]] | None:
    """The compiled call and argument registers of a fusable kernel instruction."""
    if ins[0] == bc.KERNEL1:
        fn, regs = ins[2], (ins[3],)
    elif ins[0] == bc.KERNEL:
        fn, regs = ins[2], ins[4]
    else:
        return None
    if not isinstance(fn, CompiledCall) or any(ops for _, _, ops in fn.inputs):
        return None
    return fn, regs


def _jump_targets(code: list[tuple]) -> set[int]:
    out: set[int] = set()
    for ins in code:
        if ins[0] == bc.JMP:
            out.add(ins[1])
        elif ins[0] == bc.BRFALSE:
            out.add(ins[2])
        elif ins[0] == bc.TAGNE:
            out.add(ins[3])
    return out


def _runs(code: list[tuple]) -> list[tuple[int, int]]:
    """[start, end) ranges of fusable instructions holding at least two kernels."""
    targets = _jump_targets(code)
    runs, pc = [], 0
    while pc < len(code):
        if _kernel_of(code[pc]) is None:
            pc += 1
            continue
        start, tuples, kernels = pc, set(), 0
        while pc < len(code) and (pc == start or pc not in targets):
            ins = code[pc]
            k = _kernel_of(ins)
            if k is not None:
                kernels += 1
                if k[0].is_tuple:
                    tuples.add(ins[1])
            elif not (ins[0] == bc.GET and ins[2] in tuples):
                break
            pc += 1
        if kernels >= 2:
            runs.append((start, pc))
    return runs


class KernelBlock:
    """One fused run: its native function, output pool and the Python stub the VM calls."""

    def __init__(self, code: list[tuple], live_after: set[int], book: AddressBook, target: Any) -> None:
        self.book = book
        self.keep: list[np.ndarray] = []
        ins_regs: list[int] = []  # block inputs, in parameter order
        ptr: dict[int, Any] = {}  # register -> pointer operand | list of them (tuple values)
        outs: list[tuple[tuple[int, ...], str, bool]] = []  # output buffers (shape, storage dtype, bool)
        assign: list[tuple[int, Any]] = []  # (register, output index | tuple of indices)
        wanted = self._wanted(code, live_after)
        lines: list[str] = []
        n = 0
        for ins in code:
            if ins[0] == bc.GET:
                ptr[ins[1]] = ptr[ins[2]][ins[3]]
                if ins[1] in live_after:
                    assign.append((ins[1], ptr[ins[1]][1]))
                continue
            call, regs = _kernel_of(ins)  # type: ignore[misc]
            argv = []
            for index, caddr, _ in call.inputs:
                if caddr is not None:
                    argv.append(f"inttoptr (i64 {caddr} to ptr)")
                    continue
                r = regs[index]
                if r not in ptr:
                    ptr[r] = (f"%in{len(ins_regs)}", None)
                    ins_regs.append(r)
                argv.append(ptr[r][0])
            comps = []
            for j, ((shape, dtype), t) in enumerate(zip(call.out_bufs, call.out_types)):
                if (ins[1], j) in wanted:
                    comps.append((f"%out{len(outs)}", len(outs)))
                    outs.append((shape, dtype, t.dtype == "bool"))
                else:
                    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                    arr = np.zeros(size + 64, np.uint8)
                    self.keep.append(arr)
                    comps.append((f"inttoptr (i64 {arr.ctypes.data} to ptr)", None))
            ptr[ins[1]] = comps if call.is_tuple else comps[0]
            if ins[1] in live_after:
                assign.append((ins[1], tuple(c[1] for c in comps) if call.is_tuple else comps[0][1]))
            args = ", ".join(f"ptr {a}" for a in [*argv, *(c[0] for c in comps),
                                                  *(f"inttoptr (i64 {w} to ptr)" for w in call.ws_addrs)])
            for f, par in call.segments:
                addr = int(ctypes.cast(f, ctypes.c_void_p).value or 0)
                n += 1
                lines.append(f"  %f{n} = inttoptr i64 {addr} to ptr")
                lines.append(f"  call void %f{n}({args}, i64 0, i64 {par})")
            self.keep.append(call)  # type: ignore[arg-type]  # its kernel owns the code called here
        params = [f"ptr %in{k}" for k in range(len(ins_regs))] + [f"ptr %out{k}" for k in range(len(outs))]
        self.llvm_ir = "\n".join([f"define void @block({', '.join(params)}) {{", "entry:", *lines,
                                  "  ret void", "}"]) + "\n"
        self.engine, self.native = jit_function(self.llvm_ir, "block", len(params), target)
        self.outs = outs
        self.pools: list[list[list]] = [[] for _ in outs]  # per output: [array, address, free refcount]
        self.allocated = 0
        self.stub = self._make_stub(ins_regs, assign)

    @staticmethod
    def _wanted(code: list[tuple], live_after: set[int]) -> set[tuple[int, int]]:
        """(kernel register, output component) pairs whose buffer must outlive the block."""
        wanted: set[tuple[int, int]] = set()
        ncomp: dict[int, int] = {}
        for ins in code:
            k = _kernel_of(ins)
            if k is not None:
                ncomp[ins[1]] = len(k[0].out_bufs)
                if ins[1] in live_after:
                    wanted |= {(ins[1], j) for j in range(ncomp[ins[1]])}
            elif ins[0] == bc.GET and ins[1] in live_after:
                wanted.add((ins[2], ins[3]))
        return wanted

    def _grow(self, j: int) -> list:
        """A new buffer for output `j` (its others are in use); the oldest leaves a full pool."""
        self.allocated += 1
        shape, dtype, is_bool = self.outs[j]
        # bool results are allocated as bool (one byte each, the kernels' uint8 storage), never as a
        # view: a view of a view points at the owner, which would hide holders from the refcount
        shown = np.empty(shape, np.bool_ if is_bool else dtype)
        entry = [shown, self.book.add(shown), 0]
        del shown  # the baseline below must count only the pool's and the book's references
        pool = self.pools[j]
        if len(pool) >= _POOL:
            self.book.drop(pool.pop(0)[0])
        pool.append(entry)
        entry[2] = sys.getrefcount(entry[0])
        return entry

    def _make_stub(self, ins_regs: list[int], assign: list[tuple[int, Any]]) -> Any:
        body = []
        for k, r in enumerate(ins_regs):
            body += [f"    a = regs[{r}]", "    h = get(id(a))", "    if h is not None and h[0] is a:",
                     f"        x{k} = h[1]", "    else:", f"        x{k}, k{k} = slow(a)"]
        for j in range(len(self.outs)):  # each output has its own pool: one held value blocks no other
            body += [f"    for e{j} in pools[{j}]:", f"        if getrc(e{j}[0]) == e{j}[2]:",
                     "            break", "    else:", f"        e{j} = grow({j})"]
        args = [f"x{k}" for k in range(len(ins_regs))] + [f"e{j}[1]" for j in range(len(self.outs))]
        body.append(f"    native({', '.join(args)})")
        for r, idx in assign:
            value = f"({', '.join(f'e{i}[0]' for i in idx)},)" if isinstance(idx, tuple) else f"e{idx}[0]"
            body.append(f"    regs[{r}] = {value}")
        src = "def block(regs):\n" + "\n".join(body) + "\n"
        ns = {"get": self.book.permanent.get, "slow": self.book.address, "pools": self.pools,
              "grow": self._grow, "getrc": sys.getrefcount, "native": self.native}
        exec(compile(src, "<kernel block>", "exec"), ns)
        self.source = src
        return ns["block"]


def fuse_blocks(code: list[tuple], book: AddressBook, target: Any) -> tuple[list[tuple], list[KernelBlock]]:
    """`code` with every fusable run replaced by one BLOCK instruction (jump targets remapped)."""
    runs = _runs(code)
    if not runs:
        return code, []
    out = live_out(code)
    blocks, new_pc, new = [], {}, []
    starts = {s: e for s, e in runs}
    pc = 0
    while pc < len(code):
        new_pc[pc] = len(new)
        if pc in starts:
            end = starts[pc]
            blk = KernelBlock(code[pc:end], out[end - 1], book, target)
            blocks.append(blk)
            new.append((bc.BLOCK, blk.stub))
            pc = end
            continue
        new.append(code[pc])
        pc += 1
    new_pc[len(code)] = len(new)
    fixed = []
    for ins in new:
        if ins[0] == bc.JMP:
            ins = (bc.JMP, new_pc[ins[1]])
        elif ins[0] == bc.BRFALSE:
            ins = (bc.BRFALSE, ins[1], new_pc[ins[2]])
        elif ins[0] == bc.TAGNE:
            ins = (bc.TAGNE, ins[1], ins[2], new_pc[ins[3]])
        fixed.append(ins)
    return fixed, blocks
