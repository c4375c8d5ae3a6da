"""The IR's building blocks: immutability, identity semantics, modules, attrs, visitors on deep graphs."""

import dataclasses

import numpy as np
import pytest

from autorelay.ir import (
    AnyDim,
    Attrs,
    Call,
    Constant,
    ExprMutator,
    ExprVisitor,
    Function,
    GlobalVar,
    IRModule,
    Let,
    Op,
    SymDim,
    TensorType,
    Tuple,
    TupleType,
    TypeVar,
    Var,
    bind_lets,
    const,
    flatten_lets,
    free_vars,
    post_order,
)
from autorelay.ir.types import FuncType, free_type_vars, substitute_type
from autorelay.utils.deep import deep, run_deep


def test_nodes_are_frozen_and_replace_copies():
    x = Var("x", TensorType((1, 3)))
    c = Call(Op("add"), (x, x))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.args = ()
    c2 = c.replace(args=(x,))
    assert c2.args == (x,) and c.args == (x, x)


def test_vars_are_bindings_not_names():
    a, b = Var("x"), Var("x")
    assert a != b and a == a
    assert len({a, b}) == 2
    assert GlobalVar("f") == GlobalVar("f") and Op("add") == Op("add")


def test_tensor_type_validates_dims_and_dtype():
    t = TensorType([1, SymDim("n"), AnyDim()], "int8")
    assert t.shape == (1, SymDim("n"), AnyDim()) and not t.is_static
    with pytest.raises(ValueError, match="unknown dtype"):
        TensorType((1,), "float8")
    with pytest.raises(TypeError, match="bad dimension"):
        TensorType((1.5,), "float32")
    assert TensorType((2, 3)).concrete_shape == (2, 3)


def test_a_tensor_type_has_no_elements_only_when_static_with_a_zero_axis():
    assert TensorType((3, 0, 2)).has_no_elements and TensorType((0,)).has_no_elements
    assert not TensorType((2, 3)).has_no_elements and not TensorType(()).has_no_elements  # a scalar: one
    assert not TensorType((0, SymDim("n"))).has_no_elements  # its size is known only at run time


def test_type_substitution_respects_binders():
    a, b = TypeVar("A"), TypeVar("B")
    f = FuncType((a,), b, type_params=(a,))
    t = TupleType((a, f))
    out = substitute_type(t, {a: TensorType((1,)), b: TensorType((2,))})
    assert out.fields[0] == TensorType((1,))
    assert out.fields[1].arg_types == (a,) and out.fields[1].ret_type == TensorType((2,))
    assert free_type_vars(t) == [a, b]


def test_attrs_freeze_lists_and_compare_by_value():
    a = Attrs(padding=[1, 1], layout="NCHW", scale=np.float32(2.0))
    assert a["padding"] == (1, 1) and isinstance(a["scale"], float)
    assert a == Attrs({"layout": "NCHW", "padding": (1, 1), "scale": 2.0})
    assert hash(a) == hash(Attrs(padding=(1, 1), layout="NCHW", scale=2.0))
    assert a.to_json()["padding"] == [1, 1]
    with pytest.raises(AttributeError):
        a.x = 1


def test_const_dtype_defaults():
    assert const(1.0).data.dtype == np.float32
    assert const(1).data.dtype == np.int32
    assert const(True).data.dtype == np.bool_
    assert const(np.zeros((2, 2), "float64")).type == TensorType((2, 2), "float64")


def test_module_is_a_value():
    x = Var("x")
    f = Function((x,), x)
    m = IRModule.from_expr(f)
    m2 = m.with_function("g", f)
    assert "g" in m2 and "g" not in m
    assert m2["main"] is f
    with pytest.raises(KeyError, match="@nope"):
        m["nope"]
    with pytest.raises(TypeError, match="must be a Function"):
        IRModule({"x": x})


def _chain(n):
    x = Var("x", TensorType((1, 4)))
    e = x
    for _ in range(n):
        e = Call(Op("nn.relu"), (Call(Op("add"), (e, x)),))
    return x, e


def test_post_order_and_free_vars_on_deep_graph():
    x, e = _chain(5000)
    order = post_order(e)
    assert order[-1] is e and any(n is x for n in order)
    assert len(order) == 4 * 5000 + 1  # 10000 calls, their 10000 Op nodes, and x
    assert free_vars(Function((x,), e)) == []
    assert free_vars(e) == [x]


def test_let_chain_helpers_round_trip():
    vs = [Var(f"v{i}") for i in range(1000)]
    bindings = [(v, const(float(i))) for i, v in enumerate(vs)]
    body = Tuple(tuple(vs[:2]))
    e = bind_lets(bindings, body)
    got, b = flatten_lets(e)
    assert b is body and [v for v, _ in got] == vs


class _CountCalls(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def visit_call(self, c):
        self.calls += 1
        super().visit_call(c)


class _AddToSub(ExprMutator):
    def visit_call(self, c):
        new = super().visit_call(c)
        if isinstance(new.op, Op) and new.op.name == "add":
            return new.replace(op=Op("subtract"))
        return new


def test_visitor_and_mutator_on_deep_graph_and_sharing():
    x, e = _chain(3000)
    v = _CountCalls()
    run_deep(v.visit, e)
    assert v.calls == 6000
    out = run_deep(_AddToSub().visit, e)
    assert out is not e
    names = {n.op.name for n in post_order(out) if isinstance(n, Call)}
    assert names == {"nn.relu", "subtract"}
    # a shared node is visited once and rebuilt once
    s = Call(Op("add"), (x, x))
    t = Tuple((s, s))
    t2 = _AddToSub().visit(t)
    assert t2.fields[0] is t2.fields[1]


def test_mutator_keeps_identity_when_nothing_changes():
    x, e = _chain(10)
    assert ExprMutator().visit(e) is e
    let = Let(Var("y"), x, Constant(np.zeros(2, "float32")))
    assert ExprMutator().visit(let) is let


def test_deep_runs_recursive_code_and_propagates_errors():
    @deep
    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    assert depth(100_000) == 100_000

    @deep
    def boom():
        raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        boom()
