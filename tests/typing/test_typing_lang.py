"""Typing of the language constructs: functions and closures, calls, let, if, tuples, references."""

import re

import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir import (
    Call,
    Function,
    FuncType,
    GlobalVar,
    If,
    IRModule,
    Let,
    RefCreate,
    RefRead,
    RefType,
    RefWrite,
    Span,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    TypeVar,
    Var,
    const,
)
from autorelay.ir.types import AnyDim
from autorelay.ir.visitor import post_order
from autorelay.op.registry import call
from autorelay.typing import infer_expr, infer_types

F32_3 = TensorType((3,), "float32")
I32 = TensorType((), "int32")
BOOL = TensorType((), "bool")


def main(params, body, ret=None):
    return IRModule({"main": Function(tuple(params), body, ret)})


def test_every_node_gets_a_checked_type():
    x = Var("x", F32_3)
    f = Var("f")
    y = Var("y")
    inner = Function((y,), call("add", x, y))
    body = Let(f, inner, Call(f, (x,)))
    fn = Function((x,), body)
    infer_types(IRModule({"main": fn}))
    for node in post_order(fn):
        assert node.has_checked_type, node
    assert inner.checked_type == FuncType((F32_3,), F32_3)
    assert fn.checked_type == FuncType((F32_3,), F32_3)
    assert y.checked_type == F32_3  # learned from the call %f(%x), after add had to wait


def test_closure_returned_from_a_global_and_called():
    x, y = Var("x", F32_3), Var("y", F32_3)
    adder = Function((x,), Function((y,), call("add", x, y)))
    a, b = Var("a", F32_3), Var("b", F32_3)
    use = Call(Call(GlobalVar("make_adder"), (a,)), (b,))
    mod = IRModule({"make_adder": adder, "main": Function((a, b), use)})
    infer_types(mod)
    assert adder.checked_type == FuncType((F32_3,), FuncType((F32_3,), F32_3))
    assert use.checked_type == F32_3


def test_recursive_let_bound_closure():
    i = Var("i", I32)
    loop = Var("loop")
    step = If(call("less", i, const(10)), Call(loop, (call("add", i, const(1)),)), i)
    body = Let(loop, Function((i,), step, I32), Call(loop, (const(0),)))
    mod = main([], body)
    infer_types(mod)
    assert loop.checked_type == FuncType((I32,), I32)
    assert mod["main"].checked_type == FuncType((), I32)


def test_call_arity_mismatch():
    x = Var("x", F32_3)
    p = Var("p", F32_3)
    f = Function((p, Var("q", F32_3)), p)
    mod = IRModule({"f": f, "main": Function((x,), Call(GlobalVar("f"), (x,)))})
    with pytest.raises(TypeCheckError, match=r"call of @f: expects 2 argument\(s\), got 1"):
        infer_types(mod)


def test_call_argument_mismatch_names_argument_and_shapes():
    x = Var("x", TensorType((4,), "float32"))
    p = Var("p", F32_3)
    mod = IRModule({"f": Function((p,), p), "main": Function((x,), Call(GlobalVar("f"), (x,)))})
    msg = r"call of @f: argument 0.*Tensor\[\(3,?\).*Tensor\[\(4,?\).*3 vs 4"
    with pytest.raises(TypeCheckError, match=msg):
        infer_types(mod)


def test_calling_a_non_function():
    x = Var("x", F32_3)
    with pytest.raises(TypeCheckError, match="callee is not a function"):
        infer_types(main([x], Call(x, (x,))))


def test_if_condition_must_be_a_bool_scalar():
    x = Var("x", F32_3)
    c = Var("c", TensorType((3,), "bool"))
    node = If(c, x, x).with_span(Span("prog.relay", 2, 5))
    msg = r"bool scalar Tensor\[\(\), bool\], got Tensor\[\(3,?\), bool\]"
    with pytest.raises(TypeCheckError, match=msg) as e:
        infer_types(main([x, c], node))
    assert e.value.span == Span("prog.relay", 2, 5)
    f = Var("f", TensorType((), "float32"))
    with pytest.raises(TypeCheckError, match="got " + re.escape(str(TensorType((), "float32")))):
        infer_types(main([x, f], If(f, x, x)))


def test_if_branches_must_agree():
    c = Var("c", BOOL)
    a, b = Var("a", F32_3), Var("b", TensorType((3,), "int32"))
    msg = r"if: the branches have different types.*dtype float32 vs int32"
    with pytest.raises(TypeCheckError, match=msg):
        infer_types(main([c, a, b], If(c, a, b)))


