"""Pieces of Relay's text format beyond calls and lets: literals as Relay types them, nested
comments, `e1; e2` sequencing and `free_var` declarations; each one printed and parsed back."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.errors import ParseError
from autorelay.ir import Constant, Let, Tuple, Var
from autorelay.ir.printer import astext
from autorelay.ir.structural import assert_structural_equal
from autorelay.text_format import parse_expr
from autorelay.typing import infer_expr


def roundtrip(e, **kw):
    text = astext(e)
    back = parse_expr(text, **kw)
    assert_structural_equal(e, back, map_free_vars=True)
    return text


# ---- literals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lit", "dtype", "value"),
    [
        ("2147483647", "int32", 2**31 - 1), ("2147483648", "int64", 2**31),  # Relay: int64 past int32
        ("-2147483648", "int32", -(2**31)), ("-2147483649", "int64", -(2**31) - 1),
        ("9223372036854775807", "int64", 2**63 - 1), ("-42i", "int32", -42), ("42i", "int32", 42),
        ("-42i16", "int16", -42), ("-42i64", "int64", -42), ("-05", "int32", -5),
        ("--10", "int32", 10), ("---10", "int32", -10), ("65504f16", "float16", 65504.0),
        ("3.4028235e+38f", "float32", float(np.finfo("float32").max)), ("1e300f64", "float64", 1e300),
    ],
)
def test_literals_take_relays_dtype(lit, dtype, value):
    c = parse_expr(lit)
    assert isinstance(c, Constant) and str(c.data.dtype) == dtype and c.data.item() == value
    roundtrip(c)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2147483648i32", "integer literal '2147483648i32' does not fit in int32"),
        ("32768i16", "integer literal '32768i16' does not fit in int16"),
        ("9223372036854775808", "integer literal '9223372036854775808' does not fit in int64"),
        ("65505f16", "float literal '65505f16' does not fit in float16"),
        ("-65505f16", "float literal '-65505f16' does not fit in float16"),
        ("3.40283e+38f32", "float literal '3.40283e+38f32' does not fit in float32"),
    ],
)
def test_literals_out_of_range_are_located(text, message):
    with pytest.raises(ParseError) as err:
        parse_expr(f"(1,\n  {text})")
    assert message in err.value.message
    assert (err.value.line, err.value.column) == (2, 3)
    assert err.value.source_line == f"  {text})" and str(err.value).endswith("\n    ^")


def test_int64_literals_compute_in_int64():
    e = parse_expr("2147483648 + 1i64")
    assert int(np.asarray(autorelay.evaluate(e))) == 2**31 + 1
    with pytest.raises(autorelay.TypeCheckError, match="dtype"):
        infer_expr(parse_expr("2147483648 + 1"))  # int64 + int32: no implicit cast


# ---- comments ----------------------------------------------------------------------------------


def test_block_comments_nest():
    e = parse_expr("/* outer /* inner */ still a comment */ (1, /* /* deep */ */ 2)")
    assert isinstance(e, Tuple) and [f.data.item() for f in e.fields] == [1, 2]
    with pytest.raises(ParseError) as err:
        parse_expr("1\n/* a /* b */ 2")  # the inner */ closes only the inner comment
    assert "unterminated comment" in err.value.message and (err.value.line, err.value.column) == (2, 1)


# ---- sequencing --------------------------------------------------------------------------------


def test_sequence_is_a_let_of_an_unused_variable():
    e = parse_expr("(); ()")  # Relay's test_seq
    assert isinstance(e, Let) and e.var.name_hint == "_" and e.var.type_annotation is None
    assert all(isinstance(x, Tuple) and not x.fields for x in (e.value, e.body))
    assert_structural_equal(e, parse_expr("let %_ = (); ()"))
    text = roundtrip(e)
    assert "let" not in text and "();\n()" in text


def test_sequence_runs_effects_in_order():
    e = parse_expr("""
        let %r = ref(1);
        ref_write(%r, ref_read(%r) * 10);
        ref_write(%r, ref_read(%r) + 2);
        ref_read(%r)
    """)
    assert int(np.asarray(autorelay.evaluate(e))) == 12  # (1 * 10) + 2, not (1 + 2) * 10
    text = roundtrip(e)
    assert text.count("ref_write") == 2 and "let %_" not in text


def test_sequences_in_blocks_parens_and_calls():
    e = parse_expr("fn (%x: int32) { %x; (%x; %x + 1) }(41)")
    assert int(np.asarray(autorelay.evaluate(e))) == 42
    roundtrip(e)


def test_a_used_underscore_variable_stays_a_let():
    e = parse_expr("let %_ = 5; %_ * 2")
    text = roundtrip(e)
    assert "let %_ = 5;" in text and int(np.asarray(autorelay.evaluate(e))) == 10


# ---- free_var ----------------------------------------------------------------------------------


def test_free_var_declares_an_annotated_free_variable():
    e = parse_expr("free_var %x: float32; %x((%x,).0, %x)")  # Relay's test_tuple_proj
    x = e.op
    assert isinstance(x, Var) and x.name_hint == "x" and str(x.type_annotation) == "float32"
    assert e.args[0].tuple_value.fields[0] is x and e.args[1] is x


def test_printer_declares_free_variables_and_parses_back():
    x = Var("x", autorelay.ir.TensorType((2,), "float32"))
    y = Var("y")
    e = parse_expr("%x * 2f + %y", free_vars=[x, y])
    text = astext(e)
    assert "free_var %x: Tensor[(2), float32];" in text and "free_var %y;" in text
    back = parse_expr(text)
    assert_structural_equal(e, back, map_free_vars=True)
    assert parse_expr(text, free_vars=[x, y]).args[0].args[0] is x  # supplied variables are used
    fn = autorelay.ir.Function((x, y), e)
    got = autorelay.evaluate(fn, np.array([1, 2], "float32"), np.float32(0.5))
    np.testing.assert_allclose(np.asarray(got), [2.5, 4.5])


def test_free_var_errors_are_located():
    with pytest.raises(ParseError) as err:
        parse_expr("free_var %x;\nfree_var %x; %x")
    assert "declared twice" in err.value.message and (err.value.line, err.value.column) == (2, 10)
    with pytest.raises(ParseError) as err:
        parse_expr("free_var %x: int32; %x", free_vars=[Var("x", autorelay.ir.scalar_type("float32"))])
    assert "another type" in err.value.message
    with pytest.raises(ParseError) as err:
        parse_expr("free_var x; 1")
    assert "expected a variable after 'free_var'" in err.value.message


# ---- all of it in one program ------------------------------------------------------------------

PROGRAM = """#[version = "0.0.5"]
/* a program in the newer syntax /* with a nested comment */ */
extern type Handle;
type Tree[A] { Leaf(A), Branch(Forest[A]) }
type Forest[A] { Nil2, More(Tree[A], Forest[A]) }

