"""ADTs, pattern matching, polymorphic and recursive globals."""

import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir import (
    Call,
    Clause,
    Constructor,
    Function,
    FuncType,
    GlobalTypeVar,
    GlobalVar,
    IRModule,
    Match,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    TensorType,
    Tuple,
    TupleType,
    TypeCall,
    TypeData,
    TypeVar,
    Var,
    const,
)
from autorelay.op.registry import call
from autorelay.typing import infer_expr, infer_types

F32_3 = TensorType((3,), "float32")
I32 = TensorType((), "int32")
BOOL = TensorType((), "bool")

A = TypeVar("A")
LIST = GlobalTypeVar("List")
CONS = Constructor("Cons", (A, TypeCall(LIST, (A,))), LIST, 0)
NIL = Constructor("Nil", (), LIST, 1)
LIST_DATA = TypeData(LIST, (A,), (CONS, NIL))

OPTION = GlobalTypeVar("Option")
SOME = Constructor("Some", (A,), OPTION, 0)
NONE = Constructor("None", (), OPTION, 1)
OPTION_DATA = TypeData(OPTION, (A,), (SOME, NONE))

NAT = GlobalTypeVar("Nat")
Z = Constructor("Z", (), NAT, 0)
S = Constructor("S", (TypeCall(NAT, ()),), NAT, 1)
NAT_DATA = TypeData(NAT, (), (Z, S))

TYPES = {LIST: LIST_DATA, OPTION: OPTION_DATA, NAT: NAT_DATA}


def list_of(t):
    return TypeCall(LIST, (t,))


def module(**functions):
    return IRModule(functions, TYPES)


def length_fn(annotate_ret=True):
    """def @length[A](%l: List[A]) -> int32 { match %l { Cons(_, %t) => 1 + @length(%t), Nil => 0 } }"""
    a = TypeVar("A")
    lst, tail = Var("l", list_of(a)), Var("t")
    body = Match(lst, (
        Clause(PatternConstructor(CONS, (PatternWildcard(), PatternVar(tail))),
               call("add", const(1), Call(GlobalVar("length"), (tail,)))),
        Clause(PatternConstructor(NIL), const(0)),
    ))
    return Function((lst,), body, I32 if annotate_ret else None, (a,)), tail


def two_lists_main():
    x, y = Var("x", F32_3), Var("y", BOOL)
    xs = Call(CONS, (x, Call(NIL, ())))
    ys = Call(CONS, (y, Call(NIL, ())))
    body = Tuple((Call(GlobalVar("length"), (xs,)), Call(GlobalVar("length"), (ys,))))
    return Function((x, y), body), xs, ys


@pytest.mark.parametrize("annotate_ret", [True, False])
def test_recursive_polymorphic_length_used_at_two_types(annotate_ret):
    length, tail = length_fn(annotate_ret)
    main, xs, ys = two_lists_main()
    infer_types(module(length=length, main=main))
    assert length.checked_type == FuncType((list_of(A),), I32, (A,))
    assert tail.checked_type == list_of(A)
    assert xs.checked_type == list_of(F32_3)
    assert ys.checked_type == list_of(BOOL)
    assert main.checked_type == FuncType((F32_3, BOOL), TupleType((I32, I32)))
    assert xs.op.checked_type == FuncType((A, list_of(A)), list_of(A), (A,))  # generic constructor


def test_polymorphic_identity_with_and_without_return_annotation():
    for ret in (A, None):
        p = Var("p", A)
        ident = Function((p,), p, ret, (A,))
        a, b = Var("a", F32_3), Var("b", list_of(I32))
        uses = Tuple((Call(GlobalVar("id"), (a,)), Call(GlobalVar("id"), (b,))))
        infer_types(module(id=ident, main=Function((a, b), uses)))
        assert uses.checked_type == TupleType((F32_3, list_of(I32)))
        assert ident.checked_type == FuncType((A,), A, (A,))


def test_polymorphic_global_passed_as_a_value():
    p = Var("p", A)
    ident = Function((p,), p, A, (A,))
    f, x = Var("f"), Var("x", F32_3)
    apply = Function((f, x), Call(f, (x,)))
    main = Function((x,), Call(GlobalVar("apply"), (GlobalVar("id"), x)))
    infer_types(module(id=ident, apply=apply, main=main))
    assert f.checked_type == FuncType((F32_3,), F32_3)


def test_mutual_recursion_infers_the_group_together():
    n, m = Var("n"), Var("m")
    even = Function((n,), Match(n, (
        Clause(PatternConstructor(Z), const(True)),
        Clause(PatternConstructor(S, (PatternVar(m),)), Call(GlobalVar("odd"), (m,))),
    )))
    k, j = Var("k", TypeCall(NAT, ())), Var("j")
    odd = Function((k,), Match(k, (
        Clause(PatternConstructor(Z), const(False)),
        Clause(PatternConstructor(S, (PatternVar(j),)), Call(GlobalVar("even"), (j,))),
    )))
    mod = module(even=even, odd=odd)
    infer_types(mod)
    assert even.checked_type == FuncType((TypeCall(NAT, ()),), BOOL)
    assert odd.checked_type == FuncType((TypeCall(NAT, ()),), BOOL)
    assert m.checked_type == TypeCall(NAT, ())


