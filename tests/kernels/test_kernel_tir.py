"""Loop IR: the simplifier's algebra against brute-force evaluation, guard removal, the verifier."""

from __future__ import annotations

import itertools

import pytest

from autorelay.te.expr import Bin, Cmp, Const, Load, Select, Var, const, substitute, walk
from autorelay.tir.nodes import Buffer, For, If, PrimFunc, Seq, Store
from autorelay.tir.printer import expr_str
from autorelay.tir.simplify import interval, simplify, simplify_stmt
from autorelay.tir.verify import VerifyError, verify


def _eval(e, env):
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Bin):
        a, b = _eval(e.a, env), _eval(e.b, env)
        return {
            "add": a + b,
            "sub": a - b,
            "mul": a * b,
            "floordiv": a // b if b else 0,
            "mod": a % b if b else 0,
            "min": min(a, b),
            "max": max(a, b),
        }[e.op]
    if isinstance(e, Cmp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[e.op]
    raise TypeError(e)


x, y = Var("x"), Var("y")
BOUNDS = {x: (0, 5), y: (0, 15)}
EXPRS = [
    (x * 16 + y) // 16,
    (x * 16 + y) % 16,
    (x * 16 + y + 3) // 4,
    (x * 6 + y) % 3,
    (x * 4 - x * 4) + y * 2 - y,
    ((x * 16 + y) // 16) * 16 + (x * 16 + y) % 16,
    (x - 7) // 3,
    (x - 7) % 3,
    Bin("min", x, y + 6, "int64"),
    x * y + x * y,
]


@pytest.mark.parametrize("e", EXPRS, ids=[expr_str(e) for e in EXPRS])
def test_simplify_preserves_value_on_the_bounded_domain(e):
    s = simplify(e, BOUNDS)
    for xv, yv in itertools.product(range(6), range(16)):
        env = {x: xv, y: yv}
        assert _eval(s, env) == _eval(e, env), f"{expr_str(e)} -> {expr_str(s)} at x={xv} y={yv}"


def test_divmod_of_packed_index_becomes_linear():
    assert expr_str(simplify((x * 16 + y) // 16, BOUNDS)) == "x"
    assert expr_str(simplify((x * 16 + y) % 16, BOUNDS)) == "y"
    assert expr_str(simplify(x * 4 + y - x * 4, BOUNDS)) == "y"
    assert simplify(const(7) // const(-2)) == Const(-4, "int64")  # Python floor semantics


def test_fused_index_split_into_row_and_column_is_the_fused_index_again():
    """What keeps a tile that spans image rows contiguous: (p // W) * W + p % W -> p."""
    p = x * 16 + y
    assert expr_str(simplify(p // 14 * 14 + p % 14 + 3, BOUNDS)) == expr_str(simplify(p + 3))
    assert expr_str(simplify(p // 14 * 28 + p % 14 * 2, BOUNDS)) == expr_str(simplify(p * 2))
    assert "%" in expr_str(simplify(p // 14 * 13 + p % 14, BOUNDS))  # not the identity: kept


def _select_chain(q, leaves):
    """leaves[q] as `select(q == 0, leaves[0], select(q == 1, …))`."""
    out = leaves[-1]
    for r in range(len(leaves) - 2, -1, -1):
        out = Select(Cmp("eq", q, const(r)), leaves[r], out, out.dtype)
    return out


@pytest.mark.parametrize("zv", range(6))
def test_select_chains_on_an_unrolled_index_keep_only_the_live_branch(zv):
    """Substituting an unrolled loop's index (a Winograd position) into select chains on it leaves
    exactly the live leaf — a dead branch is never copied — and simplify does the same; both keep
    a subtree shared by two parents shared."""
    z = Var("z")
    shared = Load(Buffer("a", (64,), "float32"), x * 2 + 1, "float32")  # one object, two parents
    leaves = [Load(Buffer("b", (64,), "float32"), x + r, "float32") for r in range(5)] + [shared + shared]
    chain = _select_chain(z // 2 * 2 + z % 2, leaves)  # the index as unrolling leaves it: 2 (z//2) + z%2
    got = substitute(chain, {z: const(zv)})
    assert not any(isinstance(n, Select) for n in walk(got))
    want = substitute(leaves[zv], {z: const(zv)})
    assert got == want
    if zv == 5:
        assert got.a is got.b  # the shared load is still one object
    # simplify: a condition the bounds decide (x <= 5 < zv + 6) picks its branch the same way
    decided = simplify(Select(Cmp("lt", x, const(zv + 6)), leaves[zv], chain, "float32"), BOUNDS)
    assert decided == simplify(leaves[zv], BOUNDS)


def test_interval_of_linear_forms():
    assert interval(x * 3 - y, BOUNDS) == (-15, 15)
    assert interval((x * 16 + y) // 4, BOUNDS) == (0, 23)


def test_guard_removed_only_when_bounds_prove_it():
    buf = Buffer("B", (64,), "float32")
    i, j = Var("i"), Var("j")
    store = Store(buf, i * 8 + j, const(1.0, "float32"))
    proven = For(i, 8, For(j, 8, If(Cmp("lt", i * 8 + j, const(64)), store)))
    assert not isinstance(simplify_stmt(proven).body.body, If)
    ragged = For(i, 9, For(j, 8, If(Cmp("lt", i * 8 + j, const(64)), store)))
    assert isinstance(simplify_stmt(ragged).body.body, If)
    never = For(i, 8, For(j, 8, If(Cmp("lt", i * 8 + j, const(0)), store)))
    assert simplify_stmt(never) is None


def test_one_trip_loops_are_inlined():
    buf = Buffer("B", (4,), "float32")
    i, j = Var("i"), Var("j")
    s = simplify_stmt(For(i, 1, For(j, 4, Store(buf, i * 4 + j, const(0.0, "float32")))))
    assert isinstance(s, For) and s.var is j and expr_str(s.body.index) == "j"


def _func(body, *bufs):
    return PrimFunc("f", tuple(bufs), (), body)


def test_verifier_catches_lowering_bugs():
    buf = Buffer("B", (8,), "float32")
    i, j = Var("i"), Var("j")
    zero = const(0.0, "float32")
    verify(_func(For(i, 8, Store(buf, i, zero)), buf))
    with pytest.raises(VerifyError, match="variable j"):
        verify(_func(For(i, 8, Store(buf, j, zero)), buf))
    with pytest.raises(VerifyError, match="may access"):
        verify(_func(For(i, 9, Store(buf, i, zero)), buf))
    with pytest.raises(VerifyError, match="not a parameter"):
        verify(_func(For(i, 8, Store(buf, i, zero))))
    with pytest.raises(VerifyError, match="outermost"):
        verify(_func(For(j, 1, For(i, 8, Store(buf, i, zero), "parallel")), buf))
    with pytest.raises(VerifyError, match="nested inside a vectorized"):
        verify(_func(For(j, 2, For(i, 4, Store(buf, j * 4 + i, zero)), "vectorized"), buf))
    with pytest.raises(VerifyError, match="float32"):
        verify(_func(For(i, 8, Store(buf, i, const(1))), buf))
    # a guarded access may exceed the bounds the loop alone gives
    verify(_func(For(i, 9, If(Cmp("lt", i, const(8)), Store(buf, i, zero))), buf))
    loaded = Seq((For(i, 8, Store(buf, i, Load(buf, i, "float32"))),))
    verify(_func(loaded, buf))
    assert substitute(i + 1, {i: const(2)}) == Bin("add", const(2), const(1), "int64")
