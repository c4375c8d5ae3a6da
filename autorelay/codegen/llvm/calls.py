"""Math function calls in the LLVM backend (`exp`, `tanh`, `sigmoid`, …), scalar and vector."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autorelay.codegen.llvm.values import Val, float_hex, llvm_type
from autorelay.te.expr import Call

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
    """A math function call: an LLVM intrinsic (vector forms included), sigmoid spelled out, or
    a libm function called lane by lane (no vector libm is linked)."""
    args = [em.sub(a) for a in e.args]
    lanes = max(a.lanes for a in args)
    if lanes:
        args = [em.broadcast(a) for a in args]
    t = em.ty(e.dtype, lanes)
    if e.name == "sigmoid":
        one = float_hex(1.0, e.dtype)
        ones = f"<{', '.join(f'{llvm_type(e.dtype)} {one}' for _ in range(lanes))}>" if lanes else one
        neg = em.op(f"fneg {t} {args[0].ref}", e.dtype, lanes)
        ex = _intrinsic(em, "exp", [Val(neg.ref, e.dtype, lanes)], e.dtype, lanes)
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
    return _intrinsic(em, _INTRINSIC[e.name], args, e.dtype, lanes)


def _intrinsic(em: ExprEmitter, name: str, args: list[Val], dtype: str, lanes: int) -> Val:
    t = em.ty(dtype, lanes)
    suffix = (
        f"v{lanes}f{32 if dtype == 'float32' else 64}"
        if lanes
        else ("f32" if dtype == "float32" else "f64")
    )
    fn = f"@llvm.{name}.{suffix}"
    em.declared.add(f"declare {t} {fn}({', '.join(t for _ in args)})")
    return em.op(f"call {t} {fn}({', '.join(f'{t} {a.ref}' for a in args)})", dtype, lanes)
