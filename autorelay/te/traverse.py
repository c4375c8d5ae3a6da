"""Generic walks over the scalar expressions of `autorelay.te.expr`: a node's children and its
rebuild from new ones, rewriting (`transform`, `substitute`), and the traversals behind questions
of what an expression contains (`walk` counts every occurrence, `distinct_nodes` visits a shared
subtree once, `free_vars`). Both the compute DSL and the loop IR use them."""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.te.expr import Bin, Call, Cast, Cmp, Const, Expr, Load, Not, Read, Reduce, Select, Var, is_int

# a node's children by its exact type (the node classes are never subclassed): every walk asks,
# and one dict lookup beats a chain of isinstance tests
_CHILDREN = {
    Bin: lambda e: (e.a, e.b),
    Cmp: lambda e: (e.a, e.b),
    Not: lambda e: (e.a,),
    Cast: lambda e: (e.a,),
    Select: lambda e: (e.cond, e.t, e.f),
    Call: lambda e: e.args,
    Read: lambda e: e.indices,
    Reduce: lambda e: (e.body,),
    Load: lambda e: (e.index,),
}


def children(e: Expr) -> tuple[Expr, ...]:
    get = _CHILDREN.get(type(e))
    return get(e) if get is not None else ()


def rebuild(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    """`e` with its children replaced (same order as `children`)."""
    if isinstance(e, Bin):
        return Bin(e.op, kids[0], kids[1], e.dtype)
    if isinstance(e, Cmp):
        return Cmp(e.op, kids[0], kids[1])
    if isinstance(e, Not):
        return Not(kids[0])
    if isinstance(e, Cast):
        return Cast(kids[0], e.dtype)
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2], e.dtype)
    if isinstance(e, Call):
        return Call(e.name, kids, e.dtype)
    if isinstance(e, Read):
        return Read(e.tensor, kids, e.dtype)
    if isinstance(e, Reduce):
        return Reduce(e.combiner, kids[0], e.axes, e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, kids[0], e.dtype)
    return e


def transform(e: Expr, fn: Any) -> Expr:
    """Post-order rewrite: `fn(node_with_rewritten_children)` returns a replacement or None.

    `fn` must be a pure rewrite: a subtree the input shares (the same object under several parents:
    an unrolled Winograd transform's selects, an inlined stage read twice) is rewritten once and
    its result shared, where a tree walk would repeat it for every path that reaches it."""
    memo: dict[int, Expr] = {}

    def go(n: Expr) -> Expr:
        done = memo.get(id(n))
        if done is not None:
            return done
        kids = children(n)
        m = n
        if kids:
            new = tuple(go(k) for k in kids)
            if any(x is not k for x, k in zip(new, kids)):
                m = rebuild(n, new)
        out = fn(m)
        done = memo[id(n)] = m if out is None else out
        return done

    return go(e)


INT_FOLD = {  # integer arithmetic on Python ints (floordiv and mod by 0: the caller's to refuse)
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "shr": lambda a, b: a >> b,
    "bitand": lambda a, b: a & b,
    "bitor": lambda a, b: a | b,
    "bitxor": lambda a, b: a ^ b,
    "min": min,
    "max": max,
}


def wrap_int(value: int, dtype: str) -> int:
    """`value` as a `dtype` integer holds it: two's complement, wrapping as the machine's arithmetic
    does (a folded constant must be what the unfolded code computes, and fit its LLVM type)."""
    bits = np.iinfo(dtype).bits
    value &= (1 << bits) - 1
    return value - (1 << bits) if not dtype.startswith("u") and value >> (bits - 1) else value


_CMP_FOLD = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
             "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _int_value(e: Expr) -> int | bool | None:
    """The value of an integer or comparison expression over constants only (else None)."""
    if isinstance(e, Const):
        return e.value if isinstance(e.value, (int, bool)) else None
    if isinstance(e, Bin) and e.op in INT_FOLD and is_int(e.dtype):
        a, b = _int_value(e.a), _int_value(e.b)
        if a is None or b is None or (e.op in ("floordiv", "mod") and b == 0):
            return None
        return INT_FOLD[e.op](a, b)
    if isinstance(e, Cmp) and is_int(e.a.dtype):
        a, b = _int_value(e.a), _int_value(e.b)
        return None if a is None or b is None else _CMP_FOLD[e.op](a, b)
    return None


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """`e` with variables replaced. A select whose condition becomes a constant is replaced by its
    live branch and the dead one is never copied: an unrolled loop substitutes its index into
    select chains on that index (a Winograd transform's positions), where one branch of each lives."""
    if not mapping:
        return e

    memo: dict[int, Expr] = {}  # by node identity: a subtree shared in the input is visited once

    def go(n: Expr) -> Expr:
        done = memo.get(id(n))
        if done is not None:
            return done
        if isinstance(n, Var):
            out = mapping.get(n, n)
        elif isinstance(n, Select):
            cond = go(n.cond)
            live = _int_value(cond)
            if isinstance(live, bool):
                out = go(n.t if live else n.f)
            else:
                t, f = go(n.t), go(n.f)
                out = n if (cond is n.cond and t is n.t and f is n.f) else Select(cond, t, f, n.dtype)
        else:
            kids = children(n)
            new = tuple(go(k) for k in kids)
            out = rebuild(n, new) if any(x is not k for x, k in zip(new, kids)) else n
        memo[id(n)] = out
        return out

    return go(e)


def walk(e: Expr) -> list[Expr]:
    """All nodes, pre-order."""
    out: list[Expr] = []
    stack = [e]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(children(n)))
    return out


def distinct_nodes(*roots: Expr) -> list[Expr]:
    """Every node of the expressions `roots` once (by identity), pre-order of first visit: what they
    contain, where `walk` repeats a shared subtree for every path that reaches it (use `walk` to
    count). Several roots are walked as one, so a subtree they share is visited once."""
    out: list[Expr] = []
    seen: set[int] = set()
    stack = list(reversed(roots))
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append(n)
        get = _CHILDREN.get(type(n))  # `children`, inlined: this loop runs over every node
        if get is not None:
            stack.extend(reversed(get(n)))
    return out


def reads_var(e: Expr, v: Var, memo: dict[int, tuple[Expr, bool]]) -> bool:
    """Whether `e` reads `v`, remembered per node in `memo` (which holds each node it answers for,
    so no id is reused while it lives): asked of every subexpression of a tree, a walk per question
    is quadratic in its depth, and one `free_vars` set per node more so."""
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out = e is v
    if not out:
        for k in children(e):  # a loop, not any() over a generator: this is the emitter's hottest walk
            if reads_var(k, v, memo):
                out = True
                break
    memo[id(e)] = (e, out)
    return out


def uses_var(e: Expr, v: Var) -> bool:
    """Whether `e` reads `v`: `v in free_vars(e)`, but stopping at the first occurrence and
    building no set (lane analysis asks it of every atom of every index it emits)."""
    return reads_var(e, v, {})


def free_vars(e: Expr) -> set[Var]:
    return {n for n in distinct_nodes(e) if isinstance(n, Var)}
