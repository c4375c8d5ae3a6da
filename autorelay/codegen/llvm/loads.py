"""Memory reads for the LLVM backend's expression emitter: buffer addresses and vector loads.

In a vectorized loop a load whose index steps by one element per lane is one vector load (by two,
a strided convolution's, two loads and a shuffle); lanes that read fixed offsets within one
vector's span (a packed grouped convolution's) load that window once and shuffle it; an index
through a clamp (inlined zero padding) is checked at run time and takes the vector path where the
first and last lanes are in bounds; anything else is gathered lane by lane. Bools are bytes in
memory (NumPy's layout) and `i1` in registers: `_from_memory` and `to_memory` convert.
"""

from __future__ import annotations

from autorelay.codegen.llvm.instructions import InstructionWriter
from autorelay.codegen.llvm.lanes import all_of_conds as _all
from autorelay.codegen.llvm.lanes import clamp_of as _clamp
from autorelay.codegen.llvm.lanes import lane_offsets
from autorelay.codegen.llvm.lanes import replace_atoms as _replace_atoms
from autorelay.codegen.llvm.values import Val, mem_align, mem_type
from autorelay.te.expr import Bin, Cmp, Const, Expr, Load, Var
from autorelay.tir.linear_form import Forms, from_linear
from autorelay.tir.nodes import Buffer
from autorelay.tir.simplify import simplify

__all__ = ["LoadEmitter"]

