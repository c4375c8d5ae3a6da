"""The unifier and the relation solver, driven by test-only ops registered here.

The ops below stand in for real ones so the solver's protocol (return a type, return refined
argument types, raise NotReady, raise a located error) is exercised independently of the op
library.
"""

import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir import (
    AnyDim,
    Call,
    Function,
    FuncType,
    IncompleteType,
    IRModule,
    Let,
    Op,
    RefType,
    Span,
    SymDim,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
)
from autorelay.op import registry
from autorelay.op.registry import NotReady, OpDef, rel_error
from autorelay.typing import infer_expr, infer_types
from autorelay.typing.unify import Unifier, UnifyError

F32_3 = TensorType((3,), "float32")
SEEN: list[list] = []  # argument types the relations were called with


def _identity_rel(args, attrs):
    (t,) = args
    if isinstance(t, IncompleteType):
        raise NotReady("input unknown")
    return t


def _same_rel(args, attrs):
    """Both arguments must have one type; an unknown one is inferred from the other."""
    a, b = args
    if isinstance(a, IncompleteType) and isinstance(b, IncompleteType):
        raise NotReady("both inputs unknown")
    known = b if isinstance(a, IncompleteType) else a
    return [known, known], known


def _shape_of_rel(args, attrs):
    (t,) = args
    SEEN.append(list(args))
    if isinstance(t, IncompleteType):
        raise NotReady("input unknown")
    return TensorType((len(t.shape),), "int64")


def _tuple_first_rel(args, attrs):
    (t,) = args
    SEEN.append(list(args))
    if isinstance(t, IncompleteType) or any(isinstance(f, IncompleteType) for f in t.fields):
        raise NotReady("tuple fields unknown")
    return t.fields[0]


def _reject_rel(args, attrs):
    raise rel_error("test.typing.reject", f"argument data has shape {args[0].shape}, expected rank 0")


for _name, _args, _rel in [
    ("test.typing.identity", ("data",), _identity_rel),
    ("test.typing.same", ("lhs", "rhs"), _same_rel),
    ("test.typing.shape_of", ("data",), _shape_of_rel),
    ("test.typing.tuple_first", ("data",), _tuple_first_rel),
    ("test.typing.reject", ("data",), _reject_rel),
]:
    if not registry.exists(_name):
        registry.register(OpDef(_name, _args, _rel))


def op(name, *args):
    return registry.call(f"test.typing.{name}", *args)


def main(params, body, ret=None):
    return IRModule({"main": Function(tuple(params), body, ret)})


# ---- unification --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((3, 4), (3, 4)),
        ((AnyDim(), 4), (3, 4)),
        ((3, AnyDim()), (3, SymDim("n"))),
        ((SymDim("n"), 4), (SymDim("n"), 4)),
    ],
)
def test_compatible_dims_unify(a, b):
    Unifier().unify(TensorType(a), TensorType(b))


@pytest.mark.parametrize(
    ("a", "b", "detail"),
    [
        ((3, 4), (3, 5), "dimension 1: 4 vs 5"),
        ((SymDim("n"),), (SymDim("m"),), "dimension 0: n vs m"),
        ((SymDim("n"),), (3,), "dimension 0: n vs 3"),
        ((3,), (3, 1), "rank 1 vs 2"),
    ],
)
def test_incompatible_dims_name_the_dimension(a, b, detail):
    with pytest.raises(UnifyError) as info:
        Unifier().unify(TensorType(a), TensorType(b))
    assert info.value.detail == detail


def test_unify_binds_holes_through_structure():
    u = Unifier()
    h1, h2 = IncompleteType(), IncompleteType()
    u.unify(TupleType((h1, RefType(h2))), TupleType((F32_3, RefType(h1))))
    assert u.resolve(h2) == F32_3
    with pytest.raises(UnifyError, match="tuple field 0: dtype float32 vs int32"):
        u.unify(TupleType((h2,)), TupleType((TensorType((3,), "int32"),)))


def test_occurs_check():
    u = Unifier()
    h = IncompleteType()
    with pytest.raises(UnifyError, match="infinite type"):
        u.unify(h, TupleType((h, F32_3)))


# ---- relations ----------------------------------------------------------------------------


