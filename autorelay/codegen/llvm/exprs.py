"""Expression emission for the LLVM backend, scalar and vector.

In a vectorized loop an expression that does not depend on the lane variable is emitted once as
a scalar (and broadcast where it meets a vector); loads are `LoadEmitter`'s (`loads.py`); any
other lane-dependent integer expression is evaluated lane by lane. Float arithmetic carries the
`contract` flag so multiply-adds become FMAs; nothing is reassociated, so results stay
deterministic.

Each block remembers the value it emitted for each expression node in each lane context
(`_node_value`), so a subtree that several expressions share (unrolled copies share the nodes
that do not read the unrolled variable; a Winograd transform's sums share their terms) is walked
once per block, not once per path to it. The instruction numbering (`InstructionWriter`) would
give the same values; this spares the walk and the text it compares. A node whose emission wrote
an unnumbered instruction (a load from a buffer the function stores to) is not remembered.

Bools are `i1` in registers but one byte (`i8`, 0 or 1) in memory, NumPy's layout: a vector of
`i1` in memory would be bit-packed. So a load of a bool buffer reads bytes and compares them with
zero, and a store widens with `zext` (see `SegmentEmitter.store`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from autorelay.codegen.llvm.calls import emit_call
from autorelay.codegen.llvm.half import f16_to_f32, f32_to_f16, native_half
from autorelay.codegen.llvm.lanes import lane_coef as _lane_coef
from autorelay.codegen.llvm.loads import LoadEmitter
from autorelay.codegen.llvm.values import Val, float_hex, llvm_type, mem_align, mem_type, splat
from autorelay.te.expr import (
    BF16_FUNCS,
    REINTERPRET,
    Bin,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    Load,
    Not,
    Select,
    Var,
    is_float,
)
from autorelay.te.traverse import reads_var
from autorelay.tir.linear_form import Forms
from autorelay.tir.simplify import simplify

if TYPE_CHECKING:
    from autorelay.target import Target

__all__ = ["ExprEmitter"]

_ICMP = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
_UCMP = {"lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge", "eq": "eq", "ne": "ne"}
_UNSIGNED = ("uint8", "uint16", "uint32", "uint64", "bool")  # as i1, true is -1 when read signed
_FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_BITWISE = {"bitand": "and", "bitor": "or", "bitxor": "xor", "shl": "shl"}  # integer ops in LLVM


def _vector_integer(e: Expr) -> bool:
    """Whether a lane-dependent integer expression is data to compute as one vector op (a select
    of a padded byte load, a widening cast, int32 requantize arithmetic) rather than lane by lane:
    every node that neither makes nor takes int64 (index arithmetic, whose lanes feed scalar
    loads; and int64 products, which LLVM keeps faster as scalars than as AVX2's emulated vectors
    of them). Variables stay lane by lane."""
    if isinstance(e, Select):
        return e.dtype != "int64"
    if isinstance(e, Cast | Bin | Cmp):
        return e.dtype != "int64" and e.a.dtype != "int64"
    return False


class ExprEmitter(LoadEmitter):
    """Emits loop-IR expressions as LLVM instructions (through `InstructionWriter`, which numbers
    the values of a basic block)."""

    def __init__(self) -> None:
        # (id of a node, id of the lane variable or 0, lanes) -> (the node, the variable, its value)
        self._nodes: dict[tuple[int, int, int], tuple[Expr, Var | None, Val]] = {}
        super().__init__()
        # linear forms of load indices, kept for the emitter's life: a vector load asks for its
        # index's form twice, and neighbouring loads share most of their index's subtrees
        self.forms = Forms()
        self.env: dict[Var, Val] = {}
        self.ptr: dict[int, str] = {}
        self.vector_var: Var | None = None
        self.lanes = 0
        self.declared: set[str] = set()
        self.target: Target | None = None  # set by emitters for a target (what instructions it has)
        # per variable: id of an expression -> (the expression, whether it reads the variable)
        self._reads: dict[Var, dict[int, tuple[Expr, bool]]] = {}

    def reads(self, e: Expr, v: Var) -> bool:
        """Whether `e` reads `v` (`reads_var`, one memo per variable): emitting a vector expression
        asks this of every subexpression."""
        memo = self._reads.get(v)
        if memo is None:
            memo = self._reads[v] = {}
        return reads_var(e, v, memo)

    def forget(self) -> None:
        super().forget()
        self._nodes.clear()

    def _node_value(self, e: Expr, emit: Callable[[Expr], Val]) -> Val:
        """`emit(e)` in the current lane context, or the value this block already has for `e` there."""
        v = self.vector_var
        key = (id(e), id(v) if v is not None else 0, self.lanes)
        hit = self._nodes.get(key)
        if hit is not None and hit[0] is e and hit[1] is v:
            return hit[2]
        before = self.unnumbered
        out = emit(e)
        if self.unnumbered == before:
            self._nodes[key] = (e, v, out)
        return out

    def broadcast(self, v: Val) -> Val:
        if v.lanes or not self.lanes:
            return v
        t = self.ty(v.dtype, 0)
        ins = self.op(f"insertelement <{self.lanes} x {t}> poison, {t} {v.ref}, i32 0", v.dtype, self.lanes)
        return self.op(
            f"shufflevector <{self.lanes} x {t}> {ins.ref}, <{self.lanes} x {t}> poison, "
            f"<{self.lanes} x i32> zeroinitializer",
            v.dtype,
            self.lanes,
        )

    # ---- scalar --------------------------------------------------------------------------
    def scalar(self, e: Expr) -> Val:
        saved, self.vector_var = self.vector_var, None
        lanes, self.lanes = self.lanes, 0
        try:
            return self._node_value(e, self._expr)
        finally:
            self.vector_var, self.lanes = saved, lanes

    def vexpr(self, e: Expr) -> Val:
        """Emit in the current vector context: a vector if `e` depends on the lane variable."""
        v = self.vector_var
        if v is None or not self.reads(e, v):
            return self.scalar(e)
        return self._node_value(e, self._vector_value)

    def _vector_value(self, e: Expr) -> Val:
        """`e`, which reads the lane variable, as a vector (or lane by lane where it must be)."""
        v = self.vector_var
        assert v is not None
        if isinstance(e, Load):
            return self._vload(e)
        if e.dtype in ("int64", "int32") and not isinstance(e, Load):
            coef = _lane_coef(e, v)
            if coef is not None:  # a linear index: broadcast base + <0, c, 2c, ...>
                base = self.broadcast(self.scalar(simplify(e, mapping={v: Const(0, "int64")})))
                t = self.ty(e.dtype, self.lanes)
                ramp = "<" + ", ".join(f"{llvm_type(e.dtype)} {coef * k}" for k in range(self.lanes)) + ">"
                return self.op(f"add {t} {base.ref}, {ramp}", e.dtype, self.lanes)
        if isinstance(e, Call) and (e.name in BF16_FUNCS or e.name == REINTERPRET):  # bits, lane-parallel
            return self._expr(e)
        if _vector_integer(e):
            return self._expr(e)
        if (not is_float(e.dtype) and e.dtype != "bool") or isinstance(e, Var):
            return self._per_lane(e)
        return self._expr(e)

    def sub(self, e: Expr) -> Val:
        """A subexpression: a vector in a vector context when it depends on the lane."""
        return self.vexpr(e) if self.vector_var is not None else self._node_value(e, self._expr)

    def _pair(self, a: Expr, b: Expr) -> tuple[Val, Val, int]:
        va, vb = self.sub(a), self.sub(b)
        lanes = max(va.lanes, vb.lanes)
        if lanes:
            va, vb = self.broadcast(va), self.broadcast(vb)
        return va, vb, lanes

    def _expr(self, e: Expr) -> Val:
        if isinstance(e, Var):
            if e not in self.env:
                raise KeyError(f"codegen: variable {e.name} is not bound")
            return self.env[e]
        if isinstance(e, Const):
            return Val(self._const(e), e.dtype)
        if isinstance(e, Load):
            p = self.gep(e.buffer, self.scalar(e.index).ref)
            loaded = self.load_op(e.buffer, f"load {mem_type(e.dtype)}, ptr {p}, align {mem_align(e.dtype)}",
                                  e.dtype)
            return self._from_memory(loaded)
        if isinstance(e, Bin):
            return self._bin(e)
        if isinstance(e, Cmp):
            a, b, lanes = self._pair(e.a, e.b)
            t = self.ty(e.a.dtype, lanes)
            if is_float(e.a.dtype):
                return self.op(f"fcmp {_FCMP[e.op]} {t} {a.ref}, {b.ref}", "bool", lanes)
            table = _UCMP if e.a.dtype in _UNSIGNED else _ICMP
            return self.op(f"icmp {table[e.op]} {t} {a.ref}, {b.ref}", "bool", lanes)
        if isinstance(e, Not):
            a = self.sub(e.a)
            ones = self._splat("true", a.lanes)
            return self.op(f"xor {self.ty('bool', a.lanes)} {a.ref}, {ones}", "bool", a.lanes)
        if isinstance(e, Select):
            c = self.sub(e.cond)
            a, b, lanes = self._pair(e.t, e.f)
            lanes = max(lanes, c.lanes)
            if lanes:
                a, b = self.broadcast(a), self.broadcast(b)
            t = self.ty(e.dtype, lanes)
            return self.op(
                f"select {self.ty('bool', c.lanes)} {c.ref}, {t} {a.ref}, {t} {b.ref}", e.dtype, lanes
            )
        if isinstance(e, Cast):
            return self._cast(e)
        if isinstance(e, Call):
            return self.call(e)
        raise TypeError(f"codegen: cannot emit {type(e).__name__}")

    def call(self, e: Call) -> Val:
        """A math function call; a backend whose target lacks LLVM's math lowering (NVPTX: no
        libm) overrides this."""
        return emit_call(self, e)

    def _splat(self, scalar: str, lanes: int) -> str:
        return splat(scalar, "i1", lanes)

    def intrinsic(self, name: str, args: list[Val], dtype: str, lanes: int, flags: str = "") -> Val:
        """A call of the float intrinsic `llvm.<name>` on `args` (all `dtype` x `lanes`), declared once;
        `flags`: fast-math flags of the call (`nsz`: the sign of a zero result may differ)."""
        t = self.ty(dtype, lanes)
        width = 32 if dtype == "float32" else 64
        fn = f"@llvm.{name}.{f'v{lanes}f{width}' if lanes else f'f{width}'}"
        self.declared.add(f"declare {t} {fn}({', '.join(t for _ in args)})")
        call = f"call {flags} " if flags else "call "
        return self.op(f"{call}{t} {fn}({', '.join(f'{t} {a.ref}' for a in args)})", dtype, lanes)

    def _const(self, c: Const) -> str:
        if c.dtype == "bool":
            return "true" if c.value else "false"
        if is_float(c.dtype):
            return float_hex(float(c.value), c.dtype)
        return str(int(c.value))

    def _bin(self, e: Bin) -> Val:
        a, b, lanes = self._pair(e.a, e.b)
        t = self.ty(e.dtype, lanes)
        if is_float(e.dtype):
            if e.op in ("min", "max"):  # a NaN operand gives NaN, as NumPy's minimum/maximum
                return self.intrinsic("minimum" if e.op == "min" else "maximum", [a, b], e.dtype, lanes,
                                      flags="nsz")
            ins = {"add": "fadd contract", "sub": "fsub contract", "mul": "fmul contract", "div": "fdiv"}
            if e.op not in ins:
                raise TypeError(f"codegen: float {e.op} is not supported")
            return self.op(f"{ins[e.op]} {t} {a.ref}, {b.ref}", e.dtype, lanes)
        if e.op in ("and", "or"):
            return self.op(f"{e.op} {t} {a.ref}, {b.ref}", e.dtype, lanes)
        unsigned = e.dtype in _UNSIGNED
        if e.op in ("add", "sub", "mul"):
            return self.op(f"{e.op} {t} {a.ref}, {b.ref}", e.dtype, lanes)
        if e.op in ("min", "max"):
            pred = ("ult" if e.op == "min" else "ugt") if unsigned else ("slt" if e.op == "min" else "sgt")
            c = self.op(f"icmp {pred} {t} {a.ref}, {b.ref}", "bool", lanes)
            return self.op(
                f"select {self.ty('bool', lanes)} {c.ref}, {t} {a.ref}, {t} {b.ref}", e.dtype, lanes
            )
        if e.op == "shr":
            return self.op(f"{'lshr' if unsigned else 'ashr'} {t} {a.ref}, {b.ref}", e.dtype, lanes)
        if e.op in _BITWISE:
            return self.op(f"{_BITWISE[e.op]} {t} {a.ref}, {b.ref}", e.dtype, lanes)
        if e.op in ("floordiv", "mod"):
            b, minus_one = self._trap_free_divisor(e.b, b, t, lanes, unsigned)
            if unsigned:
                return self.op(
                    f"{'udiv' if e.op == 'floordiv' else 'urem'} {t} {a.ref}, {b.ref}", e.dtype, lanes
                )
            out = self._floor_divmod(e.op, a, b, t, lanes)
            if minus_one is None:
                return out
            # x // -1 is -x (wrapping, as NumPy's does at the minimum) and x mod -1 is 0
            zero = "zeroinitializer" if lanes else "0"
            exact = self.op(f"sub {t} {zero}, {a.ref}", e.dtype, lanes) if e.op == "floordiv" else None
            return self.op(f"select {self.ty('bool', lanes)} {minus_one.ref}, {t} "
                           f"{exact.ref if exact else zero}, {t} {out.ref}", e.dtype, lanes)
        raise TypeError(f"codegen: integer {e.op} is not supported")

    def _trap_free_divisor(self, expr: Expr, b: Val, t: str, lanes: int, unsigned: bool
                           ) -> tuple[Val, Val | None]:
        """A run-time divisor the division instruction cannot trap on, and (signed) the lanes where
        it was -1. x86's `idiv` raises SIGFPE, killing the process, on a zero divisor and on the
        minimum divided by -1; a constant divisor that is neither is used as it is. A zero divisor
        becomes 1 (the ops define that case themselves: `divide` gives 0); -1 becomes 1 and the
        caller selects the exact answer."""
        if isinstance(expr, Const) and expr.value != 0 and (unsigned or expr.value != -1):
            return b, None
        st, bt = self.ty(b.dtype, 0), self.ty("bool", lanes)
        bad = self.op(f"icmp eq {t} {b.ref}, {splat('0', st, lanes)}", "bool", lanes)
        minus_one = None
        if not unsigned:
            minus_one = self.op(f"icmp eq {t} {b.ref}, {splat('-1', st, lanes)}", "bool", lanes)
            bad = self.op(f"or {bt} {bad.ref}, {minus_one.ref}", "bool", lanes)
        return self.op(f"select {bt} {bad.ref}, {t} {splat('1', st, lanes)}, {t} {b.ref}", b.dtype, lanes), \
            minus_one

    def _floor_divmod(self, op: str, a: Val, b: Val, t: str, lanes: int) -> Val:
        """Python semantics: the remainder takes the divisor's sign."""
        zero = "zeroinitializer" if lanes else "0"
        bt = self.ty("bool", lanes)
        q = self.op(f"sdiv {t} {a.ref}, {b.ref}", a.dtype, lanes)
        r = self.op(f"srem {t} {a.ref}, {b.ref}", a.dtype, lanes)
        rnz = self.op(f"icmp ne {t} {r.ref}, {zero}", "bool", lanes)
        rneg = self.op(f"icmp slt {t} {r.ref}, {zero}", "bool", lanes)
        bneg = self.op(f"icmp slt {t} {b.ref}, {zero}", "bool", lanes)
        diff = self.op(f"xor {bt} {rneg.ref}, {bneg.ref}", "bool", lanes)
        adj = self.op(f"and {bt} {rnz.ref}, {diff.ref}", "bool", lanes)
        if op == "floordiv":
            one = self.op(f"zext {bt} {adj.ref} to {t}", a.dtype, lanes)
            return self.op(f"sub {t} {q.ref}, {one.ref}", a.dtype, lanes)
        fix = self.op(f"select {bt} {adj.ref}, {t} {b.ref}, {t} {zero}", a.dtype, lanes)
        return self.op(f"add {t} {r.ref}, {fix.ref}", a.dtype, lanes)

    def _cast(self, e: Cast) -> Val:
        return self.convert(self.sub(e.a), e.dtype)

    def convert(self, a: Val, dst: str) -> Val:
        """`a` converted to `dst`. float16 converts only to and from float32, any other type going
        through float32 (exact, but for the rare float64 tie that the two roundings break the other
        way; x86 has no float64 -> float16 instruction either): one instruction with F16C, else
        integer arithmetic (`codegen.llvm.half`)."""
        if a.dtype == dst:
            return a
        native = native_half(self.target)
        if a.dtype == "float16":
            wide = self._convert_plain(a, "float32") if native else f16_to_f32(self, a)
            return self.convert(wide, dst)
        if dst == "float16":
            wide = self.convert(a, "float32")
            return self._convert_plain(wide, dst) if native else f32_to_f16(self, wide)
        return self._convert_plain(a, dst)

    def _convert_plain(self, a: Val, dst: str) -> Val:
        src, lanes = a.dtype, a.lanes
        ts, td = self.ty(src, lanes), self.ty(dst, lanes)
        if dst == "bool":
            if is_float(src):
                return self.op(f"fcmp une {ts} {a.ref}, zeroinitializer", "bool", lanes)
            return self.op(f"icmp ne {ts} {a.ref}, zeroinitializer", "bool", lanes)
        if is_float(src) and is_float(dst):
            ins = "fpext" if np.finfo(dst).bits > np.finfo(src).bits else "fptrunc"
        elif is_float(dst):
            ins = "uitofp" if src in _UNSIGNED else "sitofp"
        elif is_float(src):
            ins = "fptoui" if dst in _UNSIGNED else "fptosi"
        else:
            bits = {d: 1 if d == "bool" else np.iinfo(d).bits for d in (src, dst)}
            if bits[dst] == bits[src]:
                return Val(a.ref, dst, lanes)
            ins = "trunc" if bits[dst] < bits[src] else ("zext" if src in _UNSIGNED else "sext")
        return self.op(f"{ins} {ts} {a.ref} to {td}", dst, lanes)
