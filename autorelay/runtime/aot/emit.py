"""Relay (first-order, after FuseOps) -> LLVM IR text: one function per global.

Calling convention: `void @aot_<name>(ptr params..., ptr results..., ptr list)`; every tensor is a
pointer to its bytes. Results are written into the caller's buffers; a function returning a
`List` appends its elements to a growable list record `{ptr data, i64 len, i64 cap}` instead.

Inside a function:

* a primitive call is a direct call of the kernel's segment functions (addresses baked in) on
  buffers allocated once per call site — no allocation and no Python at run time;
* `if` on a scalar bool tensor is a branch on the byte the kernel wrote;
* a tail call of the function itself is a loop: the changed arguments are copied into the
  parameters' own state buffers (through temporaries when an argument is another parameter, so
  `f(b, a)` swaps correctly) and control jumps back to the loop header;
* `Cons(x, f(...))` in tail position (generative loops such as char-rnn) appends `x` to the list
  record and loops; `Nil` returns;
* a call of another global is an LLVM call (the call graph must not be recursive otherwise).

Anything else — closures, `match`, references, non-tail recursion, ADTs other than that list
pattern — raises `AotError` naming the construct and the function.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.expr import Constant, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.runtime.aot.function import FunctionEmitter
from autorelay.runtime.aot.kernels import AotError, KernelTable
from autorelay.runtime.aot.layout import TVal, leaves, list_element, nbytes, ptr_const, type_of


class ModuleEmitter:
    """Emits every global reachable from the entry; owns the static buffers."""

    def __init__(self, mod: IRModule, table: KernelTable, realloc_addr: int) -> None:
        self.mod, self.table, self.realloc = mod, table, realloc_addr
        self.functions: list[str] = []
        self.signatures: dict[str, tuple[list[int], list[int], TensorType | None]] = {}

    def buffer(self, size: int) -> str:
        arr = np.zeros(max(size, 1) + 64, np.uint8)  # slack: kernels may read a vector past the end
        self.table.keep.append(arr)
        return ptr_const(int(arr.ctypes.data))

    def constant(self, c: Constant) -> TVal:
        arr = np.ascontiguousarray(np.asarray(c.data))
        if arr.dtype == np.bool_:
            arr = arr.view(np.uint8)
        self.table.keep.append(arr)
        return TVal(ptr_const(int(arr.ctypes.data)), arr.nbytes)

    def signature(self, name: str) -> tuple[list[int], list[int], TensorType | None]:
        """(parameter sizes, result sizes, list element type or None) of a global."""
        if name not in self.signatures:
            fn = self.mod[name]
            ps = [nbytes(t) for p in fn.params
                  for t in leaves(type_of(p), f"parameter %{p.name_hint} of @{name}")]
            if len(ps) != len(fn.params):
                raise AotError(f"AoT: @{name} has a tuple-typed parameter; only tensor parameters are "
                               f"supported")
            ret = fn.ret_type if fn.ret_type is not None else type_of(fn.body)
            elem = list_element(self.mod, ret)
            rs = [] if elem is not None else [nbytes(t) for t in leaves(ret, f"the result of @{name}")]
            self.signatures[name] = (ps, rs, elem)
        return self.signatures[name]

    def emit_all(self, entry: str) -> str:
        order = self._call_order(entry)
        for name in order:
            self.functions.append(FunctionEmitter(self, name).emit())
        decls = [
            "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
            _LIST_PUSH.replace("REALLOC", str(self.realloc)),
        ]
        return "\n\n".join([*decls, *self.functions]) + "\n"

    def _call_order(self, entry: str) -> list[str]:
        """Globals reachable from `entry`; raises on recursion other than self tail calls."""
        from autorelay.ir.visitor import post_order

        edges: dict[str, list[str]] = {}
        todo, seen = [entry], set()
        while todo:
            g = todo.pop()
            if g in seen:
                continue
            seen.add(g)
            if g not in self.mod:
                raise AotError(f"AoT: call of unknown global function @{g}")
            calls = [n.name_hint for n in post_order(self.mod[g].body) if isinstance(n, GlobalVar)]
            edges[g] = [c for c in dict.fromkeys(calls) if c != g]
            todo.extend(edges[g])
        state: dict[str, int] = {}
        order: list[str] = []

        def visit(g: str, path: list[str]) -> None:  # call graphs are small: plain recursion is fine
            if state.get(g) == 2:
                return
            if state.get(g) == 1:
                cycle = " -> ".join("@" + x for x in [*path[path.index(g):], g])
                raise AotError(f"AoT: mutual recursion {cycle} is not supported (only a function calling "
                               f"itself in tail position); use the VM")
            state[g] = 1
            for h in edges[g]:
                visit(h, [*path, g])
            state[g] = 2
            order.append(g)

        visit(entry, [])
        return order


_LIST_PUSH = """define internal void @aot_list_push(ptr %lst, ptr %src, i64 %n) {
entry:
  %lenp = getelementptr inbounds i64, ptr %lst, i64 1
  %capp = getelementptr inbounds i64, ptr %lst, i64 2
  %len = load i64, ptr %lenp
  %cap = load i64, ptr %capp
  %full = icmp sge i64 %len, %cap
  br i1 %full, label %grow, label %put
grow:
  %c2 = mul i64 %cap, 2
  %c3 = add i64 %c2, 16
  %bytes = mul i64 %c3, %n
  %old = load ptr, ptr %lst
  %rf = inttoptr i64 REALLOC to ptr
  %new = call ptr %rf(ptr %old, i64 %bytes)
  store ptr %new, ptr %lst
  store i64 %c3, ptr %capp
  br label %put
put:
  %data = load ptr, ptr %lst
  %off = mul i64 %len, %n
  %dst = getelementptr inbounds i8, ptr %data, i64 %off
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %n, i1 false)
  %len2 = add i64 %len, 1
  store i64 %len2, ptr %lenp
  ret void
}"""
