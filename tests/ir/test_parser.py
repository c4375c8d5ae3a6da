"""The Relay text parser: every piece of syntax builds the IR it should, and bad text is located."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.errors import ParseError
from autorelay.ir import (
    AnyDim,
    Call,
    Constant,
    Constructor,
    Function,
    FuncType,
    GlobalVar,
    If,
    IncompleteType,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefType,
    RefWrite,
    SymDim,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    TypeCall,
    TypeVar,
    Var,
)
from autorelay.text_format import parse, parse_expr


def main_body(text: str, **kw):
    return parse(text, **kw)["main"].body


@pytest.mark.parametrize(
    ("lit", "dtype", "value"),
    [
        ("1f", "float32", 1.0), ("2.5f", "float32", 2.5), ("2.5f16", "float16", 2.5),
        ("-3i64", "int64", -3), ("1.5f64", "float64", 1.5), ("True", "bool", True),
        ("False", "bool", False), ("1", "int32", 1), ("1.5", "float32", 1.5), ("7u8", "uint8", 7),
        ("1e-05f", "float32", 1e-05), ("-0.25f", "float32", -0.25), ("-12", "int32", -12),
    ],
)
def test_scalar_literals(lit, dtype, value):
    c = parse_expr(lit)
    assert isinstance(c, Constant)
    assert c.data.shape == () and str(c.data.dtype) == dtype
    assert c.data.item() == np.array(value, dtype=dtype).item()


def test_types_of_parameters():
    fn = parse(
        "def @main(%a: Tensor[(?, 3), float32], %b: Tensor[(n, 3), int8], %c: float16,"
        " %d: (float32, Tensor[(2), bool]), %e: (int32,), %f: (), %g: fn (float32) -> (float32, float32),"
        " %h: Ref[float32], %i: _) { %a }"
    )["main"]
    t = [p.type_annotation for p in fn.params]
    assert t[0] == TensorType((AnyDim(), 3), "float32")
    assert t[1] == TensorType((SymDim("n"), 3), "int8")
    assert t[2] == TensorType((), "float16")
    assert t[3] == TupleType((TensorType((), "float32"), TensorType((2,), "bool")))
    assert t[4] == TupleType((TensorType((), "int32"),))
    assert t[5] == TupleType(())
    assert t[6] == FuncType((TensorType((), "float32"),), TupleType((TensorType(()),) * 2))
    assert t[7] == RefType(TensorType(()))
    assert isinstance(t[8], IncompleteType)


def test_graph_bindings_share_nodes_and_lets_do_not():
    body = main_body(
        "def @main(%x: float32) {\n  %0 = add(%x, %x);\n  let %y = multiply(%0, %0);\n  (%0, %y)\n}"
    )
    assert isinstance(body, Let) and body.var.name_hint == "y"
    mul = body.value
    assert isinstance(mul, Call) and mul.op == Op("multiply")
    assert mul.args[0] is mul.args[1]  # `%0` twice is one node
    tup = body.body
    assert isinstance(tup, Tuple) and tup.fields[0] is mul.args[0] and tup.fields[1] is body.var


def test_op_call_attrs_are_validated_and_defaulted():
    call = main_body(
        "def @main(%x: Tensor[(1, 3, 8, 8), float32], %w) {"
        " nn.conv2d(%x, %w, padding=[1, 1], channels=64, kernel_size=[3, 3], data_layout=\"NCHW\") }"
    )
    assert isinstance(call, Call) and call.op == Op("nn.conv2d")
    assert call.attrs["channels"] == 64 and call.attrs["kernel_size"] == (3, 3)
    assert call.attrs["data_layout"] == "NCHW"
    assert call.attrs["groups"] == 1  # a default filled in by the op's schema


@pytest.mark.parametrize("attrs, message", [
    ('keepdims="no"', "attribute keepdims must be a bool, got 'no'"),  # a truthy string is no flag
    ("keepdims=[1]", r"attribute keepdims must be a bool, got \(1,\)"),
    ('exclude=2', "attribute exclude must be a bool, got 2"),
])
def test_an_attribute_of_the_wrong_kind_is_refused_where_it_is_written(attrs, message):
    with pytest.raises(ParseError, match=rf"1:\d+: bad attributes for sum: {message}"):
        parse(f"def @main(%x: Tensor[(2, 3), float32]) {{ sum(%x, axis=[1], {attrs}) }}")
    flag = main_body("def @main(%x: Tensor[(2, 3), float32]) { sum(%x, axis=[1], keepdims=1) }")
    assert flag.attrs["keepdims"]  # 0 and 1 stay flags (importers pass ONNX's integer flags)


def test_attribute_value_kinds():
    f = parse_expr('fn (%x, A=1, B=-2.5f, C="s\\"q", D=True, E=[1, [2, 3]], F=None, G=()) { %x }')
    assert isinstance(f, Function)
    assert dict(f.attrs) == {"A": 1, "B": -2.5, "C": 's"q', "D": True, "E": (1, (2, 3)), "F": None, "G": ()}
    assert isinstance(f.attrs["B"], float) and isinstance(f.attrs["A"], int)


def test_functions_closures_and_calls():
    mod = parse(
        """
        def @id[A](%x: A) -> A { %x }
        def @main(%y: float32) {
          let %f = fn (%z: float32, Primitive=1) -> float32 { add(%z, %y) };
          let %g = fn [B](%b: B) -> B { %b };
          (%f(%y), (fn (%w) { %w })(%y), @id(%y), %g(1f))
        }
        """
    )
    ident = mod["id"]
    assert ident.type_params == (TypeVar("A"),) and ident.ret_type == TypeVar("A")
    let_f = mod["main"].body
    f = let_f.value
    assert f.is_primitive and f.body.args[1] is mod["main"].params[0]  # the closure captures %y
    let_g = let_f.body
    assert let_g.value.type_params == (TypeVar("B"),)
    calls = let_g.body.fields
    assert calls[0].op is let_f.var
    assert isinstance(calls[1].op, Function)
    assert calls[2].op == GlobalVar("id")
    assert calls[3].op is let_g.var


def test_if_tuples_projections_and_refs():
    e = parse_expr(
        "fn (%c: bool, %t: (float32, (float32, float32))) {"
        " let %r = ref(%t.1.0); let %u = ref_write(%r, 2f);"
        " if (%c) { ref_read(%r) } else if (%c) { (%t.0,) } else { () } }"
    )
    let_r = e.body
    assert isinstance(let_r.value, RefCreate)
    proj = let_r.value.value
    assert isinstance(proj, TupleGetItem) and proj.index == 0 and proj.tuple_value.index == 1
    assert isinstance(let_r.body.value, RefWrite)
    branch = let_r.body.body
    assert isinstance(branch, If) and isinstance(branch.true_branch, RefRead)
    assert isinstance(branch.false_branch, If)
    one = branch.false_branch.true_branch
    assert isinstance(one, Tuple) and len(one.fields) == 1
    assert branch.false_branch.false_branch.fields == ()


def test_adts_and_match():
    mod = parse(
        """
        def @len[A](%xs: MyList[A]) -> int32 {
          match (%xs) {
            MyCons(_, %rest) => add(1, @len(%rest)),
            MyNil => 0,
          }
        }
        type MyList[A] { MyCons(A, MyList[A]), MyNil, }
        def @pair(%p: (MyList[float32], MyList[float32])) {
          match? (%p) { (MyCons(%a: float32, _), %b) => %a, }
        }
        """
    )
    td = mod.get_type("MyList")
    cons, nil = td.constructors
    assert td.type_vars == (TypeVar("A"),)
    assert cons.inputs == (TypeVar("A"), TypeCall(td.header, (TypeVar("A"),)))
    assert cons.tag == 0 and nil.tag == 1
    m = mod["len"].body
    assert isinstance(m, Match) and m.complete
    pat = m.clauses[0].lhs
    assert isinstance(pat, PatternConstructor) and pat.constructor == cons
    assert isinstance(pat.patterns[0], PatternWildcard) and isinstance(pat.patterns[1], PatternVar)
    assert m.clauses[0].rhs.args[1].args[0] is pat.patterns[1].var
    assert isinstance(m.clauses[1].rhs, Constant)
    m2 = mod["pair"].body
    assert not m2.complete and isinstance(m2.clauses[0].lhs, PatternTuple)
    assert m2.clauses[0].lhs.patterns[0].patterns[0].var.type_annotation == TensorType(())


def test_constructor_values_and_relay_tuple_match_syntax():
    e = parse_expr("match (Some(1f), None) { (Some(%x), None) => %x, _ => 0f, }", prelude=True)
    assert isinstance(e.data, Tuple)
    some = e.data.fields[0]
    assert isinstance(some.op, Constructor) and some.op.name == "Some"
    assert isinstance(e.data.fields[1], Constructor)


def test_meta_constants_from_argument_and_shared():
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    body = main_body("def @main() { (meta[relay.Constant][0], meta[relay.Constant][0]) }", constants=[arr])
    assert body.fields[0] is body.fields[1]
    np.testing.assert_array_equal(body.fields[0].data, arr)


def test_comments_and_header_are_skipped():
    mod = parse(
        '#[version = "0.0.5"]\n// a line comment\ndef @main(%x /* ty=float32 */) {\n'
        "  /* a block\n comment */ %x // trailing\n}\n"
    )
    assert isinstance(mod["main"].body, Var)


def test_parse_expr_free_vars():
    x = Var("x")
    e = parse_expr("add(%x, 1f)", free_vars=[x])
    assert e.args[0] is x


def test_spans_point_into_the_source():
    body = main_body("def @main(%x) {\n  %0 = add(%x, %x);\n  multiply(%0, 2f)\n}", source="m.relay")
    sp = body.args[0].get_span()
    assert (sp.source, sp.line, sp.column) == ("m.relay", 2, 8)


# ---- errors ------------------------------------------------------------------------------------

ERRORS = [
    ("def @main(%x) {\n  add(%x, %x\n}", 3, 1, "expected ')'"),
    ("def @main(%x) { add(%x, $) }", 1, 25, "unexpected character '$'"),
    ("def @main(%x) {\n  /* never closed\n  %x\n}", 2, 3, "unterminated comment"),
    ("def @main(%x) { nn.conv3x(%x) }", 1, 17, "unknown operator nn.conv3x"),
    ("def @main(%x) {\n  add(%x, %why)\n}", 2, 11, "unknown variable %why"),
    ("def @main(%x) { Foo(%x) }", 1, 17, "unknown constructor Foo"),
    ("def @main(%x) { match (%x) { Bar(%y) => %y } }", 1, 30, "unknown constructor Bar"),
    ("def @main(%x, %w) { nn.conv2d(%x, %w, chanels=3) }", 1, 39, "no attribute 'chanels'"),
    ("def @main(%x, %w) { nn.conv2d(%x, %w, channels=) }", 1, 48, "expected an attribute value"),
    ("def @main(%x) { add(%x) }", 1, 17, "add takes 2 argument(s)"),
    ("def @main(%x: Tensor[(1, 2), floaty]) { %x }", 1, 30, "expected a dtype"),
    ("def @main(%x: Foo) { %x }", 1, 15, "unknown type 'Foo'"),
    ("def @main(%x) { @nope(%x) }", 1, 17, "unknown global @nope"),
    ("def @main(%x) { let %y = %x }", 1, 29, "expected ';'"),
    ("def @main(%x) { add(%x, 300i8) }", 1, 25, "does not fit in int8"),
    ("def @main(%x) { 1.5i32 }", 1, 17, "fractional part"),
    ("def @main(%x) { %x ", 1, 15, "missing '}'"),
    ("fn @main(%x) { %x }", 1, 1, "expected 'def' or 'type'"),
    ('#[version = "0.0.9"]\ndef @main(%x) { %x }', 1, 13, "unsupported text format version"),
    ('def @main(%x) { "abc }', 1, 17, "unterminated string"),
    ("def @main() { meta[relay.Constant][0] }", 1, 36, "0 constant(s) were supplied"),
    ("type L { C(float32), C, }", 1, 22, "constructor C is defined twice"),
    ("type L { C(float32) }\ndef @main() { C(1f, 2f) }", 2, 15, "takes 1 argument(s)"),
    ("def @main(%x) { add(%x, %x, axis=1) }", 1, 29, "no attribute 'axis'"),
    ("def @main(%x: float32, %x: float32) { %x }", 1, 24, "parameter %x is declared twice"),
    ("def @main(%x) { x }", 1, 17, "unknown operator x (did you mean the variable %x?)"),
    ("def @main(%x) { let %y = foo; %y }", 1, 26, "unknown operator foo (a local variable is written %foo"),
    ("def @main(%x) { reshape(%x, newshape=3.5) }", 1, 17,
     "bad attributes for reshape: cannot take newshape=3.5: "),  # the op's own check, in Python's words
]


@pytest.mark.parametrize(("text", "line", "col", "msg"), ERRORS)
def test_parse_errors_are_located(text, line, col, msg):
    with pytest.raises(ParseError) as info:
        parse(text, source="bad.relay")
    err = info.value
    assert msg in err.message
    assert (err.line, err.column) == (line, col)
    shown = str(err).splitlines()
    assert shown[0].startswith(f"bad.relay:{line}:{col}: ")
    assert shown[1].strip() == text.splitlines()[line - 1].strip()
    assert shown[2].index("^") - 2 == col - 1  # the caret sits under the column


def test_bad_metadata_is_a_parse_error():
    with pytest.raises(ParseError, match="bad #\\[metadata\\]"):
        parse("def @main() { meta[relay.Constant][0] }\n#[metadata]\n{not json")


def test_a_let_value_reading_its_own_variable_is_located():
    """A let variable is in scope in its value so that a closure can call itself; any other value
    reading it (`let %a = multiply(%a, 2f)`, meaning the previous %a) is named at the let, where it
    used to fail type inference with "type of lhs not known yet"."""
    src = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float32]) {\n'
           '  let %a = add(%x, 1f);\n  let %a = multiply(%a, 2f);\n  %a\n}')
    with pytest.raises(ParseError, match="%a is read in its own let value") as info:
        parse(src)
    assert (info.value.line, info.value.column) == (4, 3)
    recursive = ('#[version = "0.0.5"]\ndef @main(%x: Tensor[(3), float32]) {\n'
                 '  let %f = fn (%y: Tensor[(3), float32]) -> Tensor[(3), float32] { %f(%y) };\n  %f\n}')
    parse(recursive)  # a closure may name itself
