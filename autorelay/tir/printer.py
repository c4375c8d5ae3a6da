"""Deterministic text of loop IR: for humans, golden tests, and the structural hash of a kernel.

The text names every buffer with its shape, dtype and scope and every loop with its kind, so two
programs print identically exactly when they compile to the same code; hashing the text is the
kernel-cache key.
"""

from __future__ import annotations

import hashlib

from autorelay.te.expr import Bin, Call, Cast, Cmp, Const, Expr, Load, Not, Read, Reduce, Select, Var
from autorelay.tir.nodes import Allocate, Barrier, Buffer, For, If, PrimFunc, Seq, Stmt, Store

_SYM = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "shr": ">>",
    "shl": "<<",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "and": "&&",
    "or": "||",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}


def expr_str(e: Expr) -> str:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        if e.dtype == "int64" or e.dtype == "bool":
            return repr(e.value)
        return f"{e.value!r}{'f' if e.dtype == 'float32' else ':' + e.dtype}"
    if isinstance(e, Bin):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        return f"({expr_str(e.a)} {_SYM[e.op]} {expr_str(e.b)})"
    if isinstance(e, Cmp):
        return f"({expr_str(e.a)} {_SYM[e.op]} {expr_str(e.b)})"
    if isinstance(e, Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.a)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    if isinstance(e, Read):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(f"{a.name}:{a.extent}" for a in e.axes)
        return f"{e.combiner}({expr_str(e.body)}, axis=[{axes}])"
    raise TypeError(f"expr_str: unknown node {type(e).__name__}")


def stmt_lines(s: Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, For):
        kind = "" if s.kind == "serial" else f" {s.kind}"
        return [f"{pad}for{kind} {s.var.name} in 0..{s.extent}:"] + stmt_lines(s.body, indent + 1)
    if isinstance(s, Store):
        return [f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}"]
    if isinstance(s, Seq):
        return [line for t in s.stmts for line in stmt_lines(t, indent)]
    if isinstance(s, Allocate):
        b = s.buffer
        head = f"{pad}alloc {b.name}: {b.dtype}{list(b.shape)} {b.scope}"
        return [head] + stmt_lines(s.body, indent)
    if isinstance(s, If):
        out = [f"{pad}if {expr_str(s.cond)}:"] + stmt_lines(s.then, indent + 1)
        if s.orelse is not None:
            out += [f"{pad}else:"] + stmt_lines(s.orelse, indent + 1)
        return out
    if isinstance(s, Barrier):
        return [f"{pad}barrier"]
    raise TypeError(f"stmt_lines: unknown statement {type(s).__name__}")


def func_str(f: PrimFunc) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}{_pitch(b)}" for b in f.params)
    lines = [f"func {f.name}({params}):"]
    for w in f.workspaces:
        lines.append(f"  workspace {w.name}: {w.dtype}{list(w.shape)}")
    lines += stmt_lines(f.body, 1)
    return "\n".join(lines) + "\n"


def _pitch(b: Buffer) -> str:
    return f" pitch {list(b.pitch)}" if b.pitch is not None else ""


def structural_hash(f: PrimFunc, salt: str = "") -> str:
    """Hash of everything that changes the generated code (the name is excluded)."""
    text = func_str(f).split("\n", 1)
    params = ", ".join(f"{b.dtype}{list(b.shape)}{_pitch(b)}" for b in f.params)
    return hashlib.sha256(f"{salt}|{params}|{text[1]}".encode()).hexdigest()[:32]
