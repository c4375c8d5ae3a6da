"""Lane analysis for vectorized loops: how an index depends on the lane variable."""

from __future__ import annotations

from autorelay.te.expr import Bin, Cmp, Const, Expr, Var
from autorelay.te.traverse import uses_var
from autorelay.tir.linear_form import linear
from autorelay.tir.simplify import simplify


def lane_coef(e: Expr, v: Var) -> int | None:
    """Coefficient of `v` in integer expression `e` if `v` appears only linearly, else None."""
    terms, _ = linear(e)
    coef = 0
    for atom, k in terms.items():
        if atom is v:
            coef = k
        elif uses_var(atom, v):
            return None
    return coef


def clamp_of(a: Expr, v: Var) -> tuple[Expr, Expr, Expr] | None:
    """(inner, lo, hi) if `a` is max(min(inner, hi), lo) or min(max(inner, lo), hi) with `inner`
    having lane coefficient 1 and constant-free-of-lane bounds."""
    if not isinstance(a, Bin) or a.op not in ("min", "max"):
        return None
    outer_op, inner_op = a.op, "min" if a.op == "max" else "max"
    for x, bound in ((a.a, a.b), (a.b, a.a)):
        if isinstance(x, Bin) and x.op == inner_op and not uses_var(bound, v):
            for inner, b2 in ((x.a, x.b), (x.b, x.a)):
                if not uses_var(b2, v) and lane_coef(inner, v) == 1:
                    lo, hi = (bound, b2) if outer_op == "max" else (b2, bound)
                    return inner, lo, hi
    return None


def replace_atoms(e: Expr, mapping: dict) -> Expr:
    terms, c = linear(e)
    out: Expr = Const(c, "int64")
    for atom, k in terms.items():
        out = Bin("add", out, Bin("mul", mapping.get(atom, atom), Const(k, "int64"), "int64"), "int64")
    return simplify(out)


def all_of_conds(conds: list[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Bin("and", out, c, "bool")
    return out


def for_all(cond: Expr, extents: dict[Var, int]) -> Expr | None:
    """A condition free of the loops in `extents` that implies `cond` for every iteration of them,
    or None. `cond` must be an and-tree of integer comparisons linear in those loop variables: each
    comparison then holds throughout iff it holds at the corner where its difference is worst."""
    if isinstance(cond, Bin) and cond.op == "and":
        a, b = for_all(cond.a, extents), for_all(cond.b, extents)
        return None if a is None or b is None else Bin("and", a, b, "bool")
    ordered = isinstance(cond, Cmp) and cond.op in ("lt", "le", "gt", "ge")
    if not (ordered and cond.a.dtype in ("int64", "int32")):
        return None
    diff = Bin("sub", cond.a, cond.b, "int64")
    upper = cond.op in ("lt", "le")  # the difference must stay below: its maximum is the worst case
    corner: dict[Var, Expr] = {}
    for v, ext in extents.items():
        k = lane_coef(diff, v)
        if k is None:
            return None
        corner[v] = Const(ext - 1 if (k > 0) == upper else 0, "int64")
    return simplify(cond, mapping=corner)


def at_lane(e: Expr, v: Var, lane: int) -> Expr:
    """`e` at one lane of the vector variable `v` (simplified)."""
    return simplify(e, mapping={v: Const(lane, "int64")})


def lane_offsets(index: Expr, v: Var, lanes: int) -> tuple[Expr, list[int]] | None:
    """(lane 0's index, each lane's constant offset from it) when every lane of `index` lies a
    fixed distance from lane 0 (a lane permutation, or lanes repeating their group's element:
    `v // g * g + rc`), else None. Only the terms of the index's linear form that read the lane
    are evaluated lane by lane (the rest, a pixel's address, is the same for every lane)."""
    terms, _ = linear(index)
    offsets = [0] * lanes
    for atom, k in terms.items():
        if atom is v:
            per_lane = list(range(lanes))
        elif uses_var(atom, v):
            first = at_lane(atom, v, 0)
            per_lane = []
            for lane in range(lanes):
                d = simplify(Bin("sub", at_lane(atom, v, lane), first, atom.dtype))
                if not isinstance(d, Const):
                    return None
                per_lane.append(int(d.value))
        else:
            continue
        offsets = [o + k * p for o, p in zip(offsets, per_lane)]
    return at_lane(index, v, 0), offsets
