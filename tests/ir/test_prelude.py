"""The prelude: its ADTs and polymorphic list functions, their text round trip, types and meaning."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.ir import FuncType, GlobalTypeVar, TensorType, TupleType, TypeCall, TypeVar
from autorelay.ir.prelude import ADTS, FUNCTIONS, prelude_text
from autorelay.ir.printer import astext
from autorelay.ir.structural import assert_structural_equal, structural_equal, structural_hash
from autorelay.text_format import load_prelude, parse

A, B = TypeVar("A"), TypeVar("B")
LIST = GlobalTypeVar("List")


def list_of(t):
    return TypeCall(LIST, (t,))


def test_prelude_has_the_adts_with_their_constructors():
    mod = load_prelude()
    assert load_prelude() is mod  # cached
    shapes = {
        name: [(c.name, len(c.inputs)) for c in mod.get_type(name).constructors] for name in ADTS
    }
    assert shapes == {
        "List": [("Cons", 2), ("Nil", 0)],
        "Option": [("Some", 1), ("None", 0)],
        "Tree": [("Rose", 2)],
        "Nat": [("Z", 0), ("S", 1)],
    }
    cons = mod.get_constructor("Cons")
    assert cons.inputs == (A, list_of(A))
    rose = mod.get_constructor("Rose")
    assert rose.inputs == (A, list_of(TypeCall(GlobalTypeVar("Tree"), (A,))))
    assert mod.get_constructor("S").inputs == (TypeCall(GlobalTypeVar("Nat"), ()),)


def test_prelude_functions_are_polymorphic():
    mod = load_prelude()
    assert sorted(g.name_hint for g in mod.functions) == sorted(FUNCTIONS)
    fmap = mod["map"]
    assert fmap.type_params == (A, B)
    assert [p.type_annotation for p in fmap.params] == [FuncType((A,), B), list_of(A)]
    assert fmap.ret_type == list_of(B)
    assert mod["zip"].ret_type == list_of(TupleType((A, B)))
    assert mod["length"].ret_type == TensorType((), "int32")
    assert not mod["nth"].body.complete  # nth past the end is a match failure
    for name in ("foldl", "foldr", "length", "nth", "concat", "filter"):
        assert mod[name].type_params, name


def test_prelude_roundtrips():
    mod = load_prelude()
    text = astext(mod)
    back = parse(text)
    assert_structural_equal(mod, back)
    assert structural_hash(mod) == structural_hash(back)
    assert structural_equal(mod, parse(prelude_text()))


def test_user_program_with_prelude_in_scope():
    mod = parse(
        "def @main(%x: float32) -> List[float32] { Cons(%x, @map(fn (%y: float32) { add(%y, 1f) }, Nil)) }",
        prelude=True,
    )
    assert {"main", "map", "foldl"} <= {g.name_hint for g in mod.functions}
    assert "List" in {t.name for t in mod.type_definitions}
    back = parse(astext(mod))
    assert_structural_equal(mod, back)


def test_prelude_type_checks():
    infer_types = pytest.importorskip("autorelay.typing").infer_types
    typed = infer_types(load_prelude())
    t = typed["map"].checked_type
    assert isinstance(t, FuncType) and len(t.type_params) == 2
    assert structural_equal(t.ret_type, list_of(t.type_params[1]))
    assert typed["sum"].checked_type == FuncType((list_of(TensorType((), "int32")),), TensorType((), "int32"))


PROGRAM = """
def @main(%a: int32, %b: int32, %c: int32) {
  let %xs = Cons(%a, Cons(%b, Cons(%c, Nil)));
  let %ys = Cons(10, Cons(20, Nil));
  (
    @length(%xs),
    @nth(%xs, 1),
    @sum(%xs),
    @foldl(fn (%acc: int32, %x: int32) { subtract(multiply(%acc, 10), %x) }, 0, %xs),
    @foldr(fn (%x: int32, %acc: int32) { subtract(multiply(%acc, 10), %x) }, 0, %xs),
    @map(fn (%x: int32) { multiply(%x, %x) }, %xs),
    @filter(fn (%x: int32) { greater(%x, 1) }, %xs),
    @concat(%xs, %ys),
    @zip(%xs, %ys),
  )
}
"""


def test_prelude_functions_compute_what_python_computes():
    interp = pytest.importorskip("autorelay.runtime.interpreter")
    from autorelay.runtime.values import to_list

    mod = parse(PROGRAM, prelude=True)
    xs = [3, 1, 4]
    ys = [10, 20]
    out = interp.evaluate(mod, np.int32(xs[0]), np.int32(xs[1]), np.int32(xs[2]))
    length, nth, total, fl, fr, mapped, filtered, cat, zipped = out
    acc_l = 0
    for x in xs:
        acc_l = acc_l * 10 - x
    acc_r = 0
    for x in reversed(xs):
        acc_r = acc_r * 10 - x
    assert int(length) == len(xs) and int(nth) == xs[1] and int(total) == sum(xs)
    assert int(fl) == acc_l and int(fr) == acc_r
    assert [int(v) for v in to_list(mapped)] == [x * x for x in xs]
    assert [int(v) for v in to_list(filtered)] == [x for x in xs if x > 1]
    assert [int(v) for v in to_list(cat)] == xs + ys
    assert [(int(p), int(q)) for p, q in to_list(zipped)] == list(zip(xs, ys))
