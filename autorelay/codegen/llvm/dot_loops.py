"""Tensorized dot loops: a loop marked `Tensorize(stage, axis, "dot")` around a vector loop whose
body is an integer (or bf16) multiply-accumulate becomes one dot-product instruction per vector.

`DotLoopEmitter` adds this to the segment emitter (`emit.SegmentEmitter` derives from it): it finds
the pattern (`_dot_pattern`), builds the two operands as vectors and hands them to
`codegen.llvm.dot`, which picks the instruction from the target's features. A body that is not the
pattern is emitted as the serial loop it means.
"""

from __future__ import annotations

from autorelay.codegen.llvm.dot import BF16_GROUP, emit_bf16_dot, emit_dot
from autorelay.codegen.llvm.exprs import ExprEmitter
from autorelay.codegen.llvm.lanes import at_lane
from autorelay.codegen.llvm.lanes import lane_coef as _lane_coef
from autorelay.codegen.llvm.values import Val, mem_type
from autorelay.target import Target
from autorelay.te.expr import Bin, Call, Cast, Const, Expr, Load, Select, Var
from autorelay.te.traverse import substitute, uses_var
from autorelay.tir.linear_form import linear
from autorelay.tir.nodes import For, Store
from autorelay.tir.simplify import simplify


class DotLoopEmitter(ExprEmitter):
    """The dot-loop part of the segment emitter; the segment emitter supplies `_loop` (a serial
    loop), `target`, `bounds` and the vector state."""

    target: Target | None

    def _dot_loop(self, s: For) -> None:
        """A dot loop around a vector loop whose body is `acc[i] += int32(a) * int32(b)` becomes
        one dot-product instruction per vector (`dot.emit_dot`); any other body (a guard, other
        stores) is emitted as the serial loop it means."""
        m = _dot_pattern(s)
        # a bf16 dot sums pairs: any other extent is a plain loop too
        if m is None or (isinstance(m[2], Call) and s.extent != BF16_GROUP):
            self._loop(For(s.var, s.extent, s.body, "serial"))  # type: ignore[attr-defined]
            return
        vec, store, a, b = m
        k, v, g, lanes = s.var, vec.var, s.extent, vec.extent
        bf16 = isinstance(a, Call)
        u = Var(f"{v.name}.{k.name}.dot")
        self.bounds.update({k: (0, g - 1), v: (0, lanes - 1), u: (0, lanes * g - 1)})
        try:
            self.vector_var, self.lanes = k, g
            av = self._group(_operand(a))
            gc = Const(g, "int64")
            wide = {v: Bin("floordiv", u, gc, "int64"), k: Bin("mod", u, gc, "int64")}
            self.vector_var, self.lanes = u, lanes * g
            bv = self._group(simplify(substitute(_operand(b), wide), self.bounds))
            self.vector_var, self.lanes = v, lanes
            acc = self.vexpr(Load(store.buffer, store.index, store.buffer.dtype))
            if bf16:
                out = emit_bf16_dot(self, self.target, acc, av, bv, lanes)
            else:
                signed = (_operand(a).dtype == "int8", _operand(b).dtype == "int8")
                out = emit_dot(self, self.target, acc, av, signed[0], bv, signed[1], lanes, g,
                               narrow=s.kind == "dot_narrow")
            p = self.gep(store.buffer, self.scalar(at_lane(store.index, v, 0)).ref)
            vt = f"<{lanes} x {mem_type(store.buffer.dtype)}>"
            self.lines.append(f"  store {vt} {out.ref}, ptr {p}, align 4")
        finally:
            self.vector_var, self.lanes = None, 0
            for x in (k, v, u):
                self.bounds.pop(x, None)

    def _group(self, e: Expr) -> Val:
        """A dot operand as one vector over the current vector variable: a select whose condition
        does not depend on it (an inlined padding border) selects between whole vectors, so the
        loaded bytes stay one contiguous load (the clamped index keeps it in bounds)."""
        v = self.vector_var
        if isinstance(e, Select) and not uses_var(e.cond, v):
            c = self.scalar(e.cond)
            t, f = self._group(e.t), self._group(e.f)
            ty = self.ty(e.dtype, self.lanes)
            return self.op(f"select i1 {c.ref}, {ty} {t.ref}, {ty} {f.ref}", e.dtype, self.lanes)
        return self.broadcast(self.vexpr(e))


def _dot_pattern(s: For) -> tuple[For, Store, Cast | Call, Cast | Call] | None:
    """(vector loop, store, lane-invariant operand, per-lane operand) of a dot loop whose body is
    `for v (vectorized): acc[i] = acc[i] + int32(a) * int32(b)` (a, b bytes) or, in float32,
    `acc[i] + bf16_to_f32(a) * bf16_to_f32(b)` (a, b bf16 words), with `i` contiguous in the lane
    and free of the dot variable, `a` free of the lane; None for any other body."""
    vec = s.body
    if not (isinstance(vec, For) and vec.kind == "vectorized" and isinstance(vec.body, Store)):
        return None
    st, k, v = vec.body, s.var, vec.var
    val = st.value
    if st.buffer.dtype not in ("int32", "float32") or not (isinstance(val, Bin) and val.op == "add"):
        return None
    if st.buffer.dtype == "float32":  # float sums are not reassociated: acc + prod in either order
        def is_acc(t: Expr) -> bool:
            return isinstance(t, Load) and t.buffer is st.buffer and t.index == st.index
        if not (is_acc(val.a) or is_acc(val.b)) or (is_acc(val.a) and is_acc(val.b)):
            return None
        prod = val.b if is_acc(val.a) else val.a
        kind = (Call, "float32", ("uint16",))
    else:
        terms, const = linear(val)  # the simplifier may have put the summands in either order
        accs = [t for t in terms if isinstance(t, Load) and t.buffer is st.buffer and t.index == st.index]
        if const != 0 or len(terms) != 2 or len(accs) != 1 or set(terms.values()) != {1}:
            return None
        prod = next(t for t in terms if t is not accs[0])
        kind = (Cast, "int32", ("int8", "uint8"))
    if not (isinstance(prod, Bin) and prod.op == "mul" and prod.dtype == kind[1]):
        return None
    ops = [prod.a, prod.b]
    if not all(isinstance(o, kind[0]) and _operand(o).dtype in kind[2] for o in ops):
        return None
    if kind[0] is Call and not all(o.name == "bf16_to_f32" for o in ops):  # type: ignore[union-attr]
        return None
    if uses_var(st.index, k) or _lane_coef(st.index, v) != 1:
        return None
    inv = [o for o in ops if not uses_var(o, v)]
    if not inv:
        return None
    a = inv[0]
    b = ops[1] if a is ops[0] else ops[0]
    return vec, st, a, b  # type: ignore[return-value]


def _operand(o: Expr) -> Expr:
    """The narrow value a dot operand widens: a Cast's or a bf16 conversion's argument."""
    if isinstance(o, Cast):
        return o.a
    return o.args[0] if isinstance(o, Call) else o
