"""A polymorphic function used where a monomorphic function type is expected is instantiated
(fresh holes for its type parameters, then unification), as Relay's unifier does; the reverse, a
monomorphic function where a polymorphic one is expected, stays an error."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.errors import TypeCheckError
from autorelay.ir import FuncType, TensorType, TupleType, TypeVar
from autorelay.text_format import parse
from autorelay.typing import infer_types

HEADER = '#[version = "0.0.5"]\n'
I32 = TensorType((), "int32")
F32 = TensorType((), "float32")
APPLY = "def @apply(%f: fn (int32) -> int32, %x: int32) -> int32 { %f(%x) }\n"


def run(src: str, *args):
    mod = infer_types(parse(HEADER + src))
    return mod, autorelay.evaluate(mod, *args)


@pytest.mark.parametrize(
    "main",
    [
        # a polymorphic global as an argument
        "def @id[A](%x: A) -> A { %x }\ndef @main() -> int32 { @apply(@id, 41) + 1 }",
        # a polymorphic function literal as an argument, and bound by an annotated let
        "def @main() -> int32 { @apply(fn [A](%x: A) -> A { %x }, 41) + 1 }",
        "def @main() -> int32 { let %f: fn (int32) -> int32 = fn [A](%x: A) -> A { %x }; %f(41) + 1 }",
        # a variable of polymorphic type, passed on and let-bound at a monomorphic type
        "def @main() -> int32 { let %g = fn [B](%y: B) -> B { %y }; @apply(%g, 41) + 1 }",
        # inside a tuple, and through a return type annotation
        "def @id[A](%x: A) -> A { %x }\n"
        "def @pair() -> (fn (int32) -> int32, int32) { (@id, 41) }\n"
        "def @main() -> int32 { let %p = @pair(); %p.0(%p.1) + 1 }",
    ],
)
def test_polymorphic_function_where_a_monomorphic_one_is_expected(main):
    mod, got = run(APPLY + main)
    assert mod["main"].checked_type == FuncType((), I32)
    assert int(np.asarray(got)) == 42


def test_a_parameter_of_polymorphic_type_is_instantiated_at_each_use():
    src = APPLY + """
        def @both(%g: fn [B](B) -> B) -> (int32, float32) {
          let %h: fn (float32) -> float32 = %g;
          (@apply(%g, 3), %h(2.5f))
        }
        def @main() -> (int32, float32) { @both(fn [A](%x: A) -> A { %x }) }"""
    mod, got = run(src)
    assert mod["both"].params[0].checked_type == FuncType((TypeVar("B"),), TypeVar("B"), (TypeVar("B"),))
    assert mod["main"].checked_type.ret_type == TupleType((I32, F32))
    assert int(np.asarray(got[0])) == 3 and float(np.asarray(got[1])) == 2.5


def test_only_the_extra_type_parameters_are_instantiated():
    src = """
        def @first[A, C](%a: A, %c: C) -> A { %a }
        def @use(%f: fn [B](B, int32) -> B) -> (float32, bool) { (%f(1.5f, 7), %f(True, 8)) }
        def @main() -> (float32, bool) { @use(@first) }"""
    mod, got = run(src)
    assert mod["main"].checked_type.ret_type == TupleType((F32, TensorType((), "bool")))
    assert float(np.asarray(got[0])) == 1.5 and bool(np.asarray(got[1])) is True
    with pytest.raises(TypeCheckError, match="argument 0"):
        infer_types(parse(HEADER + """
            def @first[A, C](%a: A, %c: C) -> C { %c }
            def @use(%f: fn [B](B, int32) -> B) -> float32 { %f(1.5f, 7) }
            def @main() -> float32 { @use(@first) }"""))  # C := int32 does not give back B


def test_the_instance_must_fit():
    with pytest.raises(TypeCheckError) as err:
        infer_types(parse(HEADER + APPLY + "def @pair[A](%x: A) -> (A, A) { (%x, %x) }\n"
                          "def @main() -> int32 { @apply(@pair, 1) }"))
    assert "call of @apply: argument 0" in str(err.value) and "tensor int32 vs tuple" in str(err.value)


def test_a_monomorphic_function_is_not_accepted_where_a_polymorphic_one_is_expected():
    # Relay's symmetric unifier would accept this and then call %g at float32 on an int32 function.
    src = """
        def @both(%g: fn [B](B) -> B) -> (int32, float32) { (%g(1), %g(1f)) }
        def @main() -> (int32, float32) { @both(fn (%x: int32) -> int32 { %x }) }"""
    with pytest.raises(TypeCheckError) as err:
        infer_types(parse(HEADER + src))
    assert "functions with 1 and 0 type parameters" in str(err.value)
    assert ":4:" in str(err.value)  # located at the call in @main (line 1 is the header)
