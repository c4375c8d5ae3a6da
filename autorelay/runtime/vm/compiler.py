"""Relay (after FuseOps) -> VM bytecode (`autorelay.runtime.vm.bytecode`).

Each global function and each closure body becomes a `VMFunction`. Expressions are compiled in
graph form: a node shared by several parents is computed once per activation (a memo from node to
register), and each branch of an `if`/`match` gets its own copy of the memo so that a value
computed in one branch is never assumed in the other. Let-bound variables alias the register of
their value, so lets cost nothing. In tail position, calls become `TAILCALL`/`TAILCALLG` and
`if`/`match` arms return directly.

Calls of primitive functions become `KERNEL` instructions holding the callable the kernel provider
returned (one per distinct primitive function node). A bare op call (no fusion ran) is wrapped as a
one-op primitive function first.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np

from autorelay.errors import AutoRelayError
from autorelay.ir.attrs import Attrs
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
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import free_vars
from autorelay.runtime.values import ConstructorFn, ConstructorValue
from autorelay.runtime.vm import bytecode as bc
from autorelay.runtime.vm.bytecode import VMFunction
from autorelay.runtime.vm.liveness import dead_before_calls
from autorelay.utils.deep import deep


class VMError(AutoRelayError):
    """A program the VM cannot compile or run (names the construct and the function)."""


def wrap_op(call: Call) -> tuple[Function, tuple[Expr, ...]]:
    """A bare op call as a one-op primitive function, and its outside arguments."""
    params = [Var(f"p{i}", a.checked_type if a.has_checked_type else None) for i, a in enumerate(call.args)]
    inner = Call(call.op, tuple(params), call.attrs, call.type_args)
    if call.has_checked_type:
        inner.set_checked_type(call.checked_type)
    ret = call.checked_type if call.has_checked_type else None
    return Function(tuple(params), inner, ret, (), Attrs({"Primitive": 1})), call.args


class ModuleCompiler:
    """Compiles every global of a module (and the closures they create) against a kernel provider."""

    def __init__(self, mod: IRModule, provider: Any) -> None:
        self.mod, self.provider = mod, provider
        self.functions: list[VMFunction] = []
        self.global_index: dict[str, int] = {}
        self._closure_index: dict[int, tuple[Function, int, tuple[Var, ...]]] = {}
        self._kernels: dict[int, tuple[Function, Any]] = {}
        self._book = getattr(provider, "book", None)

    @deep
    def compile(self) -> list[VMFunction]:
        order = list(self.mod.functions.items())
        for gv, fn in order:  # indices first, so globals can call each other in any order
            self.global_index[gv.name_hint] = len(self.functions)
            self.functions.append(VMFunction(gv.name_hint, len(fn.params), 0))
        for gv, fn in order:
            _FunctionCompiler(self, fn, (), self.functions[self.global_index[gv.name_hint]]).run()
        return self.functions

    def kernel(self, fn: Function) -> Any:
        hit = self._kernels.get(id(fn))
        if hit is None:
            hit = self._kernels[id(fn)] = (fn, self.provider.kernel(fn))
        return hit[1]

    def closure(self, fn: Function, name: str) -> tuple[int, tuple[Var, ...]]:
        hit = self._closure_index.get(id(fn))
        if hit is not None:
            return hit[1], hit[2]
        fvs = tuple(free_vars(fn))
        index = len(self.functions)
        vf = VMFunction(name, len(fn.params), len(fvs))
        self.functions.append(vf)
        self._closure_index[id(fn)] = (fn, index, fvs)
        _FunctionCompiler(self, fn, fvs, vf).run()
        return index, fvs

    def constant(self, c: Constant) -> np.ndarray:
        arr = np.asarray(c.data)
        if self._book is not None and arr.flags.c_contiguous:
            self._book.add(arr)
        return arr


class _FunctionCompiler:
    def __init__(self, mc: ModuleCompiler, fn: Function, fvs: tuple[Var, ...], out: VMFunction) -> None:
        self.mc, self.fn, self.out = mc, fn, out
        self.code: list[list] = []
        self.nregs = 0
        self.env: dict[int, int] = {}
        for v in (*fn.params, *fvs):
            self.env[id(v)] = self.reg()
        self.memo: dict[int, int] = {}

    def reg(self) -> int:
        self.nregs += 1
        return self.nregs - 1

    def emit(self, *ins: Any) -> int:
        self.code.append(list(ins))
        return len(self.code) - 1

    def fail(self, what: str) -> VMError:
        return VMError(f"VM: {what} in {self.out.name} is not supported")

    def run(self) -> None:
        self.tail(self.fn.body)
        self.out.code = dead_before_calls([tuple(i) for i in self.code], len(self.fn.params))
        self.out.nregs = self.nregs

    # ---- tail position -------------------------------------------------------------------
    def tail(self, e: Expr) -> None:
        while isinstance(e, Let):
            self.bind_let(e)
            e = e.body
        if isinstance(e, If):
            cond = self.value(e.cond)
            br = self.emit(bc.BRFALSE, cond, -1)
            saved = dict(self.memo)
            self.tail(e.true_branch)
            self.code[br][2] = len(self.code)
            self.memo = saved
            self.tail(e.false_branch)
        elif isinstance(e, Match):
            self.match(e, None)
        elif isinstance(e, Call) and isinstance(e.op, GlobalVar):
            args = tuple(self.value(a) for a in e.args)
            self.emit(bc.TAILCALLG, self.global_index(e.op), args)
        elif isinstance(e, Call) and self.is_closure_call(e):
            callee = self.value(e.op)
            args = tuple(self.value(a) for a in e.args)
            self.emit(bc.TAILCALL, callee, args)
        else:
            self.emit(bc.RET, self.value(e))

    def is_closure_call(self, e: Call) -> bool:
        op = e.op
        return not isinstance(op, Op | Constructor) and not (isinstance(op, Function) and op.is_primitive)

    def global_index(self, gv: GlobalVar) -> int:
        try:
            return self.mc.global_index[gv.name_hint]
        except KeyError:
            raise VMError(f"VM: call of unknown global function @{gv.name_hint} in {self.out.name}") from None

    def bind_let(self, e: Let) -> None:
        if isinstance(e.value, Function) and not e.value.is_primitive:
            self.env[id(e.var)] = self.closure(e.value, self_var=e.var)
        else:
            self.env[id(e.var)] = self.value(e.value)

    # ---- values ----------------------------------------------------------------------------
    def value(self, e: Expr) -> int:
        """Compile `e` (not in tail position); the register holding its value."""
        if isinstance(e, Var):
            try:
                return self.env[id(e)]
            except KeyError:
                raise VMError(f"VM: unbound variable %{e.name_hint} in {self.out.name}") from None
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit
        r = self._compute(e)
        if not isinstance(e, Let | If | Match):
            self.memo[id(e)] = r
        return r

    def _compute(self, e: Expr) -> int:
        if isinstance(e, Constant):
            return self.put(bc.CONST, self.mc.constant(e))
        if isinstance(e, GlobalVar):
            r = self.reg()
            self.emit(bc.CLOSURE, r, self.global_index(e), (), -1)
            return r
        if isinstance(e, Constructor):
            if e.inputs:
                return self.put(bc.CONST, ConstructorFn(e))
            return self.put(bc.CONST, ConstructorValue(e, ()))
        if isinstance(e, Op):
            raise self.fail(f"the operator {e.name} used as a first-class value")
        if isinstance(e, Function):
            if e.is_primitive:
                raise self.fail("a primitive function used as a value")
            return self.closure(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Let):
            while isinstance(e, Let):
                self.bind_let(e)
                e = e.body
            return self.value(e)
        if isinstance(e, If):
            return self.branch(e)
        if isinstance(e, Match):
            dst = self.reg()
            self.match(e, dst)
            return dst
        if isinstance(e, Tuple):
            return self.put(bc.TUPLE, tuple(self.value(f) for f in e.fields))
        if isinstance(e, TupleGetItem):
            return self.put(bc.GET, self.value(e.tuple_value), e.index)
        if isinstance(e, RefCreate):
            return self.put(bc.REFNEW, self.value(e.value))
        if isinstance(e, RefRead):
            return self.put(bc.REFREAD, self.value(e.ref))
        if isinstance(e, RefWrite):
            return self.put(bc.REFWRITE, self.value(e.ref), self.value(e.value))
        raise self.fail(f"the expression kind {type(e).__name__}")

    def put(self, op: int, *operands: Any) -> int:
        r = self.reg()
        self.emit(op, r, *operands)
        return r

    def call(self, e: Call) -> int:
        op = e.op
        if isinstance(op, Op):
            op, args = wrap_op(e)
        else:
            args = e.args
        if isinstance(op, Function) and op.is_primitive:
            fn = self.mc.kernel(op)
            regs = tuple(self.value(a) for a in args)
            if len(regs) == 1:
                return self.put(bc.KERNEL1, fn, regs[0])
            return self.put(bc.KERNEL, fn, itemgetter(*regs) if regs else (lambda _regs: ()), regs)
        regs = tuple(self.value(a) for a in args)
        if isinstance(op, GlobalVar):
            return self.put(bc.CALLG, self.global_index(op), regs)
        if isinstance(op, Constructor):
            return self.put(bc.CONSTRUCT, op, regs)
        return self.put(bc.CALL, self.value(op), regs)

    def closure(self, fn: Function, self_var: Var | None = None) -> int:
        index, fvs = self.mc.closure(fn, f"{self.out.name}.closure{len(self.mc.functions)}")
        r = self.reg()
        slot = -1
        captured = []
        for k, v in enumerate(fvs):
            if self_var is not None and v is self_var:
                slot = k
                captured.append(r)  # placeholder: the machine stores the closure itself
            else:
                captured.append(self.value(v))
        self.emit(bc.CLOSURE, r, index, tuple(captured), slot)
        return r

    def branch(self, e: If) -> int:
        dst = self.reg()
        cond = self.value(e.cond)
        br = self.emit(bc.BRFALSE, cond, -1)
        saved = dict(self.memo)
        self.emit(bc.MOVE, dst, self.value(e.true_branch))
        jmp = self.emit(bc.JMP, -1)
        self.code[br][2] = len(self.code)
        self.memo = dict(saved)
        self.emit(bc.MOVE, dst, self.value(e.false_branch))
        self.code[jmp][1] = len(self.code)
        self.memo = saved
        return dst

    # ---- match -------------------------------------------------------------------------------
    def match(self, m: Match, dst: int | None) -> None:
        """Clauses in order; a failed test jumps to the next clause. `dst` None: tail position."""
        scrut = self.value(m.data)
        saved = dict(self.memo)
        ends: list[int] = []
        for clause in m.clauses:
            self.memo = dict(saved)
            fails: list[int] = []
            self.pattern(clause.lhs, scrut, fails)
            if dst is None:
                self.tail(clause.rhs)
            else:
                self.emit(bc.MOVE, dst, self.value(clause.rhs))
                ends.append(self.emit(bc.JMP, -1))
            for f in fails:
                self.code[f][3] = len(self.code)
        self.emit(bc.FAIL, f"match in {self.out.name}: no clause matches the value")
        for j in ends:
            self.code[j][1] = len(self.code)
        self.memo = saved

    def pattern(self, p: Pattern, reg: int, fails: list[int]) -> None:
        if isinstance(p, PatternWildcard):
            return
        if isinstance(p, PatternVar):
            self.env[id(p.var)] = reg
            return
        if isinstance(p, PatternConstructor):
            fails.append(self.emit(bc.TAGNE, reg, p.constructor.tag, -1))
            for k, sub in enumerate(p.patterns):
                if not isinstance(sub, PatternWildcard):
                    self.pattern(sub, self.put(bc.GET, reg, k), fails)
            return
        if isinstance(p, PatternTuple):
            for k, sub in enumerate(p.patterns):
                if not isinstance(sub, PatternWildcard):
                    self.pattern(sub, self.put(bc.GET, reg, k), fails)
            return
        raise self.fail(f"the pattern kind {type(p).__name__}")
