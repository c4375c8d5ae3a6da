"""Loop IR: the simplifier's algebra against brute-force evaluation, guard removal, the verifier."""

from __future__ import annotations

import itertools

import pytest

from autorelay.te.expr import Bin, Cmp, Const, Load, Select, Var, const
from autorelay.te.traverse import substitute, walk
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


def _random_index(rng, depth, leaves):
    """A random integer index expression: sums, differences, products by constants, products of
    two terms, floor division and modulo by constants, over `leaves`."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(leaves) if rng.random() < 0.8 else const(rng.randrange(-5, 9))
    a = _random_index(rng, depth - 1, leaves)
    op = rng.choice(["add", "add", "sub", "mul", "mulc", "floordiv", "mod"])
    if op in ("add", "sub", "mul"):
        return Bin(op, a, _random_index(rng, depth - 1, leaves), "int64")
    c = const(rng.choice([2, 3, 4, 8, 16]))
    return Bin("mul" if op == "mulc" else op, a, c, "int64")


def test_simplify_with_a_mapping_is_substitute_then_simplify_and_keeps_the_value():
    """Deep random index expressions: simplifying with `mapping` (how unrolled copies and vector
    lanes are emitted) gives exactly the text of substituting first, and the value of the input."""
    import random

    rng = random.Random(0)
    z = Var("z")
    bounds = {x: (0, 5), y: (0, 15), z: (0, 3)}
    for _ in range(150):
        e = _random_index(rng, 6, [x, y, z])
        for zv in range(4):
            mapping = {z: Const(zv, "int64")}
            fused = simplify(e, bounds, mapping)
            assert expr_str(fused) == expr_str(simplify(substitute(e, mapping), bounds))
            for xv, yv in itertools.product(range(0, 6, 2), range(0, 16, 5)):
                env = {x: xv, y: yv, z: zv}
                assert _eval(fused, env) == _eval(e, env), f"{expr_str(e)} -> {expr_str(fused)}"


def test_simplify_stmt_with_a_mapping_is_substitute_stmt_then_simplify_stmt():
    from autorelay.tir.printer import stmt_lines
    from autorelay.tir.simplify import substitute_stmt

    buf = Buffer("out", (64,), "int64")
    body = Seq((If(Cmp("lt", x * 4 + y, const(20)), Store(buf, (x * 4 + y) % 64, y * 3 - x)),
                For(Var("k"), 1, Store(buf, x, (x * 16 + y) // 16), "serial")))
    for xv in range(6):
        m = {x: Const(xv, "int64")}
        assert stmt_lines(simplify_stmt(body, {y: (0, 3)}, m)) == stmt_lines(
            simplify_stmt(substitute_stmt(body, m), {y: (0, 3)}))


def test_unrolled_copies_sharing_their_invariant_nodes_simplify_as_alone():
    """Simplifying an unrolled body's copies with an `Invariant` (what `expand_unrolled` does)
    gives each copy exactly the statements it gets alone; the nodes that do not read the unrolled
    variable are simplified once for all copies, the others per copy."""
    import random

    from autorelay.tir.printer import stmt_lines
    from autorelay.tir.simplify import Invariant

    rng = random.Random(1)
    z, k = Var("z"), Var("k")
    buf = Buffer("out", (4096,), "int64")
    bounds = {x: (0, 5), y: (0, 15)}
    for _ in range(40):
        fixed = _random_index(rng, 5, [x, y])  # one object, in every copy
        moving = z * 3 + _random_index(rng, 4, [z, y])
        body = Seq((Store(buf, _random_index(rng, 5, [x, y, z]) % 4096, fixed + moving),
                    If(Cmp("lt", _random_index(rng, 3, [x, z]), const(7)), Store(buf, fixed % 4096, z * 2)),
                    For(k, 1, Store(buf, (fixed + k) % 4096, _random_index(rng, 4, [x, k, z])), "serial")))
        shared = Invariant(z)
        copies = [simplify_stmt(body, bounds, {z: const(c)}, shared=shared) for c in range(4)]
        alone = [simplify_stmt(body, bounds, {z: const(c)}) for c in range(4)]
        assert [stmt_lines(c) for c in copies] == [stmt_lines(a) for a in alone]
        assert id(fixed) in shared.memo or id(fixed) in shared.lin_memo  # simplified once, for all
        assert not shared.varies(fixed) and shared.varies(moving)
        assert id(moving) not in shared.memo and id(moving) not in shared.lin_memo


def test_the_emitters_lane_dependence_agrees_with_free_vars():
    import random

    from autorelay.codegen.llvm.exprs import ExprEmitter
    from autorelay.te.traverse import free_vars

    rng = random.Random(1)
    z = Var("z")
    em = ExprEmitter()
    for _ in range(100):
        e = _random_index(rng, 5, [x, y, z])
        for sub in walk(e):
            for v in (x, y, z):
                assert em.reads(sub, v) == (v in free_vars(sub))
