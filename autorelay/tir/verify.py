"""Loop-IR verifier: catches lowering bugs before they become wrong answers or crashes in JIT code.

Checked: every variable is bound by an enclosing loop, every buffer is a parameter, workspace or
an enclosing allocation, stored values match the buffer dtype, parallel loops only at the top of a
segment, vectorized loops contain no loops, and unguarded accesses provably stay in bounds.
"""

from __future__ import annotations

from autorelay.te.expr import Expr, Load, Var
from autorelay.te.traverse import distinct_nodes, free_vars
from autorelay.tir.nodes import LOOP_KINDS, Allocate, Barrier, Buffer, For, If, PrimFunc, Seq, Stmt, Store
from autorelay.tir.simplify import interval


class VerifyError(Exception):
    pass


def verify(f: PrimFunc) -> None:
    """Raise VerifyError naming the first problem found."""
    bufs = {id(b) for b in f.params + f.workspaces}
    top = f.body.stmts if isinstance(f.body, Seq) else (f.body,)
    for seg in top:
        _check(seg, bufs, {}, guarded=False, top=True, in_vec=False)


def _check_expr(e: Expr, bufs: set[int], bounds: dict[Var, tuple[int, int]], guarded: bool) -> None:
    for v in free_vars(e):
        if v not in bounds:
            raise VerifyError(f"variable {v.name} used outside any loop that binds it")
    for n in distinct_nodes(e):
        if isinstance(n, Load):
            _check_access(n.buffer, n.index, bufs, bounds, guarded, "load")


def _check_access(b: Buffer, index: Expr, bufs: set[int], bounds, guarded: bool, what: str) -> None:
    if id(b) not in bufs:
        raise VerifyError(
            f"{what} of buffer {b.name} which is not a parameter, workspace or allocation in scope"
        )
    if not guarded:
        iv = interval(index, bounds)
        if iv is not None and (iv[0] < 0 or iv[1] >= b.size):
            raise VerifyError(f"{what} of {b.name} (size {b.size}) may access [{iv[0]}, {iv[1]}]")


def _check(s: Stmt, bufs: set[int], bounds: dict, guarded: bool, top: bool, in_vec: bool) -> None:
    if isinstance(s, For):
        if s.kind not in LOOP_KINDS:
            raise VerifyError(f"loop {s.var.name}: unknown kind {s.kind!r}")
        if s.kind == "parallel" and not top:
            raise VerifyError(f"parallel loop {s.var.name} must be the outermost loop of a segment")
        if in_vec:
            raise VerifyError(f"loop {s.var.name} is nested inside a vectorized loop")
        if s.extent < 1:
            raise VerifyError(f"loop {s.var.name} has extent {s.extent}")
        inner = dict(bounds)
        inner[s.var] = (0, s.extent - 1)
        _check(s.body, bufs, inner, guarded, False, in_vec or s.kind == "vectorized")
    elif isinstance(s, Store):
        if s.value.dtype != s.buffer.dtype:
            raise VerifyError(f"store to {s.buffer.name} ({s.buffer.dtype}) of a {s.value.dtype} value")
        _check_access(s.buffer, s.index, bufs, bounds, guarded, "store")
        _check_expr(s.index, bufs, bounds, guarded)
        _check_expr(s.value, bufs, bounds, guarded)
    elif isinstance(s, Seq):
        for t in s.stmts:
            _check(t, bufs, bounds, guarded, top and isinstance(t, Allocate), in_vec)
    elif isinstance(s, Allocate):
        _check(s.body, bufs | {id(s.buffer)}, bounds, guarded, top, in_vec)
    elif isinstance(s, If):
        _check_expr(s.cond, bufs, bounds, guarded)
        _check(s.then, bufs, bounds, True, False, in_vec)
        if s.orelse is not None:
            _check(s.orelse, bufs, bounds, True, False, in_vec)
    elif not isinstance(s, Barrier):
        raise VerifyError(f"unknown statement {type(s).__name__}")
