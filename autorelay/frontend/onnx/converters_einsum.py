"""Einsum, rewritten into ops the compiler already tunes.

The equation is first made plain: an ellipsis becomes fresh letters, one per axis it stands for,
aligned from the right across operands as NumPy aligns them (an operand with fewer such axes
takes the last letters, and an extent of 1 broadcasts); a letter repeated within one operand
takes that operand's diagonal (the two axes moved last, flattened, and every (n + 1)-th element
taken). Then each operand's letters that appear nowhere else are summed away, and operands are
contracted left to right. A contraction of two is transpose + reshape to (batch, free,
contracted) x (batch, contracted, free), one `nn.batch_matmul`, and a reshape + transpose to the
letters still needed; one operand alone is a transpose and sums.
"""

from __future__ import annotations

import string

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar, required_input
from autorelay.ir.expr import Expr

TABLE: dict = {}
_x = required_input
_reg = registrar(TABLE)


def _parse(eq: str, ranks: list[int], node: NodeView) -> tuple[list[str], str]:
    """The operands' letter strings and the output's, ellipses spelled out in fresh letters."""
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.fail(f"einsum {eq!r} names {len(terms)} operand(s), the node has {len(ranks)}")
    if any(c not in string.ascii_letters + ".," for c in lhs + out):
        raise node.fail(f"einsum {eq!r}: subscripts must be letters, with at most one '...' per term")
    spare = [c for c in string.ascii_letters if c not in eq]
    widths = []
    for term, rank in zip(terms, ranks):
        named = len(term.replace("...", "", 1))
        if "." in term.replace("...", "", 1) or ("..." not in term and named != rank) or named > rank:
            raise node.fail(f"einsum {eq!r}: term {term!r} does not fit an operand of rank {rank}")
        widths.append(rank - named if "..." in term else 0)
    ellipsis = "".join(spare[:max(widths, default=0)])
    terms = [t.replace("...", ellipsis[len(ellipsis) - w:] if w else "") for t, w in zip(terms, widths)]
    if arrow:
        if "." in out.replace("...", "", 1):
            raise node.fail(f"einsum {eq!r}: output {out!r} has a malformed ellipsis")
        if ellipsis and "..." not in out:
            raise node.fail(f"einsum {eq!r}: the inputs' ellipsis axes need a '...' in the output")
        out = out.replace("...", ellipsis)
    else:  # implicit output: the ellipsis axes, then the letters named once, in alphabetical order
        named = "".join(terms).translate({ord(c): None for c in ellipsis})
        out = ellipsis + "".join(sorted(c for c in set(named) if named.count(c) == 1))
    if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
        raise node.fail(f"einsum {eq!r}: output letters must be distinct and come from the inputs")
    return terms, out


def _diagonals(g: GraphBuilder, x: Expr, term: str, node: NodeView) -> tuple[Expr, str]:
    """x with each repeated letter's axes reduced to their diagonal (that letter now once, last)."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i = term.index(c)
        j = term.index(c, i + 1)
        shape = g.static_shape(x, "einsum operand")
        if shape[i] != shape[j]:
            raise node.fail(f"einsum: letter {c!r} repeated in one operand over extents {shape[i]} and "
                            f"{shape[j]}; a diagonal needs them equal")
        others = [k for k in range(len(term)) if k not in (i, j)]
        n = shape[i]
        if others + [i, j] != list(range(len(term))):
            x = g.call("transpose", x, axes=(*others, i, j))
        x = g.call("reshape", x, newshape=(*(shape[k] for k in others), n * n))
        x = g.call("take", x, g.const(np.arange(n, dtype="int64") * (n + 1)), axis=len(others))
        term = "".join(term[k] for k in others) + c
    return x, term


def _sum_away(g: GraphBuilder, x: Expr, term: str, keep: set[str]) -> tuple[Expr, str]:
    drop = [i for i, c in enumerate(term) if c not in keep]
    if not drop:
        return x, term
    return g.call("sum", x, axis=tuple(drop), keepdims=False), "".join(c for c in term if c in keep)


def _permute(g: GraphBuilder, x: Expr, term: str, order: str) -> Expr:
    axes = tuple(term.index(c) for c in order)
    return x if axes == tuple(range(len(axes))) else g.call("transpose", x, axes=axes)


def _broadcast(g: GraphBuilder, x: Expr, term: str, extents: dict[str, int]) -> Expr:
    shape = g.static_shape(x, "einsum operand")
    want = tuple(extents[c] for c in term)
    return x if tuple(shape) == want else g.call("broadcast_to", x, shape=want)


def _contract(g: GraphBuilder, a: Expr, ta: str, b: Expr, tb: str, out: str,
              node: NodeView) -> Expr:
    """a (letters ta) with b (tb) -> the letters `out`, every letter not in `out` summed."""
    (a, ta), (b, tb) = _sum_away(g, a, ta, set(out) | set(tb)), _sum_away(g, b, tb, set(out) | set(ta))
    sa, sb = g.static_shape(a, "einsum operand"), g.static_shape(b, "einsum operand")
    da, db = dict(zip(ta, sa)), dict(zip(tb, sb))
    dims = {**da, **db}
    for c in sorted(set(ta) & set(tb)):
        if da[c] != db[c] and 1 not in (da[c], db[c]):
            raise node.fail(f"einsum: letter {c!r} has extent {da[c]} in one operand, {db[c]} in the other")
        dims[c] = max(da[c], db[c])
    a, b = _broadcast(g, a, ta, dims), _broadcast(g, b, tb, dims)
    batch = "".join(c for c in out if c in ta and c in tb)
    left = "".join(c for c in out if c in ta and c not in tb)
    right = "".join(c for c in out if c in tb and c not in ta)
    contract = "".join(c for c in ta if c in tb and c not in out)

    def size(s: str) -> int:
        return int(np.prod([dims[c] for c in s], dtype=np.int64))

    a3 = g.call("reshape", _permute(g, a, ta, batch + left + contract),
                newshape=(size(batch), size(left), size(contract)))
    b3 = g.call("reshape", _permute(g, b, tb, batch + contract + right),
                newshape=(size(batch), size(contract), size(right)))
    prod = g.call("nn.batch_matmul", a3, b3, transpose_a=False, transpose_b=False)
    res = g.call("reshape", prod, newshape=tuple(dims[c] for c in batch + left + right))
    return _permute(g, res, batch + left + right, out)


@_reg("Einsum")
def _einsum(g: GraphBuilder, node: NodeView) -> Expr:
    xs = [_x(node, i) for i in range(len(node.inputs))]
    terms, out = _parse(str(node.attr("equation", "")), [g.ndim(x) for x in xs], node)
    operands = [_diagonals(g, x, t, node) for x, t in zip(xs, terms)]
    acc, term = operands[0]
    if len(operands) == 1:
        acc, term = _sum_away(g, acc, term, set(out))
        return _permute(g, acc, term, out)
    for k, (x, t) in enumerate(operands[1:], start=1):
        later = set(out).union(*(u for _, u in operands[k + 1:]))
        keep = "".join(dict.fromkeys(c for c in term + t if c in later))  # the letters still needed
        acc = _contract(g, acc, term, x, t, out if k == len(operands) - 1 else keep, node)
        term = out if k == len(operands) - 1 else keep
    return acc


__all__ = ["TABLE"]