def @sum_tree(%t: Tree[int]) -> int {
  match (%t) {
    Leaf(%v) => %v,
    Branch(%f) => @sum_forest(%f),
  }
}

def @sum_forest(%f: Forest[int]) -> int {
  match (%f) {
    Nil2 => 0,
    More(%t, %rest) => @sum_tree(%t) + @sum_forest(%rest),
  }
}

def @main(%x: Tensor[(3), float32], %k: int, %v: Tensor[(4), int8x4]) {
  let %r = ref(%k);
  ref_write(%r, ref_read(%r) * 2 - -1);
  %y = %x * 2f - 1f / 4f;
  let %big = 2147483648 + 1i64;
  (%y >= 0f, ref_read(%r) % 3 == 0, @sum_tree(Branch(More(Leaf(%k), More(Leaf(-5), Nil2)))), %big,
   reshape(%v, newshape=[2, 2]))
}
"""


def test_a_program_in_the_new_syntax_roundtrips_types_and_runs():
    mod = autorelay.parse(PROGRAM)
    text = astext(mod)
    back = autorelay.parse(text)
    assert_structural_equal(mod, back)
    assert astext(back) == text  # printing is a fixed point
    typed = autorelay.infer_types(mod)
    ret = typed["main"].checked_type.ret_type
    assert str(ret) == "(Tensor[(3), bool], bool, int32, int64, Tensor[(2, 2), int8x4])"
    # Evaluate the part without the vector-typed value (it has no NumPy form) against NumPy.
    src = PROGRAM.replace(", %v: Tensor[(4), int8x4]", "").replace(",\n   reshape(%v, newshape=[2, 2]))", ")")
    x = np.array([-1.0, 0.0, 0.75], dtype="float32")
    scalar_mod = autorelay.infer_types(autorelay.parse(src))
    y_ge0, divisible, tree_sum, big = autorelay.evaluate(scalar_mod, x, np.int32(7))
    np.testing.assert_array_equal(np.asarray(y_ge0), x * 2 - 0.25 >= 0)
    assert bool(np.asarray(divisible)) == ((7 * 2 + 1) % 3 == 0)
    assert int(np.asarray(tree_sum)) == 7 - 5
    assert np.asarray(big).dtype == np.int64 and int(np.asarray(big)) == 2**31 + 1
