"""float16 <-> float32 conversions, the only float16 arithmetic a kernel does (`WidenFloat16`).

With F16C (every x86 CPU with AVX2, and NVPTX natively) LLVM's `fpext`/`fptrunc` on `half` become
one instruction per vector (`vcvtph2ps`, `vcvtps2ph`). Without it they lower to compiler-rt calls
(`__extendhfsf2`, `__truncsfhf2`) that the JIT does not resolve: the kernel would jump to nowhere.
So a CPU target without F16C converts with integer arithmetic on the bits instead, vectorised and
exact: subnormals, infinities and NaNs included, rounding to nearest even, as NumPy does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autorelay.codegen.llvm.values import Val, splat, splat_i32

if TYPE_CHECKING:
    from autorelay.codegen.llvm.exprs import ExprEmitter
    from autorelay.target import Target


def native_half(target: Target | None) -> bool:
    """Whether LLVM converts `half` without a library call for this target: F16C, which the
    host's feature list names and every CPU with AVX2 has (a named CPU's list holds only what the
    kernels read; LLVM takes the rest, F16C included, from the CPU's name)."""
    return target is None or target.kind != "cpu" or target.has("f16c") or target.has("avx2")


def f16_to_f32(em: ExprEmitter, x: Val) -> Val:
    """float16 (as `half`) -> float32, exactly. The half's exponent and mantissa, shifted into
    float32's fields, are scaled by 2^112 (the difference of the two exponent biases), which also
    normalises a subnormal; an infinity or NaN gets float32's all-ones exponent instead."""
    n = x.lanes
    t32, tf = em.ty("int32", n), em.ty("float32", n)
    word = em.op(f"bitcast {em.ty('float16', n)} {x.ref} to {em.ty('uint16', n)}", "uint16", n)
    h = em.op(f"zext {em.ty('uint16', n)} {word.ref} to {t32}", "int32", n)
    magnitude = em.op(f"and {t32} {h.ref}, {splat_i32(0x7FFF, n)}", "int32", n)
    shifted = em.op(f"shl {t32} {magnitude.ref}, {splat_i32(13, n)}", "int32", n)
    as_float = em.op(f"bitcast {t32} {shifted.ref} to {tf}", "float32", n)
    scale = splat("0x46F0000000000000", "float", n)  # 2^112
    scaled = em.op(f"fmul {tf} {as_float.ref}, {scale}", "float32", n)
    finite_bits = em.op(f"bitcast {tf} {scaled.ref} to {t32}", "int32", n)
    special_bits = em.op(f"or {t32} {shifted.ref}, {splat_i32(0x7F800000, n)}", "int32", n)
    special = em.op(f"icmp uge {t32} {magnitude.ref}, {splat_i32(0x7C00, n)}", "bool", n)
    tb = em.ty("bool", n)
    bits = em.op(f"select {tb} {special.ref}, {t32} {special_bits.ref}, {t32} {finite_bits.ref}", "int32", n)
    sign = em.op(f"and {t32} {h.ref}, {splat_i32(0x8000, n)}", "int32", n)
    sign = em.op(f"shl {t32} {sign.ref}, {splat_i32(16, n)}", "int32", n)
    signed = em.op(f"or {t32} {bits.ref}, {sign.ref}", "int32", n)
    return em.op(f"bitcast {t32} {signed.ref} to {tf}", "float32", n)


def f32_to_f16(em: ExprEmitter, x: Val) -> Val:
    """float32 -> float16 (as `half`), rounding to nearest even. Magnitudes past float16's range
    become infinity (a NaN, the quiet NaN); those below its normal range are rounded by adding 0.5
    in float32, whose mantissa then holds the float16 subnormal; the rest re-bias the exponent and
    round the 13 dropped mantissa bits (adding 0xFFF plus the lowest kept bit)."""
    n = x.lanes
    t32, tf, tb = em.ty("int32", n), em.ty("float32", n), em.ty("bool", n)
    bits = em.op(f"bitcast {tf} {x.ref} to {t32}", "int32", n)
    sign = em.op(f"and {t32} {bits.ref}, {splat_i32(0x80000000, n)}", "int32", n)
    u = em.op(f"xor {t32} {bits.ref}, {sign.ref}", "int32", n)
    nan = em.op(f"icmp ugt {t32} {u.ref}, {splat_i32(0x7F800000, n)}", "bool", n)
    quiet_nan, infinity = splat_i32(0x7E00, n), splat_i32(0x7C00, n)
    overflow = em.op(f"select {tb} {nan.ref}, {t32} {quiet_nan}, {t32} {infinity}", "int32", n)
    magic = splat_i32(0x3F000000, n)  # 0.5: its exponent puts float16's subnormal step at float32's last bit
    as_float = em.op(f"bitcast {t32} {u.ref} to {tf}", "float32", n)
    small_sum = em.op(f"fadd {tf} {as_float.ref}, {splat('0x3FE0000000000000', 'float', n)}", "float32", n)
    small_bits = em.op(f"bitcast {tf} {small_sum.ref} to {t32}", "int32", n)
    small = em.op(f"sub {t32} {small_bits.ref}, {magic}", "int32", n)
    odd = em.op(f"lshr {t32} {u.ref}, {splat_i32(13, n)}", "int32", n)
    odd = em.op(f"and {t32} {odd.ref}, {splat_i32(1, n)}", "int32", n)
    rebiased = em.op(f"add {t32} {u.ref}, {splat_i32(((15 - 127) << 23) + 0xFFF, n)}", "int32", n)
    rebiased = em.op(f"add {t32} {rebiased.ref}, {odd.ref}", "int32", n)
    normal = em.op(f"lshr {t32} {rebiased.ref}, {splat_i32(13, n)}", "int32", n)
    is_small = em.op(f"icmp ult {t32} {u.ref}, {splat_i32(113 << 23, n)}", "bool", n)
    finite = em.op(f"select {tb} {is_small.ref}, {t32} {small.ref}, {t32} {normal.ref}", "int32", n)
    too_big = em.op(f"icmp uge {t32} {u.ref}, {splat_i32(143 << 23, n)}", "bool", n)
    magnitude = em.op(f"select {tb} {too_big.ref}, {t32} {overflow.ref}, {t32} {finite.ref}", "int32", n)
    high_sign = em.op(f"lshr {t32} {sign.ref}, {splat_i32(16, n)}", "int32", n)
    word = em.op(f"or {t32} {magnitude.ref}, {high_sign.ref}", "int32", n)
    word16 = em.op(f"trunc {t32} {word.ref} to {em.ty('uint16', n)}", "uint16", n)
    return em.op(f"bitcast {em.ty('uint16', n)} {word16.ref} to {em.ty('float16', n)}", "float16", n)