def test_relation_infers_an_argument_type():
    x = Var("x", F32_3)
    y = Var("y")  # unannotated: learned from the relation's refined argument types
    call = op("same", x, y)
    infer_types(main([x, y], call))
    assert y.checked_type == F32_3
    assert call.checked_type == F32_3
    assert call.op.checked_type == FuncType((F32_3, F32_3), F32_3)


def test_not_ready_relation_is_retried_when_its_input_becomes_known():
    x = Var("x", TensorType((2, 5, 7)))
    y = Var("y")
    s = Var("s")
    # shape_of(%y) comes first, while %y is unknown; same(%x, %y) then fixes %y.
    body = Let(s, op("shape_of", y), Let(Var("unused"), op("same", x, y), s))
    SEEN.clear()
    infer_types(main([x, y], body))
    assert s.checked_type == TensorType((3,), "int64")
    assert isinstance(SEEN[0][0], IncompleteType)  # first attempt: not ready
    assert SEEN[-1][0] == TensorType((2, 5, 7))  # retried with the solved type


def test_relations_see_solved_types_inside_tuples():
    x = Var("x", F32_3)
    y = Var("y")
    body = Let(Var("first"), op("tuple_first", Tuple((y, x))), op("same", x, y))
    SEEN.clear()
    mod = main([x, y], body)
    infer_types(mod)
    assert mod["main"].body.value.checked_type == F32_3
    assert SEEN[-1][0] == TupleType((F32_3, F32_3))


def test_relation_that_never_becomes_ready_names_the_op():
    y = Var("y")
    with pytest.raises(TypeCheckError, match=r"test\.typing\.shape_of: cannot infer .*input unknown"):
        infer_types(main([y], op("shape_of", y)))


def test_relation_error_gets_the_call_span_and_leaves_nodes_untyped():
    x = Var("x", F32_3)
    call = op("reject", x).with_span(Span("model.relay", 4, 9))
    with pytest.raises(TypeCheckError) as info:
        infer_types(main([x], call))
    err = info.value
    assert err.span == Span("model.relay", 4, 9)
    assert "model.relay:4:9" in str(err)
    assert "test.typing.reject" in str(err) and "(3,)" in str(err) and "@main" in str(err)
    assert not call.has_checked_type and not x.has_checked_type


def test_relation_result_conflicting_with_annotation():
    x = Var("x", F32_3)
    msg = r"return type annotation vs body type: Tensor\[\(4,?\).*dimension 0: 4 vs 3"
    with pytest.raises(TypeCheckError, match=msg):
        infer_types(main([x], op("identity", x), ret=TensorType((4,))))


def test_op_arity_and_unknown_op():
    x = Var("x", F32_3)
    with pytest.raises(TypeCheckError, match=r"test\.typing\.identity takes 1 argument\(s\) \(data\), got 2"):
        infer_types(main([x], Call(Op("test.typing.identity"), (x, x))))
    with pytest.raises(TypeCheckError, match=r"unknown operator no\.such_op"):
        infer_types(main([x], Call(Op("no.such_op"), (x,))))


def test_unknown_remaining_names_the_variable():
    x = Var("x")
    msg = r"cannot infer the type of variable %x; add a type annotation \(in @main\)"
    with pytest.raises(TypeCheckError, match=msg):
        infer_types(main([x], x))


def test_projection_waits_for_the_tuple_type():
    # %t's type is unknown when `.1` is met; it is fixed later by same(%t, %pair).
    a, b = Var("a", F32_3), Var("b", TensorType((2,), "int32"))
    t = Var("t")
    proj = TupleGetItem(t, 1)
    body = Let(Var("p"), proj, op("same", t, Tuple((a, b))))
    infer_types(main([a, b, t], body))
    assert proj.checked_type == TensorType((2,), "int32")


def test_infer_expr_requires_annotated_free_vars():
    x = Var("x", F32_3)
    assert infer_expr(op("identity", x)) == F32_3
    with pytest.raises(TypeCheckError, match="free variable %z has no type annotation"):
        infer_expr(op("identity", Var("z")))
    # A variable typed by an earlier inference may stay unannotated.
    y = Var("y")
    infer_types(main([x, y], op("same", x, y)))
    assert infer_expr(op("identity", y)) == F32_3