def test_monomorphic_helper_learns_its_parameter_type_from_its_caller():
    p = Var("p")
    helper = Function((p,), call("add", p, p))
    x = Var("x", F32_3)
    main = Function((x,), Call(GlobalVar("helper"), (x,)))
    infer_types(module(helper=helper, main=main))
    assert helper.checked_type == FuncType((F32_3,), F32_3)


def test_constructor_field_mismatch():
    x, y = Var("x", F32_3), Var("y", I32)
    bad = Call(CONS, (x, Call(CONS, (y, Call(NIL, ())))))
    with pytest.raises(TypeCheckError, match=r"call of constructor Cons: argument 1.*dtype float32 vs int32"):
        infer_types(module(main=Function((x, y), bad)))


def test_constructor_call_arity():
    x = Var("x", F32_3)
    with pytest.raises(TypeCheckError, match=r"call of constructor Cons: expects 2 argument\(s\), got 1"):
        infer_types(module(main=Function((x,), Call(CONS, (x,)))))


def test_pattern_with_wrong_constructor_arity():
    lst = Var("l", list_of(F32_3))
    body = Match(lst, (Clause(PatternConstructor(CONS, (PatternVar(Var("h")),)), const(0)),), complete=False)
    msg = r"pattern Cons has 1 field pattern\(s\) but constructor Cons takes 2"
    with pytest.raises(TypeCheckError, match=msg):
        infer_types(module(main=Function((lst,), body)))


def test_pattern_of_the_wrong_adt():
    opt = Var("o", TypeCall(OPTION, (F32_3,)))
    body = Match(opt, (
        Clause(PatternConstructor(SOME, (PatternVar(Var("v")),)), const(1)),
        Clause(PatternConstructor(NIL), const(0)),
    ))
    with pytest.raises(TypeCheckError, match=r"pattern Nil \(a constructor of type List\) .*Option"):
        infer_types(module(main=Function((opt,), body)))


def test_match_clauses_must_agree():
    opt = Var("o", TypeCall(OPTION, (F32_3,)))
    v = Var("v")
    body = Match(opt, (
        Clause(PatternConstructor(SOME, (PatternVar(v),)), v),
        Clause(PatternConstructor(NONE), const(0)),
    ))
    with pytest.raises(TypeCheckError, match=r"match: clause 1 has a different type from clause 0"):
        infer_types(module(main=Function((opt,), body)))


def test_tuple_pattern_and_nested_constructor_pattern_bind_field_types():
    pair = Var("pr", TupleType((list_of(F32_3), I32)))
    h, n = Var("h"), Var("n")
    pat = PatternTuple((PatternConstructor(CONS, (PatternVar(h), PatternWildcard())), PatternVar(n)))
    body = Match(pair, (Clause(pat, Tuple((h, n))),), complete=False)
    infer_types(module(main=Function((pair,), body)))
    assert h.checked_type == F32_3 and n.checked_type == I32
    assert pat.checked_type == TupleType((list_of(F32_3), I32))
    assert body.checked_type == TupleType((F32_3, I32))
    with pytest.raises(TypeCheckError, match=r"tuple pattern of 3 field\(s\)"):
        infer_expr(Match(pair, (Clause(PatternTuple((PatternWildcard(),) * 3), const(0)),)), module())


def test_unknown_adt_is_reported():
    x = Var("x", F32_3)
    with pytest.raises(TypeCheckError, match="belongs to type List, which the module does not define"):
        infer_types(IRModule({"main": Function((x,), Call(CONS, (x, Call(NIL, ()))))}))


def test_polymorphic_recursion_at_another_type_needs_annotations():
    # @f[A](%x: A) calls itself at a tensor type: A is rigid in its own body.
    x = Var("x", A)
    f = Function((x,), Call(GlobalVar("f"), (const(1.0),)), None, (A,))
    with pytest.raises(TypeCheckError, match="type variable A"):
        infer_types(module(f=f))


def test_infer_expr_uses_module_globals():
    length, _ = length_fn()
    x = Var("x", F32_3)
    t = infer_expr(Call(GlobalVar("length"), (Call(CONS, (x, Call(NIL, ()))),)), module(length=length))
    assert t == I32


def test_polymorphic_global_in_a_mutually_recursive_group_needs_annotations():
    x, y = Var("x", A), Var("y")
    f = Function((x,), Call(GlobalVar("g"), (x,)), None, (A,))
    g = Function((y,), Call(GlobalVar("f"), (y,)))
    with pytest.raises(TypeCheckError, match=r"mutually recursive globals .*@f.*polymorphic"):
        infer_types(module(f=f, g=g))


def test_polymorphic_global_whose_type_stays_unknown():
    x, y = Var("x", A), Var("y")
    f = Function((x, y), x, None, (A,))
    with pytest.raises(TypeCheckError, match=r"cannot infer the type of polymorphic @f"):
        infer_types(module(f=f))
