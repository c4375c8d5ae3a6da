"""Math function calls in the LLVM backend (`exp`, `tanh`, `sigmoid`, …), scalar and vector."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autorelay.codegen.llvm.fastmath import FAST_FUNCS, emit_fast, fast_exp
from autorelay.codegen.llvm.values import Val, float_hex, llvm_type, splat, splat_i32
from autorelay.te.expr import BF16_FUNCS, REINTERPRET, Call

if TYPE_CHECKING:
    from autorelay.codegen.llvm.exprs import ExprEmitter

_INTRINSIC = {
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "abs": "fabs",
    "floor": "floor",
    "ceil": "ceil",
    "round": "roundeven",
    "pow": "pow",
}
# libm functions (float32, float64 names); the trigonometric ones too, since LLVM's sin/cos
# intrinsics would only lower to these same calls lane by lane and tan/atan have no intrinsic
_LIBM = {
    "tanh": ("tanhf", "tanh"),
    "erf": ("erff", "erf"),
    "sin": ("sinf", "sin"),
    "cos": ("cosf", "cos"),
    "tan": ("tanf", "tan"),
    "atan": ("atanf", "atan"),
}


def emit_call(em: ExprEmitter, e: Call) -> Val:
    """A math function call: float32 `exp`/`erf`/`tanh` as vectorised polynomials (`fastmath`), an
    LLVM intrinsic (vector forms included), sigmoid spelled out, or a libm function called lane by
    lane (no vector libm is linked)."""
    args = [em.sub(a) for a in e.args]
    lanes = max(a.lanes for a in args)
    if e.name in BF16_FUNCS:
        return (bf16_to_f32 if e.name == "bf16_to_f32" else f32_to_bf16)(em, args[0])
    if e.name == REINTERPRET:
        return reinterpret_bits(em, args[0], e.dtype)
    if lanes:
        args = [em.broadcast(a) for a in args]
    t = em.ty(e.dtype, lanes)
    if e.dtype == "float32" and e.name in FAST_FUNCS:
        return emit_fast(em, e.name, args[0])
    if e.name == "sigmoid":
        one = float_hex(1.0, e.dtype)
        ones = splat(one, llvm_type(e.dtype), lanes)
        neg = em.op(f"fneg {t} {args[0].ref}", e.dtype, lanes)
        neg_val = Val(neg.ref, e.dtype, lanes)
        f32 = e.dtype == "float32"
        ex = fast_exp(em, neg_val) if f32 else em.intrinsic("exp", [neg_val], e.dtype, lanes)
        den = em.op(f"fadd {t} {ones}, {ex.ref}", e.dtype, lanes)
        return em.op(f"fdiv {t} {ones}, {den.ref}", e.dtype, lanes)
    if e.name in _LIBM:
        fn = _LIBM[e.name][0 if e.dtype == "float32" else 1]
        st = llvm_type(e.dtype)
        em.declared.add(f"declare {st} @{fn}({st})")
        if not lanes:
            return em.op(f"call {st} @{fn}({st} {args[0].ref})", e.dtype)
        vec = "poison"
        for lane in range(lanes):
            x = em.op(f"extractelement {t} {args[0].ref}, i32 {lane}", e.dtype)
            y = em.op(f"call {st} @{fn}({st} {x.ref})", e.dtype)
            vec = em.op(f"insertelement {t} {vec}, {st} {y.ref}, i32 {lane}", e.dtype, lanes).ref
        return Val(vec, e.dtype, lanes)
    return em.intrinsic(_INTRINSIC[e.name], args, e.dtype, lanes)


def reinterpret_bits(em: ExprEmitter, x: Val, dtype: str) -> Val:
    """`x`'s bits as `dtype` (`autorelay.te.expr.reinterpret`): a bitcast, lane for lane; a bool
    (`i1` in registers) becomes its byte, 0 or 1."""
    n = x.lanes
    op = "zext" if x.dtype == "bool" else "bitcast"
    return em.op(f"{op} {em.ty(x.dtype, n)} {x.ref} to {em.ty(dtype, n)}", dtype, n)


def bf16_to_f32(em: ExprEmitter, x: Val) -> Val:
    """uint16 bfloat16 words -> float32, exactly: the word becomes the top half of the bits."""
    n = x.lanes
    t32, tf = em.ty("int32", n), em.ty("float32", n)
    wide = em.op(f"zext {em.ty('uint16', n)} {x.ref} to {t32}", "int32", n)
    bits = em.op(f"shl {t32} {wide.ref}, {splat_i32(16, n)}", "int32", n)
    return em.op(f"bitcast {t32} {bits.ref} to {tf}", "float32", n)


def f32_to_bf16(em: ExprEmitter, x: Val) -> Val:
    """float32 -> uint16 bfloat16 words, rounding to nearest even; a NaN stays a NaN (quieted).

    Integer arithmetic on the bits rather than LLVM's `fptrunc` to `bfloat`: on hosts without
    AVX512-BF16 that lowers to a compiler-rt call the JIT may not resolve, and with it
    `vcvtneps2bf16` flushes denormals to zero, so the result would depend on the host; this is the
    NumPy oracle's rule bit for bit everywhere (vectorised, no libcall)."""
    n = x.lanes
    t32 = em.ty("int32", n)
    bits = em.op(f"bitcast {em.ty('float32', n)} {x.ref} to {t32}", "int32", n)
    top = em.op(f"lshr {t32} {bits.ref}, {splat_i32(16, n)}", "int32", n)
    lsb = em.op(f"and {t32} {top.ref}, {splat_i32(1, n)}", "int32", n)
    bias = em.op(f"add {t32} {lsb.ref}, {splat_i32(0x7FFF, n)}", "int32", n)
    rounded = em.op(f"add {t32} {bits.ref}, {bias.ref}", "int32", n)
    hi = em.op(f"lshr {t32} {rounded.ref}, {splat_i32(16, n)}", "int32", n)
    quiet = em.op(f"or {t32} {top.ref}, {splat_i32(0x40, n)}", "int32", n)
    nan = em.op(f"fcmp uno {em.ty('float32', n)} {x.ref}, {x.ref}", "bool", n)
    word = em.op(f"select {em.ty('bool', n)} {nan.ref}, {t32} {quiet.ref}, {t32} {hi.ref}", "int32", n)
    return em.op(f"trunc {t32} {word.ref} to {em.ty('uint16', n)}", "uint16", n)
