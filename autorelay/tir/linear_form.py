"""Linear forms of integer index expressions: sum of coefficient x atom + constant.

The simplifier (`autorelay.tir.simplify`) normalises every integer sum and product through these
forms; `Forms` memoises them (and the order atoms are printed in) for the length of one
simplification.
"""

from __future__ import annotations

from autorelay.te.expr import Bin, Const, Expr

Linear = tuple[dict[Expr, int], int]


class Forms:
    """Linear forms and atom sort keys, memoised by node identity for one simplification.

    Bottom-up simplification rewrites every add, sub and mul through its linear form, and a child
    is usually the output of the rewrite just below it: re-deriving the child's form walked its whole
    subtree again, quadratic in the depth of an index expression (an unrolled convolution's indices
    are deep). Here a rewrite's output is filed with the form it was built from, and every entry holds
    its node, so no id is reused while the memo lives."""

    def __init__(self) -> None:
        self.forms: dict[int, tuple[Expr, Linear]] = {}
        self.keys: dict[int, tuple[Expr, str]] = {}

    def linear(self, e: Expr) -> Linear:
        """`e` as ({atom: coefficient}, constant); non-linear sub-terms become atoms. The caller
        must not change the dict it gets."""
        hit = self.forms.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._linear(e)
        self.forms[id(e)] = (e, out)
        return out

    def _linear(self, e: Expr) -> Linear:
        if isinstance(e, Const):
            return {}, int(e.value)
        if isinstance(e, Bin) and e.op in ("add", "sub", "mul"):
            got = combine(e.op, self.linear(e.a), self.linear(e.b))
            if got is not None:
                return got
        return {e: 1}, 0

    def atom_key(self, e: Expr) -> str:
        hit = self.keys.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        from autorelay.tir.printer import expr_str

        key = expr_str(e)
        self.keys[id(e)] = (e, key)
        return key

    def from_linear(self, terms: dict[Expr, int], c: int, dtype: str = "int64") -> Expr:
        out: Expr | None = None
        for atom in sorted(terms, key=self.atom_key):
            k = terms[atom]
            mag = abs(k)
            t = atom if mag == 1 else Bin("mul", atom, Const(mag, dtype), dtype)
            if out is None:
                out = t if k > 0 else Bin("sub", Const(0, dtype), t, dtype)
            else:
                out = Bin("add" if k > 0 else "sub", out, t, dtype)
        if out is None:
            return Const(c, dtype)
        if c > 0:
            out = Bin("add", out, Const(c, dtype), dtype)
        elif c < 0:
            out = Bin("sub", out, Const(-c, dtype), dtype)
        if id(out) not in self.forms:  # its form is the one it was built from (an atom keeps its own)
            self.forms[id(out)] = (out, (dict(terms), c))
        return out


def combine(op: str, fa: Linear, fb: Linear) -> Linear | None:
    """The linear form of `a op b` (add, sub or mul) from those of a and b; None for a product of
    two non-constant forms, which is an atom."""
    (ta, ca), (tb, cb) = fa, fb
    if op in ("add", "sub"):
        sign = 1 if op == "add" else -1
        out = dict(ta)
        for k, v in tb.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v != 0}, ca + sign * cb
    if not ta:
        return {k: v * ca for k, v in tb.items() if v * ca != 0}, ca * cb
    if not tb:
        return {k: v * cb for k, v in ta.items() if v * cb != 0}, ca * cb
    return None


def linear(e: Expr) -> Linear:
    """`e` as ({atom: coefficient}, constant); non-linear sub-terms become atoms."""
    return Forms().linear(e)


def from_linear(terms: dict[Expr, int], c: int, dtype: str = "int64") -> Expr:
    """The expression of a linear form, atoms in a fixed order (by their printed text)."""
    return Forms().from_linear(terms, c, dtype)


__all__ = ["Forms", "Linear", "combine", "from_linear", "linear"]
