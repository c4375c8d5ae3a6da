"""print -> parse gives a structurally equal program, with the same structural hash and text."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest

from autorelay.ir import (
    Call,
    Clause,
    Constant,
    Function,
    If,
    IncompleteType,
    Let,
    Match,
    Op,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from autorelay.ir.module import IRModule
from autorelay.ir.printer import astext, type_to_text
from autorelay.ir.structural import assert_structural_equal, structural_equal, structural_hash
from autorelay.op.registry import call
from autorelay.text_format import parse, parse_expr

EXAMPLES = sorted((Path(__file__).parents[2] / "autorelay" / "examples").glob("*.relay"))

PROGRAMS = [
    """def @main(%x: Tensor[(?, 3), float32], %y: Tensor[(n, 3), float32]) -> Tensor[(n, 3), float32] {
      let %z: Tensor[(n, 3), float32] = add(%x, %y);
      %0 = multiply(%z, 2f);
      let %t = (%0, %z, 2.5f16, -3i64, 1.5f64, True, 1, 1.5, 255u8).0;
      %t
    }""",
    """def @f[A](%x: A) -> A { %x }
    def @g(%x: float32) -> float32 { @f(%x) }""",
    """def @main(%c: bool, %x: float32) {
      %0 = add(%x, %x);
      %1 = if (%c) { %2 = multiply(%0, %0); (%2, %2) } else { (%0, %x) };
      (%1, %0, %1.1)
    }""",
    """def @main(%x: float32) {
      let %r = ref(%x);
      let %u = ref_write(%r, add(ref_read(%r), 1f));
      %0 = ref_read(%r);
      (%0, %0, ref_read(%r), %u)
    }""",
    """def @main(%x: float32) {
      let %f = fn (%y: float32, Primitive=1) -> float32 { add(%y, %x) };
      let %g = fn [B](%b: B) -> B { %b };
      (%f(%x), (fn (%z) { %z })(%x), %g(1f))
    }""",
    """type T[A] { Leaf(A), Node(T[A], T[A]), }
    def @depth[A](%t: T[A]) -> int32 {
      match (%t) {
        Leaf(_) => 1,
        Node(%l, %r: T[A]) => { let %a = @depth(%l); add(%a, @depth(%r)) },
      }
    }
    def @first[A](%t: (A, T[A])) -> A { match? (%t) { (%a, Leaf(_)) => %a, } }""",
    """def @main(%x: Tensor[(2, 2), float32]) {
      %0 = add(%x, meta[relay.Constant][0]);
      %1 = (let %q = multiply(%0, %0); let %p = add(%q, %0); %p);
      add(%1, meta[relay.Constant][1])
    }""",
    """def @main(%x: int32) {
      let %f = fn (%n: int32) -> int32 { if (equal(%n, 0)) { 0 } else { %f(subtract(%n, 1)) } };
      %f(%x)
    }""",
    """def @main(%x: fn (float32, (float32,)) -> Ref[float32], %u: (), %w: Tensor[(3), float32], %v: _) {
      (%x, %u, %w, (), %v)
    }""",
    """def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
      %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=4, kernel_size=[3, 3]);
      %1 = nn.relu(%0);
      %2 = nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2]);
      %3 = nn.batch_flatten(%2);
      (%3, %1)
    }""",
]


def roundtrip(mod_or_expr, **parse_kw):
    text = astext(mod_or_expr)
    back = parse(text, **parse_kw) if isinstance(mod_or_expr, IRModule) else parse_expr(text, **parse_kw)
    assert_structural_equal(mod_or_expr, back)
    assert structural_hash(mod_or_expr) == structural_hash(back)
    assert astext(back) == text  # printing is a fixed point after one round
    return back, text


@pytest.mark.parametrize("src", PROGRAMS, ids=[f"program{i}" for i in range(len(PROGRAMS))])
def test_handwritten_programs_roundtrip(src):
    consts = [np.arange(4, dtype="float32").reshape(2, 2),
              np.array([[np.nan, -0.0], [np.inf, 1e-30]], "float32")]
    roundtrip(parse(src, constants=consts))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_bundled_examples_roundtrip(path):
    assert EXAMPLES, "no bundled examples found"
    roundtrip(parse(path.read_text(), source=str(path)))


def test_constants_roundtrip_through_metadata():
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal((3, 4)).astype("float32"),
        rng.integers(-2**62, 2**62, size=(5,), dtype="int64"),
        np.array([True, False, True]),
        rng.standard_normal((2, 2)).astype("float16"),
        np.array(np.nan, dtype="float32"),  # a scalar without a literal goes to metadata
        np.zeros((0, 3), dtype="uint8"),
    ]
    x = Var("x", TensorType((3, 4)))
    body = Tuple(tuple(Constant(a) for a in arrays) + (call("add", x, Constant(arrays[0])),))
    mod = IRModule({"main": Function((x,), body)})
    back, text = roundtrip(mod)
    assert "#[metadata]" in text
    for a, c in zip(arrays, back["main"].body.fields):
        assert c.data.dtype == a.dtype and c.data.shape == a.shape
        np.testing.assert_array_equal(c.data, a)


@pytest.mark.parametrize(
    "value",
    [np.float32(0.1), np.float32(3.4028235e38), np.float32(-1.1754944e-38), np.float16(0.333),
     np.float64(0.1), np.int64(-2**63), np.uint64(2**64 - 1), np.int8(-128), np.bool_(True)],
)
def test_scalar_literals_print_exactly(value):
    e = Constant(np.array(value))
    text = astext(e)
    assert "meta" not in text
    back = parse_expr(text)
    assert back.data.dtype == e.data.dtype and back.data.tobytes() == e.data.tobytes()


def test_python_built_program_with_name_clashes_and_sharing():
    # Three distinct variables all named "x", one named "0" (like a graph binding), and shadowing.
    x1, x2, x3, zero = Var("x", TensorType(())), Var("x"), Var("x"), Var("0")
    shared = call("multiply", x1, x1)
    inner = Function((x2,), call("add", x2, x1))  # refers to the outer x across an inner x
    c = Var("c", TensorType((), "bool"))
    cond = If(c, Tuple((shared, shared)), Tuple((shared, x1)))  # shared node used in both branches
    body = Let(x3, Call(inner, (shared,)), Let(zero, call("add", x3, x3), Tuple((cond, zero, inner))))
    mod = IRModule({"main": Function((x1, c), body)})
    back, text = roundtrip(mod)
    assert text.count("multiply(") == 1  # sharing survives as one graph binding
    bt = back["main"].body.body.body.fields
    assert bt[0].true_branch.fields[0] is bt[0].false_branch.fields[0]


def test_nested_and_shared_lets_match_and_refs():
    x, y, r, a, b = Var("x"), Var("y"), Var("r"), Var("a"), Var("b")
    nested = Let(y, call("add", x, x), call("multiply", y, y))  # a let used as an argument
    shared_let = Let(a, const(1.0), a)
    m = Match(Tuple((x, x)), (Clause(PatternTuple((PatternVar(b), PatternWildcard())), b),), complete=False)
    ref = RefCreate(x)
    body = Let(r, ref, Tuple((call("add", nested, shared_let), shared_let, m, RefWrite(r, RefRead(r)))))
    roundtrip(Function((x,), body))


def test_random_graphs_roundtrip():
    """Random DAGs with sharing across lets, branches and closures (names clash on purpose)."""
    rng = random.Random(1234)
    for _ in range(40):
        params = [Var(f"p{i}", TensorType((2, 3))) for i in range(3)]
        c = Var("c", TensorType((), "bool"))
        pool: list = list(params)
        for _ in range(rng.randint(1, 25)):
            kind = rng.random()
            a, b = rng.choice(pool), rng.choice(pool)
            if kind < 0.12:
                pool.append(If(c, a, b))
            elif kind < 0.2:
                v = Var(rng.choice(["p1", "y"]))
                pool.append(Call(Function((v,), call("add", v, a)), (b,)))
            elif kind < 0.5:
                pool.append(call(rng.choice(["add", "multiply", "subtract", "maximum"]), a, b))
            elif kind < 0.65:
                pool.append(call("nn.relu", a))
            elif kind < 0.8:
                pool.append(TupleGetItem(Tuple((a, b)), rng.randint(0, 1)))
            elif kind < 0.9:
                v = Var(rng.choice(["t", "p0", "x"]))
                pool.append(Let(v, a, call("add", v, b)))
            else:
                pool.append(call("add", a, const(rng.uniform(-3, 3))))
        body = Tuple(tuple(rng.sample(pool, k=min(3, len(pool)))))
        roundtrip(IRModule({"main": Function((*params, c), body)}))


def test_show_types_output_parses_back():
    infer_types = pytest.importorskip("autorelay.typing").infer_types
    mod = parse(PROGRAMS[9])
    typed = infer_types(mod)
    text = astext(typed, show_types=True)
    assert "/* ty=Tensor[(1, 4, 8, 8), float32] */" in text
    assert_structural_equal(parse(text), mod)


def test_type_to_text():
    assert type_to_text(TensorType((1, 3), "float32")) == "Tensor[(1, 3), float32]"
    assert str(TensorType((), "int8")) == "int8"
    inc = IncompleteType()
    assert type_to_text(inc) == f"?t{inc.id}" and type_to_text(inc, hole=True) == "_"


def test_printing_an_op_value_and_inline_function_callee():
    f = Function((Var("z"),), Var("w"))
    w = f.body
    e = Function((w,), Tuple((Call(f, (w,)), Op("add"))))
    roundtrip(e)


def test_200_layer_program_is_fast_and_does_not_recurse_too_deep():
    lines = ["def @main(%x: Tensor[(1, 8, 16, 16), float32], %w: Tensor[(8, 8, 3, 3), float32]) {"]
    prev = "%x"
    for i in range(200):
        lines.append(f"  %{2 * i} = nn.conv2d({prev}, %w, padding=[1, 1], channels=8, kernel_size=[3, 3]);")
        lines.append(f"  %{2 * i + 1} = nn.relu(%{2 * i});")
        prev = f"%{2 * i + 1}"
    lines.append(f"  {prev}\n}}")
    text = "\n".join(lines)
    t0 = time.perf_counter()
    mod = parse(text)
    printed = astext(mod)
    back = parse(printed)
    same = structural_equal(mod, back)
    h1, h2 = structural_hash(mod), structural_hash(back)
    elapsed = time.perf_counter() - t0
    assert same and h1 == h2
    assert printed.count("nn.conv2d(") == 200
    assert elapsed < 2.0, f"200-layer parse/print/compare/hash took {elapsed:.2f}s"


def test_deeply_nested_expression_roundtrips():
    text = "%x"
    for _ in range(600):
        text = f"add({text}, 1f)"
    x = Var("x")
    e = parse_expr(text, free_vars=[x])
    back = parse_expr(astext(e), free_vars=[x])
    assert_structural_equal(e, back)
    assert structural_hash(e) == structural_hash(back)