_MANGLED = {"float": "f32", "double": "f64", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64"}


class LoadEmitter(InstructionWriter):
    """The loads of `ExprEmitter`, which provides the lane context (`vector_var`, `lanes`), the
    buffers' pointers (`ptr`), `scalar` and `reads`."""

    forms: Forms
    ptr: dict[int, str]
    vector_var: Var | None
    lanes: int
    declared: set[str]

    def scalar(self, e: Expr) -> Val:
        raise NotImplementedError

    def reads(self, e: Expr, v: Var) -> bool:
        raise NotImplementedError

    def gep(self, buf: Buffer, idx: str) -> str:
        return self.op(
            f"getelementptr inbounds {mem_type(buf.dtype)}, ptr {self.ptr[id(buf)]}, i64 {idx}", "ptr"
        ).ref

    def _vload(self, e: Load) -> Val:
        """Vector load: contiguous, stride 2, or lane by lane; an index through a clamp
        `max(min(a + lane, hi), lo)` (inlined padding) takes the contiguous path when the
        first and last lanes are inside the clamp, checked at run time."""
        v = self.vector_var
        assert v is not None
        atoms = self.forms.linear(e.index)[0]
        clamps = [a for a in atoms if a is not v and self.reads(a, v) and _clamp(a, v)]
        if not clamps:
            return self._direct_load(e)
        checks = []
        plain = {}
        for a in clamps:
            inner, lo, hi = _clamp(a, v)  # type: ignore[misc]
            first = simplify(inner, mapping={v: Const(0, "int64")})
            last = simplify(inner, mapping={v: Const(self.lanes - 1, "int64")})
            checks += [Cmp("ge", first, lo), Cmp("le", last, hi)]
            plain[a] = inner
        ok = self.scalar(_all(checks))
        fast, slow, done = self.new_block("cin"), self.new_block("cedge"), self.new_block("cdone")
        self.lines.append(f"  br i1 {ok.ref}, label %{fast}, label %{slow}")
        self.lines.append(f"{fast}:")
        self.block = fast
        unclamped = Load(e.buffer, _replace_atoms(e.index, plain), e.dtype)
        fv = self._direct_load(unclamped)
        fast_end = self.block
        self.lines.append(f"  br label %{done}")
        self.lines.append(f"{slow}:")
        self.block = slow
        sv = self._per_lane(e)
        slow_end = self.block
        self.lines.append(f"  br label %{done}")
        self.lines.append(f"{done}:")
        self.block = done
        t = self.ty(e.dtype, self.lanes)
        return self.op(f"phi {t} [{fv.ref}, %{fast_end}], [{sv.ref}, %{slow_end}]", e.dtype, self.lanes)

    def _direct_load(self, e: Load) -> Val:
        v = self.vector_var
        assert v is not None
        terms, c = self.forms.linear(e.index)
        coef = terms.get(v, 0)
        if coef in (1, 2) and not any(self.reads(a, v) for a in terms if a is not v):
            # lane 0's index: the form without its lane term (no other atom reads the lane)
            base = self.scalar(from_linear({a: k for a, k in terms.items() if a is not v}, c, e.index.dtype))
            p = self.gep(e.buffer, base.ref)
            w, vt = self.lanes, f"<{self.lanes} x {mem_type(e.dtype)}>"
            align = mem_align(e.dtype)
            first = self.load_op(e.buffer, f"load {vt}, ptr {p}, align {align}", e.dtype, w)
            if coef == 1:
                return self._from_memory(first)
            # stride 2 (a strided convolution): two in-bounds vector loads covering exactly the
            # span the lanes touch (the second ends at the last lane), keeping even elements
            p2 = self.op(f"getelementptr inbounds {mem_type(e.dtype)}, ptr {p}, i64 {w - 1}", "ptr").ref
            second = self.load_op(e.buffer, f"load {vt}, ptr {p2}, align {align}", e.dtype, w)
            mask = ", ".join(f"i32 {2 * k if 2 * k < w else w + 2 * k - (w - 1)}" for k in range(w))
            return self._from_memory(self.op(
                f"shufflevector {vt} {first.ref}, {vt} {second.ref}, <{w} x i32> <{mask}>", e.dtype, w
            ))
        return self._window_load(e) or self._per_lane(e)

    def _window_load(self, e: Load) -> Val | None:
        """A load whose lanes read fixed offsets within a window of at most `lanes` elements (a
        packed grouped convolution's lanes each reading lane rc of their group) as one vector load
        of the window and a constant shuffle. A window shorter than the vector is loaded masked,
        so no element outside the lanes' reads is touched; None for any other load."""
        found = lane_offsets(e.index, self.vector_var, self.lanes)  # type: ignore[arg-type]
        if found is None or mem_type(e.dtype) not in _MANGLED:
            return None
        first, offsets = found
        lo, w = min(offsets), self.lanes
        span = max(offsets) - lo + 1
        if span > w:
            return None
        p = self.gep(e.buffer, self.scalar(simplify(Bin("add", first, Const(lo, "int64"), "int64"))).ref)
        vt, align = f"<{w} x {mem_type(e.dtype)}>", mem_align(e.dtype)
        if span == w:
            window = self.load_op(e.buffer, f"load {vt}, ptr {p}, align {align}", e.dtype, w)
        else:
            fn = f"@llvm.masked.load.v{w}{_MANGLED[mem_type(e.dtype)]}.p0"
            self.declared.add(f"declare {vt} {fn}(ptr, i32, <{w} x i1>, {vt})")
            mask = ", ".join(f"i1 {'true' if k < span else 'false'}" for k in range(w))
            window = self.load_op(e.buffer, f"call {vt} {fn}(ptr {p}, i32 {align}, <{w} x i1> <{mask}>, "
                                  f"{vt} poison)", e.dtype, w)
        order = ", ".join(f"i32 {o - lo}" for o in offsets)
        return self._from_memory(self.op(
            f"shufflevector {vt} {window.ref}, {vt} poison, <{w} x i32> <{order}>", e.dtype, w))

    def _from_memory(self, v: Val) -> Val:
        """A value just loaded in its memory type, as a register value (bool bytes -> i1)."""
        if v.dtype != "bool":
            return v
        t = f"<{v.lanes} x i8>" if v.lanes else "i8"
        zero = "zeroinitializer" if v.lanes else "0"
        return self.op(f"icmp ne {t} {v.ref}, {zero}", "bool", v.lanes)

    def to_memory(self, v: Val) -> Val:
        """A register value in its memory type, ready to store (i1 -> a 0/1 byte)."""
        if v.dtype != "bool":
            return v
        byte = f"<{v.lanes} x i8>" if v.lanes else "i8"
        return self.op(f"zext {self.ty('bool', v.lanes)} {v.ref} to {byte}", "bool", v.lanes)

    def _per_lane(self, e: Expr) -> Val:
        v = self.vector_var
        assert v is not None
        vec = "poison"
        t = self.ty(e.dtype, 0)
        for lane in range(self.lanes):
            x = self.scalar(simplify(e, mapping={v: Const(lane, "int64")}))
            vec = self.op(
                f"insertelement <{self.lanes} x {t}> {vec}, {t} {x.ref}, i32 {lane}", e.dtype, self.lanes
            ).ref
        return Val(vec, e.dtype, self.lanes)