def test_if_types_are_unknown_where_their_branches_differ():
    """A detector's `if no boxes: empty (0, 4) else: the boxes (?, 4)` is typed (?, 4), not the
    then-branch's (0, 4): that would promise no rows where the else-branch may give many."""
    from autorelay import parse

    mod = infer_types(parse("""#[version = "0.0.5"]
def @main(%c: bool, %x: Tensor[(?, 4), float32], %y: Tensor[(3, 4), float32]) {
  %0 = if (%c) { (zeros(shape=[0, 4], dtype="float32"), %y) } else { (%x, %y) };
  %1 = if (%c) { %y } else { zeros(shape=[3, 4], dtype="float32") };
  (%0, %1)
}"""))
    rows, y = TensorType((AnyDim(), 4)), TensorType((3, 4))
    assert mod["main"].checked_type.ret_type == TupleType((TupleType((rows, y)), y))


def test_if_unannotated_condition_becomes_bool():
    c, a = Var("c"), Var("a", F32_3)
    mod = main([c, a], If(c, a, a))
    infer_types(mod)
    assert c.checked_type == BOOL


def test_tuples_and_projections():
    a, b = Var("a", F32_3), Var("b", I32)
    t = Tuple((a, b))
    mod = main([a, b], Tuple((TupleGetItem(t, 1), TupleGetItem(t, 0))))
    infer_types(mod)
    assert t.checked_type == TupleType((F32_3, I32))
    assert mod["main"].body.checked_type == TupleType((I32, F32_3))


def test_projection_out_of_range_names_index_and_type():
    a, b = Var("a", F32_3), Var("b", I32)
    with pytest.raises(TypeCheckError, match=r"projection \.2 out of range for tuple type .*2 field"):
        infer_types(main([a, b], TupleGetItem(Tuple((a, b)), 2)))
    with pytest.raises(TypeCheckError, match=r"projection \.0 of a value of non-tuple type Tensor"):
        infer_types(main([a], TupleGetItem(a, 0)))


def test_projection_of_a_tuple_parameter_learned_from_the_call():
    t = Var("t")
    g = Var("g")
    a, b = Var("a", F32_3), Var("b", I32)
    inner = Function((t,), TupleGetItem(t, 1))
    mod = main([a, b], Let(g, inner, Call(g, (Tuple((a, b)),))))
    infer_types(mod)
    assert inner.checked_type == FuncType((TupleType((F32_3, I32)),), I32)


def test_references():
    x = Var("x", F32_3)
    r = Var("r")
    w = RefWrite(r, call("add", RefRead(r), x))
    body = Let(r, RefCreate(x), Let(Var("u"), w, RefRead(r)))
    mod = main([x], body)
    infer_types(mod)
    assert r.checked_type == RefType(F32_3)
    assert w.checked_type == TupleType(())
    assert mod["main"].checked_type == FuncType((F32_3,), F32_3)


def test_reference_errors():
    x = Var("x", F32_3)
    y = Var("y", I32)
    with pytest.raises(TypeCheckError, match=r"ref_write: .*dtype float32 vs int32"):
        infer_types(main([x, y], RefWrite(RefCreate(x), y)))
    with pytest.raises(TypeCheckError, match="ref_read of a non-reference"):
        infer_types(main([x], RefRead(x)))


def test_let_annotation_conflict():
    x = Var("x", F32_3)
    v = Var("v", I32)
    with pytest.raises(TypeCheckError, match=r"let %v: annotated type vs value type"):
        infer_types(main([x], Let(v, x, v)))


def test_explicit_type_arguments_and_rigid_type_variables():
    a = TypeVar("A")
    p = Var("p", a)
    ident = Function((p,), p, a, (a,))
    x = Var("x", F32_3)
    explicit = Call(GlobalVar("id"), (x,), type_args=(F32_3,))
    infer_types(IRModule({"id": ident, "main": Function((x,), explicit)}))
    assert explicit.checked_type == F32_3
    wrong = Call(GlobalVar("id"), (x,), type_args=(I32,))
    with pytest.raises(TypeCheckError, match="call of @id: argument 0"):
        infer_types(IRModule({"id": ident, "main": Function((x,), wrong)}))
    # Inside its body, A is rigid: it is not a tensor.
    q = Var("q", a)
    bad = Function((q,), call("add", q, q), a, (a,))
    with pytest.raises(TypeCheckError, match="add"):
        infer_types(IRModule({"bad": bad}))


def test_infer_expr_on_a_closure_with_free_annotated_var():
    x = Var("x", F32_3)
    y = Var("y")
    f = Function((y,), call("multiply", x, y))
    t = infer_expr(Call(f, (x,)))
    assert t == F32_3
    assert f.checked_type == FuncType((F32_3,), F32_3)
