"""Type checking programs written in the text format: inference end to end, and located errors."""

import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir import FuncType, TensorType, TupleType, TypeCall, TypeVar
from autorelay.ir.visitor import post_order
from autorelay.typing import infer_types

parser = pytest.importorskip("autorelay.text_format")

HEADER = '#[version = "0.0.5"]\n'

LISTS = HEADER + """
type List[A] { Cons(A, List[A]), Nil, }

def @map[A, B](%f: fn (A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil,
  }
}

def @foldl[A, B](%f: fn (A, B) -> A, %acc: A, %xs: List[B]) -> A {
  match (%xs) {
    Cons(%h, %t) => @foldl(%f, %f(%acc, %h), %t),
    Nil => %acc,
  }
}

def @sum(%xs) {
  @foldl(fn (%a, %b) { add(%a, %b) }, 0f, %xs)
}

def @main(%x: Tensor[(), float32], %y: Tensor[(), float32]) {
  let %doubled = @map(fn (%v) { multiply(%v, 2f) }, Cons(%x, Cons(%y, Nil)));
  let %flags = @map(fn (%v) { less(%v, 1f) }, %doubled);
  (@sum(%doubled), %flags)
}
"""


def test_higher_order_polymorphic_list_functions():
    mod = parser.parse(LISTS)
    infer_types(mod)
    f32, bool_ = TensorType((), "float32"), TensorType((), "bool")
    lst = lambda t: TypeCall(mod.get_type("List").header, (t,))
    assert mod["main"].checked_type == FuncType((f32, f32), TupleType((f32, lst(bool_))))
    assert mod["sum"].checked_type == FuncType((lst(f32),), f32)
    a, b = TypeVar("A"), TypeVar("B")
    assert mod["map"].checked_type == FuncType((FuncType((a,), b), lst(a)), lst(b), (a, b))
    nil = mod.get_constructor("Nil")
    assert nil.checked_type == lst(a)  # shared by all its uses: the generic value type
    for fn in mod.functions.values():
        assert all(node.has_checked_type for node in post_order(fn))


def located(src):
    with pytest.raises(TypeCheckError) as info:
        infer_types(parser.parse(src))
    err = info.value
    assert err.span is not None, str(err)
    line = src.splitlines()[err.span.line - 1]
    return err, line


def test_op_error_points_at_the_call():
    src = HEADER + """def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 5, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1]);
  add(%0, 1f)
}
"""
    err, line = located(src)
    assert err.span.line == 3 and "nn.conv2d(" in line[err.span.column - 1:]
    assert "nn.conv2d" in str(err) and "(4, 5, 3, 3)" in str(err) and ":3:" in str(err)


def test_non_bool_condition_points_into_the_if():
    src = HEADER + """def @main(%x: Tensor[(2, 2), float32]) {
  if (%x) { %x } else { %x }
}
"""
    err, _ = located(src)
    assert err.span.line == 3 and "condition must be a bool scalar" in str(err)


def test_branch_mismatch_from_text():
    src = HEADER + """def @main(%c: bool, %x: Tensor[(2, 2), float32], %y: Tensor[(2, 3), float32]) {
  if (%c) { %x } else { %y }
}
"""
    err, _ = located(src)
    assert "branches" in str(err) and "dimension 1: 2 vs 3" in str(err)


def test_projection_out_of_range_from_text():
    src = HEADER + """def @main(%x: Tensor[(2, 3), float32]) {
  let %t = (%x, %x);
  %t.2
}
"""
    err, _ = located(src)
    assert err.span.line == 4 and ".2" in str(err)


def test_wrong_adt_pattern_from_text():
    src = HEADER + """type List[A] { Cons(A, List[A]), Nil, }
type Option[A] { Some(A), None, }
def @main(%o: Option[Tensor[(3), float32]]) -> int32 {
  match (%o) {
    Some(_) => 1,
    Nil => 0,
  }
}
"""
    with pytest.raises(TypeCheckError, match=r"pattern Nil \(a constructor of type List\)"):
        infer_types(parser.parse(src))
