"""ToANormalForm / ToGraphNormalForm / ToBasicBlockNormalForm: structure and meaning."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

from autorelay.ir import (
    Call,
    Function,
    If,
    IRModule,
    Let,
    Match,
    RefCreate,
    RefRead,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    const,
    flatten_lets,
    post_order,
)
from autorelay.op.registry import call
from autorelay.transform import Pipeline, ToANormalForm, ToBasicBlockNormalForm, ToGraphNormalForm
from autorelay.transform.normal_form import is_atom


def _operands(n):
    if isinstance(n, Call):
        return list(n.args)
    if isinstance(n, Tuple):
        return list(n.fields)
    if isinstance(n, TupleGetItem):
        return [n.tuple_value]
    if isinstance(n, If):
        return [n.cond]
    if isinstance(n, Match):
        return [n.data]
    if isinstance(n, RefRead):
        return [n.ref]
    if isinstance(n, RefWrite):
        return [n.ref, n.value]
    if isinstance(n, RefCreate):
        return [n.value]
    return []


def assert_anf(fn: Function) -> None:
    for n in post_order(fn):
        for a in _operands(n):
            assert is_atom(a), f"operand {type(a).__name__} of {type(n).__name__} is not an atom"


def _branchy() -> IRModule:
    """A node shared by both branches of an if, and one used only in the true branch."""
    x = Var("x", TensorType((3,)))
    shared = call("exp", x)
    only_true = call("tanh", x)
    cond = call("greater", call("sum", x), const(0.0))
    body = call("add", If(cond, call("add", shared, only_true), call("negative", shared)), shared)
    return IRModule.from_expr(Function((x,), body))


def test_anf_binds_every_compound_expression():
    mod = _branchy()
    out = ToANormalForm()(typed(mod))
    assert_anf(out["main"])
    assert isinstance(out["main"].body, Let)
    assert_same_outputs(mod, out, inputs=[np.array([1, 2, 3], "float32")])
    assert_same_outputs(mod, out, inputs=[np.array([-1, -2, -3], "float32")])


def test_anf_places_shared_nodes_at_the_common_scope():
    out = ToANormalForm()(typed(_branchy()))
    outer, _ = flatten_lets(out["main"].body)
    outer_ops = [v.op.name for _, v in outer if isinstance(v, Call) and hasattr(v.op, "name")]
    assert "exp" in outer_ops and "tanh" not in outer_ops  # tanh lives in the true branch only
    branch = next(v for _, v in outer if isinstance(v, If))
    inner, _ = flatten_lets(branch.true_branch)
    assert any(getattr(v.op, "name", None) == "tanh" for _, v in inner if isinstance(v, Call))


def test_bbnf_binds_only_what_crosses_scopes_and_gnf_undoes_lets():
    mod = typed(_branchy())
    bb = ToBasicBlockNormalForm()(mod)
    outer, _ = flatten_lets(bb["main"].body)
    assert [v.op.name for _, v in outer] == ["exp"]  # only the cross-scope node is let-bound
    graph = ToGraphNormalForm()(ToANormalForm()(mod))
    assert not any(isinstance(n, Let) for n in post_order(graph["main"]))
    for out in (bb, graph):
        assert_same_outputs(mod, out, inputs=[np.array([1, 2, 3], "float32")])
        assert_same_outputs(mod, out, inputs=[np.array([-1, -2, -3], "float32")])


def test_gnf_keeps_effectful_lets_and_anf_keeps_their_order():
    x = Var("x", TensorType(()))
    r, w = Var("r"), Var("w")
    body = Let(r, RefCreate(x), Let(w, RefWrite(r, call("add", RefRead(r), const(1.0))), RefRead(r)))
    mod = IRModule.from_expr(Function((x,), body))
    graph = ToGraphNormalForm()(typed(mod))
    kept = [v.name_hint for v, _ in flatten_lets(graph["main"].body)[0]]
    assert "w" in kept
    anf = ToANormalForm()(typed(mod))
    assert_anf(anf["main"])
    for out in (graph, anf):
        assert_same_outputs(mod, out, inputs=[np.array(2.0, "float32")])


def test_gnf_keeps_the_lets_a_closure_reads():
    """A closure (an imported loop's body) reading a value its enclosing function computed: as a
    graph node, the value would be computed by the closure on every call. Atoms and functions are
    still substituted, and so are lets that no closure reads."""
    x, y = Var("x", TensorType((3,))), Var("y", TensorType((3,)))
    heavy, alias, outside, f = Var("heavy"), Var("alias"), Var("outside"), Var("f")
    closure = Function((y,), call("add", call("add", y, heavy), alias))
    body = Let(heavy, call("exp", x), Let(alias, x, Let(outside, call("tanh", x),
               Let(f, closure, Call(f, (outside,))))))
    mod = IRModule.from_expr(Function((x,), body))
    graph = ToGraphNormalForm()(typed(mod))
    assert [v.name_hint for v, _ in flatten_lets(graph["main"].body)[0]] == ["heavy"]
    inner = next(n for n in post_order(graph["main"].body) if isinstance(n, Function))
    assert "exp" not in [n.op.name for n in post_order(inner.body) if isinstance(n, Call)]
    assert_same_outputs(mod, graph, inputs=[np.array([1, 2, 3], "float32")])


@pytest.mark.parametrize("net", sorted(NETS))
def test_round_trips_on_whole_networks(net):
    mod = typed(NETS[net]())
    anf = ToANormalForm()(mod)
    assert_anf(anf["main"])
    n_ops = sum(ops(mod).values())
    assert len(flatten_lets(anf["main"].body)[0]) >= n_ops
    back = Pipeline([ToANormalForm(), ToGraphNormalForm()])(mod)
    assert not any(isinstance(n, Let) for n in post_order(back["main"]))
    assert ops(back) == ops(mod)
    for out in (anf, back, ToBasicBlockNormalForm()(mod)):
        assert_same_outputs(mod, out)
