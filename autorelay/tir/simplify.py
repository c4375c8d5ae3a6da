"""Arithmetic simplifier for index expressions and bounds-based condition removal.

Integer expressions are normalised to linear forms (sum of coefficient x atom + constant), which is
what makes the rest of the pipeline work: `(no*16 + ni) // 16` becomes `no` once `ni` is known to
lie in [0, 16), so a packed-weight load turns into a contiguous vector load, and a guard
`io*8 + ii < 64` disappears when the loop bounds prove it. Bounds are intervals of loop variables.
"""

from __future__ import annotations

from autorelay.te.expr import Bin, Cast, Cmp, Const, Expr, Not, Select, Var, is_int
from autorelay.te.traverse import INT_FOLD, children, reads_var, rebuild, substitute, wrap_int
from autorelay.tir.linear_form import Forms, Linear, combine
from autorelay.tir.nodes import Allocate, Barrier, For, If, Seq, Stmt, Store, seq

Bounds = dict[Var, tuple[int, int]]


def interval(e: Expr, bounds: Bounds) -> tuple[int, int] | None:
    """Inclusive [lo, hi] of an integer expression, or None if unknown."""
    if isinstance(e, Const):
        return int(e.value), int(e.value)
    if isinstance(e, Var):
        return bounds.get(e)
    if isinstance(e, Cast):
        return interval(e.a, bounds)
    if isinstance(e, Bin):
        if e.op in ("add", "sub", "mul", "min", "max"):
            a, b = interval(e.a, bounds), interval(e.b, bounds)
            if a is None or b is None:
                return None
            if e.op == "add":
                return a[0] + b[0], a[1] + b[1]
            if e.op == "sub":
                return a[0] - b[1], a[1] - b[0]
            if e.op == "min":
                return min(a[0], b[0]), min(a[1], b[1])
            if e.op == "max":
                return max(a[0], b[0]), max(a[1], b[1])
            ps = [x * y for x in a for y in b]
            return min(ps), max(ps)
        if e.op in ("floordiv", "mod") and isinstance(e.b, Const) and int(e.b.value) > 0:
            c = int(e.b.value)
            a = interval(e.a, bounds)
            if e.op == "floordiv":
                return None if a is None else (a[0] // c, a[1] // c)
            if a is not None and a[0] // c == a[1] // c:
                return a[0] % c, a[1] % c
            return 0, c - 1
    if isinstance(e, Select):
        a, b = interval(e.t, bounds), interval(e.f, bounds)
        if a is None or b is None:
            return None
        return min(a[0], b[0]), max(a[1], b[1])
    return None


def _lin_interval(terms: dict[Expr, int], c: int, bounds: Bounds) -> tuple[int, int] | None:
    lo = hi = c
    for atom, k in terms.items():
        iv = interval(atom, bounds)
        if iv is None:
            return None
        a, b = k * iv[0], k * iv[1]
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def _divmod(e: Bin, bounds: Bounds, f: Forms) -> Expr | None:
    c = int(e.b.value)  # type: ignore[union-attr]
    if c == 1:
        return e.a if e.op == "floordiv" else Const(0, e.dtype)
    terms, k = f.linear(e.a)
    q_terms = {a: v // c for a, v in terms.items() if v % c == 0}
    r_terms = {a: v for a, v in terms.items() if v % c != 0}
    kq, kr = divmod(k, c)
    iv = _lin_interval(r_terms, kr, bounds)
    if iv is not None and iv[0] // c == iv[1] // c:
        m = iv[0] // c
        if e.op == "floordiv":
            return f.from_linear(q_terms, kq + m, e.dtype)
        return f.from_linear(r_terms, kr - m * c, e.dtype)
    if not q_terms and kq == 0:
        return None
    rest = f.from_linear(r_terms, kr, e.dtype)
    if e.op == "floordiv":
        return _simp_lin(
            Bin("add", f.from_linear(q_terms, kq, e.dtype), Bin("floordiv", rest, e.b, e.dtype), e.dtype), f
        )
    return Bin("mod", rest, e.b, e.dtype)


def _merge_divmod(terms: dict[Expr, int], c: int, f: Forms) -> Linear:
    """Fold `k*c*(x // c) + k*(x % c)` back into `k*x`: a fused loop's index split into (row,
    column) and flattened again is the fused index, so loads along it stay contiguous."""
    terms = dict(terms)  # a memoised form: not ours to change
    merged = True
    while merged:
        merged = False
        for atom, k in list(terms.items()):
            if not (isinstance(atom, Bin) and atom.op == "mod" and isinstance(atom.b, Const)):
                continue
            div = Bin("floordiv", atom.a, atom.b, atom.dtype)
            if terms.get(div) != k * int(atom.b.value):
                continue
            del terms[atom], terms[div]
            xt, xc = f.linear(atom.a)
            for a, v in xt.items():
                terms[a] = terms.get(a, 0) + k * v
            c += k * xc
            terms = {a: v for a, v in terms.items() if v != 0}
            merged = True
            break
    return terms, c


def _simp_lin(e: Expr, f: Forms) -> Expr:
    terms, c = _merge_divmod(*f.linear(e), f)
    return f.from_linear(terms, c, e.dtype)


def _cmp_const(op: str, lo: int, hi: int) -> bool | None:
    """Decide `d op 0` for d in [lo, hi]."""
    if op == "lt":
        return True if hi < 0 else False if lo >= 0 else None
    if op == "le":
        return True if hi <= 0 else False if lo > 0 else None
    if op == "gt":
        return True if lo > 0 else False if hi <= 0 else None
    if op == "ge":
        return True if lo >= 0 else False if hi < 0 else None
    if op == "eq":
        return True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
    return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None


def _rule(e: Expr, bounds: Bounds, f: Forms) -> Expr | None:
    """One rewrite of a node whose children are rewritten (integer add, sub and mul never come here:
    `_simplify` gives them their canonical linear form)."""
    if isinstance(e, Bin):
        a, b = e.a, e.b
        if e.op in ("and", "or"):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const):
                    if e.op == "and":
                        return y if x.value else Const(False, "bool")
                    return Const(True, "bool") if x.value else y
            return None
        if not is_int(e.dtype):
            return None
        if (
            isinstance(a, Const)
            and isinstance(b, Const)
            and e.op in INT_FOLD
            and not (e.op in ("floordiv", "mod") and b.value == 0)
        ):
            return Const(wrap_int(INT_FOLD[e.op](int(a.value), int(b.value)), e.dtype), e.dtype)
        if e.op in ("floordiv", "mod") and isinstance(b, Const) and int(b.value) > 0:
            return _divmod(e, bounds, f)
        if e.op in ("min", "max"):
            ia, ib = interval(a, bounds), interval(b, bounds)
            if ia is not None and ib is not None:
                if ia[1] <= ib[0]:
                    return a if e.op == "min" else b
                if ib[1] <= ia[0]:
                    return b if e.op == "min" else a
        return None
    if isinstance(e, Cmp):
        if is_int(e.a.dtype):
            d = _simp_lin(Bin("sub", e.a, e.b, "int64"), f)
            terms, c = f.linear(d)
            iv = _lin_interval(terms, c, bounds)
            if iv is not None:
                r = _cmp_const(e.op, *iv)
                if r is not None:
                    return Const(r, "bool")
        return None
    if isinstance(e, Not) and isinstance(e.a, Const):
        return Const(not e.a.value, "bool")
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.t if e.cond.value else e.f
    if isinstance(e, Cast) and isinstance(e.a, Const) and is_int(e.dtype):
        return Const(int(e.a.value), e.dtype)
    return None


def simplify(e: Expr, bounds: Bounds | None = None, mapping: dict[Var, Expr] | None = None) -> Expr:
    """Bottom-up rewriting by `_rule`, except that a select whose condition simplifies to a constant
    is replaced by its live branch before the dead one is visited: unrolled code (a Winograd
    transform's positions) is a chain of selects on the unrolled index, of which one branch lives.
    A subtree shared by several parents (the same object) is simplified once. `mapping`: variables
    replaced on the way (the result is that of simplifying `substitute(e, mapping)`)."""
    return _simplify(e, bounds or {}, Forms(), mapping or {})


def _is_linear(n: Expr) -> bool:
    return isinstance(n, Bin) and n.op in ("add", "sub", "mul") and is_int(n.dtype)


class Invariant:
    """What simplifying the copies of an unrolled loop's body can share: the results for the nodes
    of the body that do not read the loop's variable (`var`), which every copy would otherwise
    simplify again. Valid while the body's nodes live (memos are by identity) and for copies that
    differ only in `var`'s value."""

    def __init__(self, var: Var) -> None:
        self.var = var
        self.reads: dict[int, tuple[Expr, bool]] = {}
        self.memo: dict[int, Expr] = {}
        self.lin_memo: dict[int, Linear] = {}

    def varies(self, n: Expr) -> bool:
        """Whether `n` reads the unrolled variable."""
        return reads_var(n, self.var, self.reads)


def _simplify(e: Expr, b: Bounds, forms: Forms, mapping: dict[Var, Expr],
              shared: Invariant | None = None) -> Expr:
    memo: dict[int, Expr] = {}  # by node identity: a subtree shared in the input is visited once
    lin_memo: dict[int, Linear] = {}

    def go(n: Expr) -> Expr:
        done = memo.get(id(n))
        if done is None:
            if shared is None or shared.varies(n):
                done = visit(n)
            else:
                done = shared.memo.get(id(n))
                if done is None:
                    done = shared.memo[id(n)] = visit(n)
            memo[id(n)] = done
        return done

    def lform(n: Expr) -> Linear:
        """The linear form `_rule` would give `n` after its children were rewritten, without
        building the rewritten sums below it: a chain of k additions rewritten level by level
        built k canonical sums of up to k terms each, all but the last thrown away."""
        done = lin_memo.get(id(n))
        if done is None and shared is not None and not shared.varies(n):
            done = shared.lin_memo.get(id(n))
        if done is not None:
            return done
        if not isinstance(n, Bin) or not _is_linear(n):
            done = forms.linear(go(n))
        else:
            got = combine(n.op, lform(n.a), lform(n.b))
            if got is not None:
                done = _merge_divmod(*got, forms)
            else:  # a product of two non-constant terms is an atom of the sum above it
                ka, kb = go(n.a), go(n.b)
                done = ({n if ka is n.a and kb is n.b else rebuild(n, (ka, kb)): 1}, 0)
        lin_memo[id(n)] = done
        if shared is not None and not shared.varies(n):
            shared.lin_memo[id(n)] = done
        return done

    def visit(n: Expr) -> Expr:
        if isinstance(n, Var):
            r = mapping.get(n)
            return n if r is None else r if isinstance(r, Const) else _simplify(r, b, forms, {})
        if _is_linear(n):
            return forms.from_linear(*lform(n), n.dtype)
        if isinstance(n, Select):
            cond = go(n.cond)
            if isinstance(cond, Const):
                return go(n.t if cond.value else n.f)
            t, f = go(n.t), go(n.f)
            n = n if (cond is n.cond and t is n.t and f is n.f) else Select(cond, t, f, n.dtype)
        else:
            kids = children(n)
            if kids:
                new = tuple(go(k) for k in kids)
                if any(x is not k for x, k in zip(new, kids)):
                    n = rebuild(n, new)
        out = _rule(n, b, forms)
        return n if out is None else out

    return go(e)


def simplify_stmt(s: Stmt, bounds: Bounds | None = None, mapping: dict[Var, Expr] | None = None, *,
                  shared: Invariant | None = None) -> Stmt | None:
    """Simplify every expression; drop conditions the loop bounds prove; inline 1-trip loops.
    `mapping`: variables replaced on the way, as `substitute_stmt` would first. `shared`: results
    kept from simplifying another copy of the same unrolled body (`Invariant`)."""
    return _simplify_stmt(s, dict(bounds or {}), Forms(), dict(mapping or {}), shared)


def _simplify_stmt(s: Stmt, b: Bounds, forms: Forms, mapping: dict[Var, Expr],
                   shared: Invariant | None = None) -> Stmt | None:
    def expr(e: Expr) -> Expr:
        return _simplify(e, b, forms, mapping, shared)

    def stmt(t: Stmt, inner: Bounds = b, m: dict[Var, Expr] = mapping) -> Stmt | None:
        return _simplify_stmt(t, inner, forms, m, shared)

    if isinstance(s, For):
        if s.extent == 1 and s.kind != "parallel":
            return stmt(s.body, b, {**mapping, s.var: Const(0, "int64")})
        inner = {**b, s.var: (0, s.extent - 1)}
        body = stmt(s.body, inner)
        return None if body is None else For(s.var, s.extent, body, s.kind)
    if isinstance(s, Store):
        return Store(s.buffer, expr(s.index), expr(s.value))
    if isinstance(s, Seq):
        items = [x for x in (stmt(t) for t in s.stmts) if x is not None]
        return seq(items) if items else None
    if isinstance(s, Allocate):
        body = stmt(s.body)
        return None if body is None else Allocate(s.buffer, body)
    if isinstance(s, If):
        cond = expr(s.cond)
        if isinstance(cond, Const):
            branch = s.then if cond.value else s.orelse
            return None if branch is None else stmt(branch)
        then = stmt(s.then)
        orelse = stmt(s.orelse) if s.orelse is not None else None
        if then is None and orelse is None:
            return None
        if then is None:
            return If(Not(cond), orelse)  # type: ignore[arg-type]
        return If(cond, then, orelse)
    if isinstance(s, Barrier):
        return s
    raise TypeError(f"simplify_stmt: unknown statement {type(s).__name__}")


def substitute_stmt(s: Stmt, mapping: dict[Var, Expr]) -> Stmt:
    if isinstance(s, For):
        return For(s.var, s.extent, substitute_stmt(s.body, mapping), s.kind)
    if isinstance(s, Store):
        return Store(s.buffer, substitute(s.index, mapping), substitute(s.value, mapping))
    if isinstance(s, Seq):
        return Seq(tuple(substitute_stmt(t, mapping) for t in s.stmts))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, substitute_stmt(s.body, mapping))
    if isinstance(s, If):
        return If(
            substitute(s.cond, mapping),
            substitute_stmt(s.then, mapping),
            None if s.orelse is None else substitute_stmt(s.orelse, mapping),
        )
    if isinstance(s, Barrier):
        return s
    raise TypeError(f"substitute_stmt: unknown statement {type(s).__name__}")


