"""One global function -> one LLVM function (see `autorelay.runtime.aot.emit` for the scheme)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from autorelay.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.types import TensorType
from autorelay.runtime.aot.kernels import AotError, NativeKernel
from autorelay.runtime.aot.layout import TVal, flatten, leaves, nbytes, ptr_const, type_of
from autorelay.runtime.fallback import unflatten_value
from autorelay.runtime.vm.compiler import wrap_op

if TYPE_CHECKING:
    from autorelay.runtime.aot.emit import ModuleEmitter

_NAMES = {Match: "match (pattern matching over ADT values)", RefCreate: "references (ref)",
          RefRead: "references (ref_read)", RefWrite: "references (ref_write)",
          Function: "a closure (nested function)", Constructor: "an ADT constructor"}


class FunctionEmitter:
    def __init__(self, me: ModuleEmitter, name: str) -> None:
        self.me, self.name = me, name
        self.fn = me.mod[name]
        self.psizes, self.rsizes, self.elem = me.signature(name)
        self.lines: list[str] = []
        self.n = 0
        self.env: dict[int, Any] = {}
        self.memo: dict[int, Any] = {}
        self.sites: dict[int, list[str]] = {}  # call site -> its static output buffers
        self.state: dict[int, str] = {}  # parameter index -> its state buffer
        self.temps: dict[int, str] = {}
        self.param_vals: list[TVal] = []

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self) -> str:
        self.n += 1
        return f"L{self.n}"

    def fail(self, what: str) -> AotError:
        return AotError(f"AoT: @{self.name} uses {what}, which the AoT compiler does not support "
                        f"(first-order tensor programs with loops only); run it with the VM")

    def emit(self) -> str:
        args = [f"ptr %a{k}" for k in range(len(self.psizes))]
        args += [f"ptr %o{k}" for k in range(len(self.rsizes))]
        head = f"define void @aot_{self.name}({', '.join([*args, 'ptr %lst'])}) {{"
        self.lines.append("entry:")
        for k in range(len(self.psizes)):
            self.lines.append(f"  %s{k} = alloca ptr")
            self.lines.append(f"  store ptr %a{k}, ptr %s{k}")
        self.lines.append("  br label %loop")
        self.lines.append("loop:")
        for k, (p, size) in enumerate(zip(self.fn.params, self.psizes)):
            self.lines.append(f"  %p{k} = load ptr, ptr %s{k}")
            val = TVal(f"%p{k}", size)
            self.env[id(p)] = val
            self.param_vals.append(val)
        self.tail(self.fn.body)
        return "\n".join([head, *self.lines, "}"])

    # ---- helpers ---------------------------------------------------------------------------
    def memcpy(self, dst: str, src: str, size: int) -> None:
        self.lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {size}, i1 false)")

    def site_buffers(self, site: Expr, sizes: list[int]) -> list[str]:
        if id(site) not in self.sites:
            self.sites[id(site)] = [self.me.buffer(s) for s in sizes]
        return self.sites[id(site)]

    def block(self, name: str) -> None:
        self.lines.append(f"{name}:")

    # ---- tail position -----------------------------------------------------------------------
    def tail(self, e: Expr) -> None:
        while isinstance(e, Let):
            self.env[id(e.var)] = self.value(e.value)
            e = e.body
        if isinstance(e, If):
            then, other = self.label(), self.label()
            self.branch_on(e.cond, then, other)
            saved = dict(self.memo)
            self.block(then)
            self.tail(e.true_branch)
            self.memo = dict(saved)
            self.block(other)
            self.tail(e.false_branch)
            self.memo = saved
            return
        if isinstance(e, Call) and isinstance(e.op, GlobalVar):
            if e.op.name_hint == self.name:
                self.loop_back(e.args)
            else:
                self.call_global(e, tail=True)
            return
        if self.elem is not None:
            self.tail_list(e)
            return
        vals = flatten(self.value(e))
        for k, (v, size) in enumerate(zip(vals, self.rsizes)):
            self.memcpy(f"%o{k}", v.ptr, size)
        self.lines.append("  ret void")

    def tail_list(self, e: Expr) -> None:
        ctor = e.op if isinstance(e, Call) else e
        args = e.args if isinstance(e, Call) else ()
        if not isinstance(ctor, Constructor):
            raise self.fail(f"a {type(e).__name__} producing a List "
                            f"(only Cons(x, @{self.name}(...)) and Nil)")
        if not args:
            self.lines.append("  ret void")
            return
        rest = args[-1]
        if len(args) != 2 or not (isinstance(rest, Call) and isinstance(rest.op, GlobalVar)
                                  and rest.op.name_hint == self.name):
            raise self.fail(f"{ctor.name}(...) whose tail is not a call of @{self.name} itself")
        x = self.value(args[0])
        assert self.elem is not None
        if not isinstance(x, TVal) or x.nbytes != nbytes(self.elem):
            raise self.fail(f"a list element that is not a {self.elem} tensor")
        self.lines.append(f"  call void @aot_list_push(ptr %lst, ptr {x.ptr}, i64 {x.nbytes})")
        self.loop_back(rest.args)

    def loop_back(self, args: tuple[Expr, ...]) -> None:
        vals = [self.value(a) for a in args]
        params = [v.ptr for v in self.param_vals]
        src: dict[int, str] = {}
        for k, v in enumerate(vals):
            if not isinstance(v, TVal):
                raise self.fail("a tuple passed as a loop argument")
            if v.ptr == params[k]:
                continue  # unchanged
            if v.ptr in params:  # another parameter: copy it out before any state is overwritten
                if k not in self.temps:
                    self.temps[k] = self.me.buffer(self.psizes[k])
                self.memcpy(self.temps[k], v.ptr, self.psizes[k])
                src[k] = self.temps[k]
            else:
                src[k] = v.ptr
        for k, s in src.items():
            if k not in self.state:
                self.state[k] = self.me.buffer(self.psizes[k])
            self.memcpy(self.state[k], s, self.psizes[k])
            self.lines.append(f"  store ptr {self.state[k]}, ptr %s{k}")
        self.lines.append("  br label %loop")

    def call_global(self, e: Call, tail: bool) -> list[TVal] | None:
        name = e.op.name_hint  # type: ignore[union-attr]
        if name == self.name:
            raise self.fail(f"a recursive call of @{name} that is not in tail position")
        psizes, rsizes, elem = self.me.signature(name)
        vals = [self.value(a) for a in e.args]
        if len(vals) != len(psizes) or not all(isinstance(v, TVal) for v in vals):
            raise self.fail(f"a call of @{name} with non-tensor arguments")
        if elem is not None and not tail:
            raise self.fail(f"a List result of @{name} used as a value")
        outs = [f"%o{k}" for k in range(len(rsizes))] if tail else self.site_buffers(e, rsizes)
        argv = ", ".join([*(f"ptr {v.ptr}" for v in vals), *(f"ptr {o}" for o in outs),
                          "ptr %lst" if tail else "ptr null"])
        self.lines.append(f"  call void @aot_{name}({argv})")
        if tail:
            self.lines.append("  ret void")
            return None
        return [TVal(o, s) for o, s in zip(outs, rsizes)]

    def branch_on(self, cond: Expr, then: str, other: str) -> None:
        c = self.value(cond)
        t = type_of(cond)
        if not isinstance(c, TVal) or not (isinstance(t, TensorType) and t.dtype == "bool" and not t.shape):
            raise self.fail(f"an if condition of type {t} (a scalar bool tensor is needed)")
        byte, flag = self.tmp(), self.tmp()
        self.lines.append(f"  {byte} = load i8, ptr {c.ptr}")
        self.lines.append(f"  {flag} = icmp ne i8 {byte}, 0")
        self.lines.append(f"  br i1 {flag}, label %{then}, label %{other}")

    # ---- values ----------------------------------------------------------------------------------
    def value(self, e: Expr) -> Any:
        if isinstance(e, Var):
            try:
                return self.env[id(e)]
            except KeyError:
                raise AotError(f"AoT: unbound variable %{e.name_hint} in @{self.name}") from None
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit
        v = self._compute(e)
        if not isinstance(e, Let | If):
            self.memo[id(e)] = v
        return v

    def _compute(self, e: Expr) -> Any:
        if isinstance(e, Constant):
            return self.me.constant(e)
        if isinstance(e, Tuple):
            return tuple(self.value(f) for f in e.fields)
        if isinstance(e, TupleGetItem):
            v = self.value(e.tuple_value)
            if not isinstance(v, tuple):
                raise self.fail("a projection of a non-tuple value")
            return v[e.index]
        if isinstance(e, Let):
            while isinstance(e, Let):
                self.env[id(e.var)] = self.value(e.value)
                e = e.body
            return self.value(e)
        if isinstance(e, If):
            return self.if_value(e)
        if isinstance(e, Call):
            if isinstance(e.op, GlobalVar):
                outs = self.call_global(e, tail=False)
                assert outs is not None
                ret = type_of(e) or self.me.mod[e.op.name_hint].ret_type
                return unflatten_value(ret, outs)
            if isinstance(e.op, Op):
                fn, args = wrap_op(e)
                return self.kernel_call(e, fn, args)
            if isinstance(e.op, Function) and e.op.is_primitive:
                return self.kernel_call(e, e.op, e.args)
            if isinstance(e.op, Constructor):
                raise self.fail(f"the ADT constructor {e.op.name} outside Cons(x, @{self.name}(...))")
            if isinstance(e.op, Function):
                raise self.fail(_NAMES[Function])
            raise self.fail("a call of a function value (higher-order code)")
        if isinstance(e, GlobalVar):
            raise self.fail(f"the global @{e.name_hint} as a first-class value")
        raise self.fail(_NAMES.get(type(e), type(e).__name__))

    def if_value(self, e: If) -> Any:
        ts = leaves(type_of(e), f"an if expression in @{self.name}")
        outs = self.site_buffers(e, [nbytes(t) for t in ts])
        then, other, done = self.label(), self.label(), self.label()
        self.branch_on(e.cond, then, other)
        saved = dict(self.memo)
        for lbl, branch in ((then, e.true_branch), (other, e.false_branch)):
            self.memo = dict(saved)
            self.block(lbl)
            for o, v, t in zip(outs, flatten(self.value(branch)), ts):
                self.memcpy(o, v.ptr, nbytes(t))
            self.lines.append(f"  br label %{done}")
        self.memo = saved
        self.block(done)
        return unflatten_value(type_of(e), [TVal(o, nbytes(t)) for o, t in zip(outs, ts)])

    def kernel_call(self, site: Call, fn: Function, args: tuple[Expr, ...]) -> Any:
        k = self.me.table.native(fn)
        vals = [self.value(a) for a in args]
        ptrs = []
        packs = iter(k.packs)
        for kind, x in k.inputs:
            if kind == "const":
                ptrs.append(ptr_const(x))
                continue
            v = vals[x]
            if not isinstance(v, TVal):
                raise self.fail(f"a tuple argument to kernel {k.name}")
            if kind == "packed":  # the kernel reads this argument blocked: pack it first
                pack, buffer = next(packs)
                self.run_segments(pack, [v.ptr, ptr_const(buffer)])
                ptrs.append(ptr_const(buffer))
            else:
                ptrs.append(v.ptr)
        sizes = [int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize for s, d in k.outputs]
        outs = self.site_buffers(site, sizes)
        self.run_segments(k, [*ptrs, *outs])
        ret = type_of(site)
        return unflatten_value(ret, [TVal(o, s) for o, s in zip(outs, sizes)])

    def run_segments(self, k: NativeKernel, buffers: list[str]) -> None:
        """Call each loop nest of kernel `k` on `buffers` (its inputs, then its outputs) and its
        workspaces, the parallel ones over their whole extent."""
        argv = ", ".join(f"ptr {p}" for p in [*buffers, *(ptr_const(w) for w in k.workspaces)])
        for addr, par in k.segments:
            f = self.tmp()
            self.lines.append(f"  {f} = inttoptr i64 {addr} to ptr")
            self.lines.append(f"  call void {f}({argv}, i64 0, i64 {par})")
