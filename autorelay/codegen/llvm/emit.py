"""Loop IR -> LLVM IR text, one function per segment (top-level statement) of a PrimFunc.

Each segment is `void @<name>_s<k>(ptr noalias %buffers..., i64 %begin, i64 %end)`; if its outer
loop is parallel the function runs iterations [begin, end) of it, so the runtime can hand chunks
to threads; each parallel segment also gets a driver `@<name>_s<k>_par` that claims chunks of the
loop for one thread of a team (see `parallel`). Vectorized loops are emitted as
explicit vector instructions (contiguous accesses become vector loads/stores, invariant ones
scalars that are broadcast, anything else lane by lane);
a guard that depends on the vector lane is tested at the first and last lane (linear guards are
monotone) to choose between the vector body and a scalar fallback. Unrolled loops are replicated
with the variable replaced by each constant and re-simplified (`loop_shapes.expand_unrolled`), so
register-tile accumulators end up at constant offsets of an entry-block alloca that SROA turns
into vector registers. Tensorized
dot loops become dot-product instructions (`dot_loops.DotLoopEmitter`, which this emitter extends).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from autorelay.codegen.llvm.dot_loops import DotLoopEmitter
from autorelay.codegen.llvm.lanes import at_lane, for_all
from autorelay.codegen.llvm.lanes import lane_coef as _lane_coef
from autorelay.codegen.llvm.loop_shapes import (
    conjunction,
    drop_conds,
    expand_unrolled,
    guard_conds,
    monotone,
    vectorizable,
)
from autorelay.codegen.llvm.parallel import job_thunk, parallel_driver, serial_thunk
from autorelay.codegen.llvm.values import Val, mem_align, mem_bytes, mem_type
from autorelay.errors import ScheduleError
from autorelay.target import Target
from autorelay.te.expr import Bin, Const, Expr, Load, Var
from autorelay.te.traverse import free_vars, uses_var
from autorelay.tir.nodes import DOT_KINDS, Allocate, Buffer, For, If, PrimFunc, Seq, Stmt, Store, walk_stmts
from autorelay.tir.simplify import simplify, simplify_stmt


class SegmentEmitter(DotLoopEmitter):
    def __init__(self, fname: str, buffers: list[Buffer], stmt: Stmt, target: Target | None = None):
        super().__init__()
        self.target = target  # what tensorized loops and conversions pick their instructions from
        self.fname = fname
        self.buffers = buffers
        self.stmt = stmt
        self.stored = {id(t.buffer) for t in walk_stmts(stmt) if isinstance(t, Store)}
        for i, b in enumerate(buffers):
            self.ptr[id(b)] = f"%b{i}"
        self.bounds: dict[Var, tuple[int, int]] = {}
        self.allocas: list[str] = []
        self.no_unswitch: set[Expr] = set()

    def emit(self) -> str:
        self.block = "entry"
        s = expand_unrolled(self.stmt, {})
        if isinstance(s, For) and s.kind == "parallel":
            self._loop(s, start="%begin", stop="%end")
        else:
            self.stmt_(s)
        self.lines.append("  ret void")
        args = ", ".join(f"ptr noalias %b{i}" for i in range(len(self.buffers)))
        head = f"define void @{self.fname}({args}, i64 %begin, i64 %end) #0 {{\nentry:"
        return "\n".join([head, *self.allocas, *self.lines, "}"])

    # ---- statements ----------------------------------------------------------------------
    def stmt_(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for t in s.stmts:
                self.stmt_(t)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Allocate):
            b = s.buffer
            name = f"%a{len(self.allocas)}"
            self.allocas.append(f"  {name} = alloca [{b.size} x {mem_type(b.dtype)}], align 64")
            self.ptr[id(b)] = name
            self.stmt_(s.body)
        elif isinstance(s, If):
            self._if(s)
        elif isinstance(s, For):
            if s.kind == "unrolled":
                self._unroll(s)
            elif s.kind == "vectorized" and self.vector_var is None:
                self._vector_loop(s)
            elif s.kind in DOT_KINDS and self.vector_var is None:
                self._dot_loop(s)
            elif s.kind == "serial" and s.extent > 1 and self._unswitch(s):
                pass
            else:
                self._loop(s)
        else:
            raise TypeError(f"codegen: unknown statement {type(s).__name__}")

    def _unroll(self, s: For) -> None:
        for c in range(s.extent):
            body = simplify_stmt(s.body, self.bounds, {s.var: Const(c, "int64")})
            if body is not None:
                self.stmt_(body)

    def _unswitch(self, s: For) -> bool:
        """Guards inside `s` that no loop in it changes are tested once, outside: the common case
        runs a guard-free copy of the loop (a ragged last tile takes the guarded copy)."""
        bound = {t.var for t in walk_stmts(s) if isinstance(t, For)}
        conds = [c for c in guard_conds(s.body) if not free_vars(c) & bound and c not in self.no_unswitch]
        conds = list(dict.fromkeys(conds))
        if not conds:
            return False
        ok = self.scalar(conjunction(conds))
        self._fast_or_guarded(ok.ref, ("fast", "guarded", "unsw"),
                              lambda: self.stmt_(drop_conds(s, set(conds))),
                              lambda: self._without_unswitching(conds, lambda: self._loop(s)))
        return True

    def _fast_or_guarded(self, cond: str, names: tuple[str, str, str], fast: Callable[[], None],
                         guarded: Callable[[], None]) -> None:
        """`br cond` into a block emitted by `fast` (the copy that knows its guards hold) or one
        emitted by `guarded`, both joining after; `names` label the three blocks."""
        fast_b, slow_b, done = (self.new_block(n) for n in names)
        self.lines.append(f"  br i1 {cond}, label %{fast_b}, label %{slow_b}")
        for block, emit in ((fast_b, fast), (slow_b, guarded)):
            self.lines.append(f"{block}:")
            self.block = block
            emit()
            self.lines.append(f"  br label %{done}")
        self.lines.append(f"{done}:")
        self.block = done

    def _without_unswitching(self, conds: Iterable[Expr], emit: Callable[[], None]) -> None:
        """Run `emit` with `conds` barred from being hoisted again (the guarded copy keeps them)."""
        added = set(conds)
        self.no_unswitch |= added
        emit()
        self.no_unswitch -= added

    def _hoist_guards(self, body: Stmt) -> bool:
        """Guards that depend on loops inside `body` (a ragged tile's bound) are tested once per
        entry of `body`, at their worst corner: when it holds, a guard-free copy runs, so the
        register tile of every full tile has no branch; the ragged tile takes the guarded copy.
        A guard whose corner can fail for every outer iteration is left to the loops inside, and a
        lone vector loop tests its own lane guards (`_vector_loop`)."""
        if isinstance(body, For) and body.kind == "vectorized":
            return False
        extents = {t.var: t.extent for t in walk_stmts(body) if isinstance(t, For)}
        hoisted: dict[Expr, Expr] = {}
        for c in dict.fromkeys(guard_conds(body)):
            if c in self.no_unswitch or not free_vars(c) & extents.keys():
                continue
            fa = for_all(c, {v: extents[v] for v in free_vars(c) & extents.keys()})
            if fa is not None and simplify(fa, self.bounds) != Const(False, "bool"):
                hoisted[c] = fa
        if not hoisted:
            return False
        ok = simplify(conjunction(list(hoisted.values())), self.bounds)
        fast_body = drop_conds(body, set(hoisted))
        if ok == Const(True, "bool"):
            self.stmt_(fast_body)
            return True
        c = self.scalar(ok)
        self._fast_or_guarded(c.ref, ("full", "ragged", "fdone"), lambda: self.stmt_(fast_body),
                              lambda: self._without_unswitching(hoisted, lambda: self.stmt_(body)))
        return True

    def _loop(self, s: For, start: str = "0", stop: str | None = None) -> None:
        pre = self.block
        hdr, body, exit_ = self.new_block("hdr"), self.new_block("body"), self.new_block("exit")
        self.lines.append(f"  br label %{hdr}")
        self.lines.append(f"{hdr}:")
        iv = self.tmp()
        nxt = self.tmp()
        latch_slot = len(self.lines)
        self.lines.append("")  # phi filled in once the latch block is known
        cond = self.tmp()
        self.lines.append(f"  {cond} = icmp slt i64 {iv}, {stop or s.extent}")
        self.lines.append(f"  br i1 {cond}, label %{body}, label %{exit_}")
        self.lines.append(f"{body}:")
        self.block = body
        self.env[s.var] = Val(iv, "int64")
        old = self.bounds.get(s.var)
        self.bounds[s.var] = (0, s.extent - 1)
        if not self._hoist_guards(s.body):
            self.stmt_(s.body)
        if old is None:
            self.bounds.pop(s.var, None)
        latch = self.block
        self.lines.append(f"  {nxt} = add nuw nsw i64 {iv}, 1")
        self.lines.append(f"  br label %{hdr}, !llvm.loop !0" if s.kind == "serial" else f"  br label %{hdr}")
        self.lines[latch_slot] = f"  {iv} = phi i64 [{start}, %{pre}], [{nxt}, %{latch}]"
        self.lines.append(f"{exit_}:")
        self.block = exit_
        del self.env[s.var]

    def _if(self, s: If) -> None:
        c = self.scalar(s.cond)
        then, other, done = self.new_block("then"), self.new_block("else"), self.new_block("endif")
        self.lines.append(f"  br i1 {c.ref}, label %{then}, label %{other if s.orelse else done}")
        self.lines.append(f"{then}:")
        self.block = then
        self.stmt_(s.then)
        self.lines.append(f"  br label %{done}")
        if s.orelse is not None:
            self.lines.append(f"{other}:")
            self.block = other
            self.stmt_(s.orelse)
            self.lines.append(f"  br label %{done}")
        self.lines.append(f"{done}:")
        self.block = done

    def store(self, s: Store) -> None:
        """Store in the buffer's memory type (a bool register value is widened to a 0/1 byte)."""
        v = self.vector_var
        ty, align = mem_type(s.buffer.dtype), mem_align(s.buffer.dtype)
        if v is None:
            update = reduction_update(s)
            val = self.to_memory(self._accumulate(*update) if update else self.scalar(s.value))
            p = self.gep(s.buffer, self.scalar(s.index).ref)
            self.lines.append(f"  store {ty} {val.ref}, ptr {p}, align {align}")
            return
        val = self.vexpr(s.value)
        coef = _lane_coef(s.index, v)
        if coef == 1:
            base = self.scalar(at_lane(s.index, v, 0))
            p = self.gep(s.buffer, base.ref)
            val = self.to_memory(self.broadcast(val))
            self.lines.append(f"  store <{self.lanes} x {ty}> {val.ref}, ptr {p}, align {align}")
            return
        if coef == 0 and val.lanes == 0:
            val = self.to_memory(val)
            p = self.gep(s.buffer, self.scalar(s.index).ref)
            self.lines.append(f"  store {ty} {val.ref}, ptr {p}, align {align}")
            return
        val = self.to_memory(self.broadcast(val))
        for lane in range(self.lanes):
            x = self.tmp()
            self.lines.append(f"  {x} = extractelement <{self.lanes} x {ty}> {val.ref}, i32 {lane}")
            p = self.gep(s.buffer, self.scalar(at_lane(s.index, v, lane)).ref)
            self.lines.append(f"  store {ty} {x}, ptr {p}, align {align}")

    def _accumulate(self, op: str, acc: Expr, value: Expr) -> Val:
        """`acc ⊕ value` of a scalar reduction, marked reassociable so that LLVM's loop vectorizer
        may keep partial results in vector lanes (a row statistic such as softmax's sum of
        exponentials, a mean over the last axis). The same kernel still gives the same bits on every
        run; they may differ from a strictly sequential sum by float rounding."""
        a, b = self.scalar(acc), self.scalar(value)
        t = self.ty(a.dtype, 0)
        if op in ("add", "mul"):
            return self.op(f"f{op} reassoc contract {t} {a.ref}, {b.ref}", a.dtype)
        return self.intrinsic({"max": "maximum", "min": "minimum"}[op], [a, b], a.dtype, 0)

    # ---- vectorized loops ----------------------------------------------------------------
    def _vector_loop(self, s: For) -> None:
        if not vectorizable(s):
            self._loop(s)
            return
        lane_conds = [c for c in guard_conds(s.body) if uses_var(c, s.var)]
        if lane_conds and not all(monotone(c, s.var) for c in lane_conds):
            self._loop(s)
            return
        if not lane_conds:
            self._vector_body(s, s.body)
            return
        checks = [at_lane(c, s.var, lane) for c in lane_conds for lane in (0, s.extent - 1)]
        ok = self.scalar(simplify(conjunction(checks), self.bounds))
        self._fast_or_guarded(ok.ref, ("vec", "tail", "vdone"),
                              lambda: self._vector_body(s, drop_conds(s.body, set(lane_conds))),
                              lambda: self._loop(For(s.var, s.extent, s.body, "serial")))

    def _vector_body(self, s: For, body: Stmt) -> None:
        self.vector_var, self.lanes = s.var, s.extent
        self.bounds[s.var] = (0, s.extent - 1)
        try:
            self.stmt_(body)
        finally:
            self.vector_var, self.lanes = None, 0
            self.bounds.pop(s.var, None)


def segments(f: PrimFunc) -> list[Stmt]:
    return list(f.body.stmts) if isinstance(f.body, Seq) else [f.body]


def segment_label(seg: Stmt) -> str:
    """`_<stage>` for a segment that is a loop nest (the stage its outer loop computes, e.g.
    `_conv2d_nchwc_pad`), so a profile of a kernel's segments says which loop nest each one is."""
    while isinstance(seg, Allocate):
        seg = seg.body
    if not isinstance(seg, For):
        return ""
    stage = re.sub(r"[^A-Za-z0-9_]", "_", seg.var.name.split(".")[0])[:40]
    return f"_{stage}" if stage else ""


def check_local_bytes(seg: Stmt, name: str, limit: int) -> None:
    """Refuse a segment whose local buffers exceed `limit` bytes (`Target.local_bytes`) as a
    schedule error the tuner records, instead of crashing the process when its frame is entered."""
    local = [s.buffer for s in walk_stmts(seg) if isinstance(s, Allocate)]
    total = sum(b.size * mem_bytes(b.dtype) for b in local)
    if total > limit:
        big = max(local, key=lambda b: b.size * mem_bytes(b.dtype))
        raise ScheduleError(
            f"{name}: {total} bytes of local buffers (the largest {big.name}{list(big.shape)}) exceed the "
            f"target's {limit}-byte budget for them; compute a smaller region at once")


def emit_module(f: PrimFunc, target: Target, symbol: str) -> tuple[str, list[tuple[str, int]]]:
    """LLVM IR text for `f`, and per segment (function name, parallel extent or 0)."""
    buffers = list(f.params) + list(f.workspaces)
    funcs, info = [], []
    declared: set[str] = set()
    for k, seg in enumerate(segments(f)):
        name = f"{symbol}_s{k}{segment_label(seg)}"
        check_local_bytes(seg, name, target.local_bytes)
        em = SegmentEmitter(name, buffers, seg, target)
        funcs.append(em.emit())
        declared |= em.declared
        par = seg.extent if isinstance(seg, For) and seg.kind == "parallel" else 0
        if par:
            funcs += [parallel_driver(name, len(buffers)), job_thunk(name, len(buffers))]
        else:
            funcs.append(serial_thunk(name, len(buffers)))
        info.append((name, par))
    width = target.vector_bits
    attrs = (
        f'attributes #0 = {{ nounwind "target-cpu"="{target.cpu}" "target-features"="{target.features}" '
        f'"prefer-vector-width"="{width}" "min-legal-vector-width"="{width}" "frame-pointer"="none" }}'
    )
    decls = sorted(declared)
    meta = '!0 = distinct !{!0, !1}\n!1 = !{!"llvm.loop.mustprogress"}'
    if info:  # the drivers' and thunks' calls of their segment
        attrs += "\n\nattributes #1 = { noinline }"
    text = "\n\n".join([*decls, *funcs, attrs, meta]) + "\n"
    return text, info


def reduction_update(s: Store) -> tuple[str, Expr, Expr] | None:
    """(combiner, accumulator load, value) when `s` is a float reduction update
    `buf[i] = buf[i] ⊕ value` (as `schedule.lower` writes them), else None."""
    e = s.value
    float_combine = isinstance(e, Bin) and e.op in ("add", "mul", "max", "min")
    if not (float_combine and e.dtype in ("float32", "float64")):
        return None
    for acc, value in ((e.a, e.b), (e.b, e.a)):
        if isinstance(acc, Load) and acc.buffer is s.buffer and acc.index == s.index:
            return e.op, acc, value
    return None
