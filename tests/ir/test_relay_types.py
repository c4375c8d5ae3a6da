"""Type syntax from Relay's text format: the `int` alias, vector dtypes, `extern type`, and
mutually recursive ADTs with what Relay's kind checker rejects in them."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.errors import ParseError, TypeCheckError
from autorelay.ir import FuncType, GlobalTypeVar, RefType, TensorType, TupleType, TypeCall
from autorelay.ir.printer import astext
from autorelay.ir.structural import assert_structural_equal
from autorelay.text_format import parse, parse_expr

HEADER = '#[version = "0.0.5"]\n'
I32 = TensorType((), "int32")


def roundtrip(mod):
    text = astext(mod)
    back = parse(text)
    assert_structural_equal(mod, back)
    return text


# ---- the int alias -----------------------------------------------------------------------------


def test_int_is_int32_wherever_a_type_is_written():
    mod = parse(HEADER + """
        type Box[A] { MkBox(int, A) }
        def @f(%x: int, %t: Tensor[(2), int], %g: fn (int) -> (int, Ref[int]), %b: Box[int]) -> int {
          let %y: int = %x;
          %y
        }""")
    f = mod["f"]
    assert [p.type_annotation for p in f.params[:3]] == [
        I32, TensorType((2,), "int32"), FuncType((I32,), TupleType((I32, RefType(I32))))]
    assert f.params[3].type_annotation == TypeCall(GlobalTypeVar("Box"), (I32,))
    assert f.ret_type == I32 and f.body.var.type_annotation == I32
    assert next(iter(mod.type_definitions.values())).constructors[0].inputs[0] == I32
    text = roundtrip(mod)
    assert "int32" in text and ": int," not in text
    typed = autorelay.infer_types(mod)
    assert typed["f"].checked_type.ret_type == I32


def test_other_widthless_dtypes_default_to_32_bits_like_tvm():
    e = parse_expr("let %a: float = 1f; let %b: uint = 1u32; let %v: Tensor[(2), intx4] = %v; (%a, %b)")
    assert e.var.type_annotation == TensorType((), "float32")
    assert e.body.var.type_annotation == TensorType((), "uint32")
    assert e.body.body.var.type_annotation == TensorType((2,), "int32x4")


# ---- vector dtypes -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8x4", "float16x4", "uint8x16", "boolx8", "float32x2"])
def test_vector_dtypes_parse_print_and_type_check_shapes(dtype):
    mod = parse(HEADER + f"""
        def @main(%x: Tensor[(2, 3), {dtype}], %s: {dtype}) -> (Tensor[(3, 2), {dtype}], {dtype}) {{
          (transpose(%x), %s)
        }}""")
    assert mod["main"].params[0].type_annotation == TensorType((2, 3), dtype)
    assert mod["main"].params[1].type_annotation == TensorType((), dtype)
    text = roundtrip(mod)
    assert f"Tensor[(2, 3), {dtype}]" in text
    typed = autorelay.infer_types(mod)
    body = typed["main"].body
    assert body.fields[0].checked_type == TensorType((3, 2), dtype)
    assert f"Tensor[(3, 2), {dtype}]" in astext(typed, show_types=True)


def test_vector_shape_mismatches_are_type_errors():
    bad = parse(HEADER + "def @main(%x: Tensor[(2, 3), int8x4]) -> Tensor[(7), int8x4] {\n"
                         "  reshape(%x, newshape=[7])\n}")
    with pytest.raises(TypeCheckError, match="reshape"):
        autorelay.infer_types(bad)
    lanes = parse(HEADER + "def @main(%x: Tensor[(6), int8x4]) -> Tensor[(6), int8x8] { %x }")
    with pytest.raises(TypeCheckError, match=r"dtype int8x8 vs int8x4|dtype int8x4 vs int8x8"):
        autorelay.infer_types(lanes)


@pytest.mark.parametrize("bad", ["int8x1", "int8x", "int8x04", "int7x4", "complexx2"])
def test_malformed_vector_dtypes_are_located(bad):
    with pytest.raises(ParseError) as err:
        parse(HEADER + f"def @main(%x: Tensor[(2),\n  {bad}]) {{ %x }}")
    assert "expected a dtype" in err.value.message and (err.value.line, err.value.column) == (3, 3)
    with pytest.raises(ValueError, match="unknown dtype"):
        TensorType((2,), bad)


# ---- extern type -------------------------------------------------------------------------------


def test_extern_type_declares_an_adt_without_constructors():
    mod = parse(HEADER + """
        extern type Handle;
        extern type Box[A]
        type Pair[A] { MkPair(Box[A], Handle) }
        def @use(%h: Handle, %p: Pair[int]) -> Handle { %h }""")
    defs = {g.name: td for g, td in mod.type_definitions.items()}
    assert defs["Handle"].constructors == () and defs["Handle"].type_vars == ()
    assert defs["Box"].constructors == () and [v.name for v in defs["Box"].type_vars] == ["A"]
    assert mod["use"].params[0].type_annotation == TypeCall(GlobalTypeVar("Handle"), ())
    text = roundtrip(mod)
    assert "type Handle {}" in text and "type Box[A] {}" in text  # Relay prints both as empty types
    typed = autorelay.infer_types(mod)
    assert typed["use"].checked_type.ret_type == TypeCall(GlobalTypeVar("Handle"), ())


def test_extern_type_errors_are_located():
    with pytest.raises(ParseError) as err:
        parse(HEADER + "extern type T {\n  C }")
    assert "an extern type has no constructors" in err.value.message
    assert (err.value.line, err.value.column) == (2, 15)
    with pytest.raises(ParseError) as err:
        parse(HEADER + "extern type T;\ntype T { C }")
    assert "type T is defined twice" in err.value.message and (err.value.line, err.value.column) == (3, 6)
    with pytest.raises(ParseError, match="expected a type name after 'extern type'"):
        parse(HEADER + "extern type %x;")


# ---- mutually recursive ADTs -------------------------------------------------------------------

FOREST = HEADER + """
type Tree[A] { Node(A, Forest[A]) }
type Forest[A] { Empty, Trees(Tree[A], Forest[A]) }

