"""Integer dot products of 8-bit operands into 32-bit lanes, chosen from the target's features.

A loop tensorized as a dot (`schedule.steps.Tensorize(stage, axis, "dot")`) computes, for a vector
of `lanes` int32 accumulators, `acc[l] += sum_k a[k] * b[l*g + k]` for k < g: `a` is g bytes shared
by every lane (an input pixel's channel group, broadcast), `b` is lanes*g bytes (a weight vector,
each lane's group contiguous). Every path is exact (int32 wrap-around, as the reference sums):

* AVX-512 VNNI / AVX-VNNI, g = 4, one operand unsigned and one signed: one `vpdpbusd` (unsigned
  bytes x signed bytes, 4 products per lane). Signed x signed takes the vpmaddwd path: the
  sign-flip rewrite (`(a + 128) * b - 128 * b`, a second `vpdpbusd` with a constant operand) made
  LLVM 22's X86 instruction selection hang, measured on a 3x3 convolution.
* AVX2 / AVX-512BW, g = 4, unsigned x signed, and a *narrow* dot (the schedule promises every
  adjacent pair of the signed operand sums to at most 128 in magnitude: a constant weight
  quantized to 7 bits): one `vpmaddubsw` (bytes multiplied, adjacent products summed into int16:
  at most 255 * 128 = 32640, so it never saturates) and one `vpmaddwd` by ones (the two int16
  sums of a lane into int32). Without the promise `vpmaddubsw` could saturate, so it is not used.
* AVX2 / AVX-512BW, g even: per pair of k, both operands widened to int16 and one `vpmaddwd`
  (pairs of int16 products summed into int32; a byte product fits int16 x int16 -> int32 exactly).
* Anything else: operands widened to int32, multiplied, the g products of a lane added.

A bfloat16 dot (`emit_bf16_dot`: float32 accumulators, uint16 bf16 words, g = 2) is the same loop
over a pair of channels: with AVX512-BF16 one `vdpbf16ps` per vector (pairs of bf16 products summed
into float32 lanes; bf16 x bf16 products are exact in float32; the instruction treats denormal
inputs as zero and flushes denormal results, the only way it differs); elsewhere both words are widened to
float32 (a shift for the low word of each 32-bit pair, a mask for the high one: no shuffles) and
accumulated with two multiply-adds, which the FMA units fuse.

`dot_group(target)` is the group every int8 weight layout uses (4 on every CPU: VNNI consumes it in
one instruction, vpmaddwd in two, the generic path in four lanes); `native_group(target)` is the
group the fastest exact instruction consumes, which templates may re-pack a constant weight to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autorelay.codegen.llvm.values import Val
from autorelay.target import Target
from autorelay.te.nn_int8 import DOT_GROUP  # the one definition: the int8 weight layouts' group

if TYPE_CHECKING:
    from autorelay.codegen.llvm.exprs import ExprEmitter


def dot_group(target: Target | None = None) -> int:
    """The channel group `g` of int8 weight layouts for `target` (the same on every CPU, so one
    quantized model's packed weights serve any host)."""
    return DOT_GROUP


def _vnni(target: Target | None, lanes: int) -> bool:
    """Whether `vpdpbusd` exists for a vector of `lanes` int32 on `target`."""
    if target is None:
        return False
    if lanes == 16:
        return target.has("avx512vnni")
    if lanes in (4, 8):
        return target.has("avxvnni") or (target.has("avx512vnni") and target.has("avx512vl"))
    return False


# The integer multiply-add intrinsics per vector of `lanes` int32, and the features that have them
# (both exist wherever the vector width does: vpmaddwd since SSE2, vpmaddubsw since SSSE3).
_MADD_FEATURES = {16: ("avx512bw",), 8: ("avx2",), 4: ("avx2", "sse4.2")}
_PMADDWD = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd", 4: "llvm.x86.sse2.pmadd.wd"}
_PMADDUBSW = {16: "llvm.x86.avx512.pmaddubs.w.512", 8: "llvm.x86.avx2.pmadd.ub.sw",
              4: "llvm.x86.ssse3.pmadd.ub.sw.128"}


def _madd(target: Target | None, lanes: int, names: dict[int, str]) -> str | None:
    if target is None or not any(target.has(f) for f in _MADD_FEATURES.get(lanes, ())):
        return None
    return names[lanes]


def _pmaddwd(target: Target | None, lanes: int) -> str | None:
    """The `vpmaddwd` intrinsic producing `lanes` int32 on `target`, or None."""
    return _madd(target, lanes, _PMADDWD)


def _pmaddubsw(target: Target | None, lanes: int) -> str | None:
    """The `vpmaddubsw` intrinsic taking `lanes` x 4 bytes on `target`, or None."""
    return _madd(target, lanes, _PMADDUBSW)


def native_group(target: Target | None, lanes: int) -> int:
    """The group the fastest exact instruction for `lanes` int32 consumes: 4 (vpdpbusd), 2
    (vpmaddwd) or 1 (no dot-product instruction: plain widening multiply-adds). A narrow dot takes
    4 with `vpmaddubsw` as well (`narrow_dot_available`)."""
    if _vnni(target, lanes):
        return 4
    return 2 if _pmaddwd(target, lanes) else 1


def narrow_dot_available(target: Target | None, lanes: int) -> bool:
    """Whether a narrow dot (see the module docstring) has a faster path than a plain one here:
    `vpmaddubsw` exists and `vpdpbusd` does not."""
    return not _vnni(target, lanes) and _pmaddubsw(target, lanes) is not None \
        and _pmaddwd(target, lanes) is not None


def dot_kind(target: Target | None, lanes: int, g: int, a_signed: bool, b_signed: bool,
             narrow: bool = False) -> str:
    """Which path `emit_dot` takes: "vnni", "pmaddubsw", "pmaddwd" or "generic"."""
    if g == 4 and _vnni(target, lanes) and a_signed != b_signed:
        return "vnni"
    if narrow and g == 4 and not a_signed and b_signed and narrow_dot_available(target, lanes):
        return "pmaddubsw"
    if g % 2 == 0 and _pmaddwd(target, lanes):
        return "pmaddwd"
    return "generic"


def emit_dot(em: ExprEmitter, target: Target | None, acc: Val, a: Val, a_signed: bool, b: Val,
             b_signed: bool, lanes: int, g: int, narrow: bool = False) -> Val:
    """`acc + dot(a, b)` (see the module docstring): acc <lanes x i32>, a <g x i8>, b <lanes*g x i8>.
    `narrow`: the schedule's promise that `b`'s adjacent pairs sum to at most 128 in magnitude."""
    kind = dot_kind(target, lanes, g, a_signed, b_signed, narrow)
    if kind == "vnni":
        return _vnni_dot(em, acc, a, a_signed, b, lanes)
    if kind == "pmaddubsw":
        return _ubsw_dot(em, target, acc, a, b, lanes)
    if kind == "pmaddwd":
        return _madd_dot(em, target, acc, a, a_signed, b, b_signed, lanes, g)
    return _generic_dot(em, acc, a, a_signed, b, b_signed, lanes, g)


def _splat_group(em: ExprEmitter, a: Val, width: int, lanes: int, elem: str = "i8") -> Val:
    """The group `a` (`width` x `elem`) repeated `lanes` times as one vector (one `vpbroadcastd`)."""
    bits = width * int(elem[1:])
    word = em.op(f"bitcast <{width} x {elem}> {a.ref} to i{bits}", "int32")
    ins = em.op(f"insertelement <{lanes} x i{bits}> poison, i{bits} {word.ref}, i32 0", "int32", lanes)
    spl = em.op(f"shufflevector <{lanes} x i{bits}> {ins.ref}, <{lanes} x i{bits}> poison, "
                f"<{lanes} x i32> zeroinitializer", "int32", lanes)
    return em.op(f"bitcast <{lanes} x i{bits}> {spl.ref} to <{lanes * width} x {elem}>", a.dtype,
                 lanes * width)


def _vnni_dot(em: ExprEmitter, acc: Val, a: Val, a_signed: bool, b: Val, lanes: int) -> Val:
    n = lanes * 4
    name = f"llvm.x86.avx512.vpdpbusd.{lanes * 32}"
    vt, at = f"<{n} x i8>", f"<{lanes} x i32>"
    em.declared.add(f"declare {at} @{name}({at}, {vt}, {vt})")
    if not a_signed:  # unsigned pixel group, signed weights: the instruction's own operand order
        u, s = _splat_group(em, a, 4, lanes), b
    else:
        u, s = b, _splat_group(em, a, 4, lanes)
    return em.op(f"call {at} @{name}({at} {acc.ref}, {vt} {u.ref}, {vt} {s.ref})", "int32", lanes)


def _ubsw_dot(em: ExprEmitter, target: Target | None, acc: Val, a: Val, b: Val, lanes: int) -> Val:
    """Unsigned group `a` (4 bytes, broadcast) x signed per-lane groups `b`: int16 pair sums by
    `vpmaddubsw` (exact under the narrow promise), the two of a lane summed by `vpmaddwd` with ones."""
    ubsw, madd = _pmaddubsw(target, lanes), _pmaddwd(target, lanes)
    n, wt, at = 4 * lanes, f"<{2 * lanes} x i16>", f"<{lanes} x i32>"
    em.declared.add(f"declare {wt} @{ubsw}(<{n} x i8>, <{n} x i8>)")
    em.declared.add(f"declare {at} @{madd}({wt}, {wt})")
    u = _splat_group(em, a, 4, lanes)
    pairs = em.op(f"call {wt} @{ubsw}(<{n} x i8> {u.ref}, <{n} x i8> {b.ref})", "int16", 2 * lanes)
    ones = "<" + ", ".join(["i16 1"] * (2 * lanes)) + ">"
    sums = em.op(f"call {at} @{madd}({wt} {pairs.ref}, {wt} {ones})", "int32", lanes)
    return em.op(f"add {at} {acc.ref}, {sums.ref}", "int32", lanes)


def _take(em: ExprEmitter, v: Val, elem: str, idx: list[int]) -> Val:
    mask = ", ".join(f"i32 {i}" for i in idx)
    t = f"<{v.lanes} x {elem}>"
    return em.op(f"shufflevector {t} {v.ref}, {t} poison, <{len(idx)} x i32> <{mask}>", v.dtype, len(idx))


def _madd_dot(em: ExprEmitter, target: Target | None, acc: Val, a: Val, a_signed: bool, b: Val,
              b_signed: bool, lanes: int, g: int) -> Val:
    name = _pmaddwd(target, lanes)
    wt, at = f"<{2 * lanes} x i16>", f"<{lanes} x i32>"
    em.declared.add(f"declare {at} @{name}({wt}, {wt})")
    out = acc
    for p in range(g // 2):
        ap = _take(em, a, "i8", [2 * p, 2 * p + 1]) if g > 2 else a
        aw = em.op(f"{'sext' if a_signed else 'zext'} <2 x i8> {ap.ref} to <2 x i16>", "int16", 2)
        aw = _splat_group(em, aw, 2, lanes, "i16")
        bp = _take(em, b, "i8", [l * g + 2 * p + j for l in range(lanes) for j in (0, 1)]) if g > 2 else b
        ext = "sext" if b_signed else "zext"
        bw = em.op(f"{ext} <{2 * lanes} x i8> {bp.ref} to {wt}", "int16", 2 * lanes)
        m = em.op(f"call {at} @{name}({wt} {bw.ref}, {wt} {aw.ref})", "int32", lanes)
        out = em.op(f"add {at} {out.ref}, {m.ref}", "int32", lanes)
    return out


def _generic_dot(em: ExprEmitter, acc: Val, a: Val, a_signed: bool, b: Val, b_signed: bool,
                 lanes: int, g: int) -> Val:
    n, at = lanes * g, f"<{lanes} x i32>"
    aw = em.op(f"{'sext' if a_signed else 'zext'} <{g} x i8> {a.ref} to <{g} x i32>", "int32", g)
    pattern = _take(em, aw, "i32", [k for _ in range(lanes) for k in range(g)])
    bw = em.op(f"{'sext' if b_signed else 'zext'} <{n} x i8> {b.ref} to <{n} x i32>", "int32", n)
    prod = em.op(f"mul <{n} x i32> {bw.ref}, {pattern.ref}", "int32", n)
    out = acc
    for k in range(g):
        part = _take(em, prod, "i32", [l * g + k for l in range(lanes)]) if g > 1 else prod
        out = em.op(f"add {at} {out.ref}, {part.ref}", "int32", lanes)
    return out


BF16_GROUP = 2  # bf16 words one float32 lane sums per vdpbf16ps


def bf16_dot_kind(target: Target | None, lanes: int) -> str:
    """Which path `emit_bf16_dot` takes for `lanes` float32 accumulators: "dpbf16ps" or "fma"."""
    if target is None or not target.has("avx512bf16"):
        return "fma"
    if lanes == 16 or (lanes in (4, 8) and target.has("avx512vl")):
        return "dpbf16ps"
    return "fma"


def emit_bf16_dot(em: ExprEmitter, target: Target | None, acc: Val, a: Val, b: Val, lanes: int) -> Val:
    """`acc[l] + a[0] * b[2l] + a[1] * b[2l+1]` in float32: acc <lanes x float>, a <2 x i16> (one
    pair of bf16 words, shared by every lane), b <2*lanes x i16> (each lane's pair contiguous)."""
    n = 2 * lanes
    ft = f"<{lanes} x float>"
    if bf16_dot_kind(target, lanes) == "dpbf16ps":
        # LLVM >= 17 types the operands as bfloat vectors (older releases took <lanes x i32>)
        name, vt = f"llvm.x86.avx512bf16.dpbf16ps.{lanes * 32}", f"<{n} x bfloat>"
        em.declared.add(f"declare {ft} @{name}({ft}, {vt}, {vt})")
        spl = _splat_group(em, a, 2, lanes, "i16")
        av = em.op(f"bitcast <{n} x i16> {spl.ref} to {vt}", "uint16", n)
        bv = em.op(f"bitcast <{n} x i16> {b.ref} to {vt}", "uint16", n)
        return em.op(f"call {ft} @{name}({ft} {acc.ref}, {vt} {av.ref}, {vt} {bv.ref})", "float32", lanes)
    # each lane's pair as one i32 (little-endian: word 0 low, word 1 high); a float32 from a bf16 is
    # its word in the top half, so word 0 is the pair shifted left 16 and word 1 the pair masked
    spl = _splat_group(em, a, 2, lanes, "i16")
    pairs = [em.op(f"bitcast <{n} x i16> {v.ref} to <{lanes} x i32>", "int32", lanes) for v in (spl, b)]
    out = acc
    for op, arg in (("shl", 16), ("and", -65536)):
        av, bv = (_pair_word(em, p, op, arg) for p in pairs)
        prod = em.op(f"fmul contract {ft} {av.ref}, {bv.ref}", "float32", lanes)
        out = em.op(f"fadd contract {ft} {out.ref}, {prod.ref}", "float32", lanes)
    return out


def _pair_word(em: ExprEmitter, pairs: Val, op: str, arg: int) -> Val:
    """One word of each 32-bit pair of bf16 words as float32: `op` is "shl" 16 (word 0) or "and"
    0xFFFF0000 (word 1)."""
    it = f"<{pairs.lanes} x i32>"
    splat = "<" + ", ".join(f"i32 {arg}" for _ in range(pairs.lanes)) + ">"
    bits = em.op(f"{op} {it} {pairs.ref}, {splat}", "int32", pairs.lanes)
    return em.op(f"bitcast {it} {bits.ref} to <{pairs.lanes} x float>", "float32", pairs.lanes)


__all__ = ["BF16_GROUP", "DOT_GROUP", "bf16_dot_kind", "dot_group", "dot_kind", "emit_bf16_dot", "emit_dot",
           "native_group"]
