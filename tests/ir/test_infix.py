"""Relay's infix operators: which op each one is, precedence and associativity, unary minus on
literals, and the numbers they compute (the interpreter against NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.errors import ParseError
from autorelay.ir import Call, Constant, FuncType, Op, TensorType, TupleType, Var
from autorelay.ir.printer import astext
from autorelay.ir.structural import assert_structural_equal, structural_equal
from autorelay.text_format import parse, parse_expr
from autorelay.typing import infer_expr

HEADER = '#[version = "0.0.5"]\n'
F32 = TensorType((), "float32")

OPERATORS = {
    "+": ("add", np.add), "-": ("subtract", np.subtract), "*": ("multiply", np.multiply),
    "/": ("divide", np.divide), "%": ("mod", np.fmod), "==": ("equal", np.equal),
    "!=": ("not_equal", np.not_equal), "<": ("less", np.less), "<=": ("less_equal", np.less_equal),
    ">": ("greater", np.greater), ">=": ("greater_equal", np.greater_equal),
}


def roundtrip(e):
    """Print and parse back; the result must be structurally equal."""
    back = parse_expr(astext(e))
    assert_structural_equal(e, back, map_free_vars=True)
    return back


@pytest.mark.parametrize("sym", list(OPERATORS))
def test_each_operator_is_its_op_with_default_attributes(sym):
    name, _ = OPERATORS[sym]
    x, y = Var("x"), Var("y")
    e = parse_expr(f"%x {sym} %y", free_vars=[x, y])
    assert isinstance(e, Call) and e.op == Op(name) and e.args == (x, y)
    assert_structural_equal(e, parse_expr(f"{name}(%x, %y)", free_vars=[x, y]))
    assert e.get_span().column == 4  # located at the operator
    roundtrip(e)


@pytest.mark.parametrize("sym", list(OPERATORS))
def test_each_operator_computes_what_numpy_does(sym):
    _, ref = OPERATORS[sym]
    rng = np.random.default_rng(7)
    a = rng.uniform(-4, 4, size=(2, 3)).astype("float32")
    b = (rng.uniform(0.5, 3, size=(2, 3)) * rng.choice([-1, 1], size=(2, 3))).astype("float32")
    b[0, 0] = a[0, 0]  # exercise the equality operators on an equal pair
    t = "Tensor[(2, 3), float32]"
    mod = parse(HEADER + f"def @main(%a: {t}, %b: {t}) {{ %a {sym} %b }}")
    got = autorelay.evaluate(autorelay.infer_types(mod), a, b)
    np.testing.assert_allclose(np.asarray(got), ref(a, b), rtol=1e-6)


def test_integer_remainder_pairs_with_truncating_division():
    t = "Tensor[(4), int32]"
    mod = parse(HEADER + f"def @main(%a: {t}, %b: {t}) {{ (%a / %b, %a % %b, (%a / %b) * %b + %a % %b) }}")
    a = np.array([7, -7, 7, -7], dtype="int32")
    b = np.array([3, 3, -3, -3], dtype="int32")
    q, r, back = (np.asarray(v) for v in autorelay.evaluate(autorelay.infer_types(mod), a, b))
    np.testing.assert_array_equal(q, np.trunc(a / b).astype("int32"))  # C division, not Python's //
    np.testing.assert_array_equal(r, np.fmod(a, b))  # sign of the dividend, not Python's %
    assert r.tolist() == [1, -1, 1, -1]
    np.testing.assert_array_equal(back, a)


@pytest.mark.parametrize(
    ("text", "explicit"),
    [
        ("1 * 1 + 1 < 1 == 1", "(((1 * 1) + 1) < 1) == 1"),  # Relay's test_op_assoc
        ("1 == 1 < 1 + 1 * 1", "1 == (1 < (1 + (1 * 1)))"),
        ("1 - 2 - 3", "(1 - 2) - 3"),  # left-associative
        ("8 / 4 / 2", "(8 / 4) / 2"),
        ("1 + 2 * 3 - 4", "(1 + (2 * 3)) - 4"),
        ("7 % 4 * 2", "(7 % 4) * 2"),
        ("1 < 2 == 3 > 4", "(1 < 2) == (3 > 4)"),
        ("1 != 2 == True", "(1 != 2) == True"),
    ],
)
def test_precedence_and_associativity(text, explicit):
    assert_structural_equal(parse_expr(text), parse_expr(explicit))


def test_parentheses_change_the_grouping():
    assert not structural_equal(parse_expr("1 * 1 + 1"), parse_expr("1 * (1 + 1)"))
    assert not structural_equal(parse_expr("1 - 2 - 3"), parse_expr("1 - (2 - 3)"))


@pytest.mark.parametrize(
    ("text", "value"),
    [("1 + 2 * 3 - 4", 3), ("(1 + 2) * 3 - 4", 5), ("20 - 10 - 3", 7), ("2 * -3 + 1", -5),
     ("-7 % 3", -1), ("-7 / 2", -3), ("10 / 3", 3), ("1 - -1", 2), ("3-1", 2), ("--10", 10), ("---10", -10)],
)
def test_integer_arithmetic_evaluates_like_python(text, value):
    e = parse_expr(text)
    assert infer_expr(e) == TensorType((), "int32")
    assert int(np.asarray(autorelay.evaluate(e))) == value


def test_operators_mix_with_calls_projections_and_control_flow():
    x = Var("x", TupleType((F32, F32)))
    e = parse_expr("free_var %x: (float32, float32); "
                   "if (%x.0 < %x.1) { %x.1 - %x.0 } else { negative(%x.0) * 2f + 1f }", free_vars=[x])
    roundtrip(e)
    fn = autorelay.ir.Function((x,), e)
    assert infer_expr(fn) == FuncType((TupleType((F32, F32)),), F32)
    assert float(np.asarray(autorelay.evaluate(fn, (np.float32(1.5), np.float32(4.0))))) == 2.5
    assert float(np.asarray(autorelay.evaluate(fn, (np.float32(3.0), np.float32(1.0))))) == -5.0


def test_unary_minus_is_only_for_literals():
    c = parse_expr("-2.5f")
    assert isinstance(c, Constant) and c.data.item() == -2.5
    with pytest.raises(ParseError) as err:
        parse_expr("free_var %x: float32;\n-%x")
    assert "unary minus applies only to number literals" in err.value.message
    assert (err.value.line, err.value.column) == (2, 1)


def test_a_dangling_operator_is_located():
    with pytest.raises(ParseError) as err:
        parse_expr("1 +\n")
    assert "expected an expression, found end of input" in err.value.message
    with pytest.raises(ParseError) as err:
        parse_expr("1 + * 2")
    assert (err.value.line, err.value.column) == (1, 5)


def test_operator_shapes_are_type_checked_at_the_operator():
    mod = parse(HEADER + "def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(4), float32]) {\n  %a + %b\n}")
    with pytest.raises(autorelay.TypeCheckError) as err:
        autorelay.infer_types(mod)
    assert "add: cannot broadcast" in str(err.value) and ":3:6:" in str(err.value)  # line 3: the header is 1


def test_long_chains_do_not_recurse():
    e = parse_expr(" + ".join(["1"] * 5000))
    assert isinstance(e, Call) and e.op == Op("add")
    assert int(np.asarray(autorelay.evaluate(e))) == 5000
