"""Variable names with dots (`%input.1`, `%conv1.weight`, as PyTorch imports name them) next to
tuple projections (`%t.0`, `%0.1`): the parser reads a dotted token as the longest bound name plus
digit projections, and the printer writes text that reads back to the same program."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autorelay.errors import ParseError
from autorelay.ir import Function, Let, TensorType, Tuple, TupleGetItem, Var
from autorelay.ir.printer import astext
from autorelay.ir.structural import assert_structural_equal
from autorelay.ir.types import TupleType
from autorelay.text_format import parse, parse_expr

T = TensorType((2, 3), "float32")
PAIR = TupleType((T, T))

TORCH_STYLE = """#[version = "0.0.5"]
def @main(%input.1: Tensor[(2, 3), float32], %conv1.weight: Tensor[(2, 3), float32],
          %t: (Tensor[(2, 3), float32], (Tensor[(2, 3), float32], Tensor[(2, 3), float32]))) {
  %0 = add(%input.1, %conv1.weight);
  %1 = (%0, %t.0);
  %2 = add(%1.1, %t.1.0);
  multiply(%2, %0)
}"""


def test_dotted_parameter_names_parse_and_projections_still_project():
    fn = parse(TORCH_STYLE)["main"]
    inp, weight, t = fn.params
    assert (inp.name_hint, weight.name_hint, t.name_hint) == ("input.1", "conv1.weight", "t")
    body = fn.body  # multiply(%2, %0)
    two, zero = body.args
    assert zero.args[0] is inp and zero.args[1] is weight
    lhs, rhs = two.args  # %1.1 and %t.1.0
    assert isinstance(lhs, TupleGetItem) and lhs.index == 1 and isinstance(lhs.tuple_value, Tuple)
    assert lhs.tuple_value.fields[0] is zero  # %1 = (%0, %t.0): graph binding, then projection
    proj = lhs.tuple_value.fields[1]
    assert isinstance(proj, TupleGetItem) and proj.index == 0 and proj.tuple_value is t
    assert isinstance(rhs, TupleGetItem) and rhs.index == 0
    assert isinstance(rhs.tuple_value, TupleGetItem) and rhs.tuple_value.index == 1
    assert rhs.tuple_value.tuple_value is t


def test_longest_bound_name_wins_and_parentheses_force_a_projection():
    fn = parse_expr("fn (%x: (Tensor[(2), float32], Tensor[(2), float32]), %x.0: Tensor[(2), float32]) "
                    "{ (%x.0, (%x).0, %x.1, %x .0) }")
    x, x0 = fn.params
    named, paren, plain, spaced = fn.body.fields
    assert named is x0
    for p, i in ((paren, 0), (plain, 1), (spaced, 0)):
        assert isinstance(p, TupleGetItem) and p.tuple_value is x and p.index == i


def test_let_bound_dotted_name_and_graph_binding_projection():
    e = parse_expr("fn (%p: (Tensor[(2), float32], Tensor[(2), float32])) {"
                   " %0 = (%p.1, %p.0); let %out.3 = %0.1; (%out.3, %0.0) }")
    let = e.body
    assert isinstance(let, Let) and let.var.name_hint == "out.3"
    assert isinstance(let.value, TupleGetItem) and let.value.index == 1
    assert let.body.fields[0] is let.var
    assert let.body.fields[1].tuple_value is let.value.tuple_value


def test_unknown_dotted_name_is_a_located_error():
    text = "fn (%conv1.weight: Tensor[(2), float32]) {\n  add(%conv1.weight, %conv1.bias)\n}"
    with pytest.raises(ParseError, match=r"unknown variable %conv1\.bias") as info:
        parse_expr(text)
    assert (info.value.line, info.value.column) == (2, 22)


def test_binding_a_name_that_reads_as_a_graph_projection_is_refused():
    with pytest.raises(ParseError, match=r"cannot bind %0\.1.*projection 1 of %0") as info:
        parse_expr("fn (%0.1: Tensor[(2), float32]) { %0.1 }")
    assert info.value.column == 5
    with pytest.raises(ParseError, match=r"cannot bind %2\.0") as info:
        parse_expr("fn (%x: Tensor[(2), float32]) {\n  %2.0 = add(%x, %x);\n  %2.0\n}")
    assert (info.value.line, info.value.column) == (2, 3)


def _roundtrip(e):
    text = astext(e)
    back = parse_expr(text)
    assert_structural_equal(back, e)
    assert astext(back) == text
    return text, back


def test_printer_keeps_dotted_names():
    a, w = Var("input.1", T), Var("conv1.weight", T)
    text, back = _roundtrip(Function((a, w), Tuple((a, w))))
    assert "%input.1: Tensor" in text and "%conv1.weight: Tensor" in text
    assert [p.name_hint for p in back.params] == ["input.1", "conv1.weight"]


def test_printer_parenthesises_a_projection_a_variable_would_capture():
    x, x0 = Var("x", PAIR), Var("x.0", T)
    text, _ = _roundtrip(Function((x, x0), Tuple((TupleGetItem(x, 0), x0, TupleGetItem(x, 1)))))
    assert "(%x).0" in text and "%x.1" in text


def test_printer_renames_a_variable_bound_after_its_name_was_printed_as_a_projection():
    x, inner = Var("x", PAIR), Var("x.0", T)
    late = Function((inner,), inner)  # printed after `%x.0` (the projection) appeared
    e = Function((x,), Tuple((TupleGetItem(x, 0), late)))
    text, back = _roundtrip(e)
    assert "%x.0_1" in text
    assert back.body.fields[0].tuple_value is back.params[0]


SANITISED = [("a..b", "a__b"), ("1.weight", "v1.weight"), ("x-y.1", "x_y.1"), (".5", "_5"), ("", "v"),
             ("7", "v7"), ("layer.0.bn", "layer.0.bn")]


@pytest.mark.parametrize(("hint", "printed"), SANITISED)
def test_printer_sanitises_names_the_parser_could_not_read(hint, printed):
    v = Var(hint, T)
    text, back = _roundtrip(Function((v,), v))
    assert f"%{printed}: Tensor" in text and back.params[0].name_hint == printed


_SEGMENT = st.sampled_from(["x", "0", "1", "w", "_", "12", "a1"])
_HINT = st.lists(_SEGMENT, min_size=1, max_size=3).map(".".join)


@settings(max_examples=60, deadline=None)
@given(hints=st.lists(_HINT, min_size=1, max_size=5),
       tuple_mask=st.lists(st.booleans(), min_size=5, max_size=5),
       picks=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1)), min_size=1, max_size=8))
def test_random_dotted_names_round_trip(hints, tuple_mask, picks):
    """Parameters with dotted, digit-ish names, some of them tuples, used directly and projected."""
    params = [Var(h, PAIR if tuple_mask[i] else T) for i, h in enumerate(hints)]
    fields = []
    for k, idx in picks:
        p = params[k % len(params)]
        fields.append(TupleGetItem(p, idx) if isinstance(p.type_annotation, TupleType) else p)
    _roundtrip(Function(tuple(params), Tuple(tuple(fields + params))))