def @size[A](%t: Tree[A]) -> int {
  match (%t) { Node(_, %f) => 1 + @forest_size(%f) }
}

def @forest_size[A](%f: Forest[A]) -> int {
  match (%f) {
    Empty => 0,
    Trees(%t, %rest) => @size(%t) + @forest_size(%rest),
  }
}

def @main(%x: float32) -> int {
  %leaf = fn (%v: float32) { Node(%v, Empty) };
  @size(Node(%x, Trees(%leaf(1f), Trees(Node(2f, Trees(%leaf(3f), Empty)), Empty))))
}
"""


def test_mutually_recursive_adts_parse_type_check_and_run():
    mod = parse(FOREST)  # Relay's parser accepts a type that refers to one defined further down
    roundtrip(mod)
    typed = autorelay.infer_types(mod)
    # The tree built in @main: a root with two children, the second of which has one child.
    assert int(np.asarray(autorelay.evaluate(typed, np.float32(0.5)))) == 4


@pytest.mark.parametrize(
    ("defs", "line", "col", "message"),
    [
        # Relay's kind checker: "Expected 1 arguments for Forest; got 0".
        ("type Tree[A] { Node(A, Forest) }\ntype Forest[A] { Empty, Trees(Tree[A], Forest[A]) }",
         2, 24, "type Forest takes 1 type argument(s), got 0"),
        ("type Tree[A] { Node(A, Forest[A]) }\ntype Forest[A] { Empty, Trees(Tree[A, A], Forest[A]) }",
         3, 31, "type Tree takes 1 type argument(s), got 2"),
        ("type A { MkA(B[int]) }\ntype B { MkB(A) }", 2, 14, "type B takes 0 type argument(s), got 1"),
        ("type Tree[A] { Node(A, Forest[A]) }", 2, 24, "unknown type 'Forest'"),
        ("type Tree[A] { Node(A[int], Forest[A]) }\ntype Forest[A] { Empty }", 2, 22,
         "type variable A cannot take type arguments"),
    ],
)
def test_what_relay_rejects_in_recursive_groups_is_located(defs, line, col, message):
    with pytest.raises(ParseError) as err:
        parse(HEADER + defs)
    assert message in err.value.message
    assert (err.value.line, err.value.column) == (line, col)


def test_type_arity_is_checked_in_annotations_too():
    with pytest.raises(ParseError) as err:
        parse(HEADER + "def @f(%xs: List) { %xs }", prelude=True)
    assert "type List takes 1 type argument(s), got 0" in err.value.message
    assert (err.value.line, err.value.column) == (2, 13)
