"""DeadCodeElimination, EliminateCommonSubexpr and InlineGlobals on hand-written programs and nets."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

import autorelay
from autorelay.ir import (
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
    Let,
    RefCreate,
    RefRead,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    const,
    flatten_lets,
)
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform import DeadCodeElimination, EliminateCommonSubexpr, InlineGlobals


class _Rebuild(ExprMutator):
    def visit_call(self, c):
        return Call(c.op, tuple(self.visit(a) for a in c.args), c.attrs)

    def visit_tuple(self, t):
        return Tuple(tuple(self.visit(f) for f in t.fields))

    def visit_tuple_getitem(self, t):
        return TupleGetItem(self.visit(t.tuple_value), t.index)


def test_dce_removes_dead_lets_in_cascade_and_keeps_effects():
    x = Var("x", TensorType((3,)))
    a, b, r, w, y = Var("a"), Var("b"), Var("r"), Var("w"), Var("y")
    body = Let(a, call("exp", x),                       # only used by dead %b: dead too
           Let(b, call("add", a, a),                    # unused: dead
           Let(r, RefCreate(x),
           Let(w, RefWrite(r, call("negative", x)),     # unused but a side effect: kept
           Let(y, call("relu" if False else "nn.relu", x), call("add", y, RefRead(r)))))))
    mod = IRModule.from_expr(Function((x,), body))
    out = DeadCodeElimination()(typed(mod))
    bound = [v.name_hint for v, _ in flatten_lets(out["main"].body)[0]]
    assert bound == ["r", "w", "y"]
    assert_same_outputs(mod, out)


def test_dce_inline_once_turns_single_uses_into_graph_edges():
    x = Var("x", TensorType((3,)))
    a, b = Var("a"), Var("b")
    body = Let(a, call("exp", x), Let(b, call("add", a, a), call("negative", b)))
    mod = IRModule.from_expr(Function((x,), body))
    out = DeadCodeElimination(inline_once=True)(typed(mod))
    bound = [v.name_hint for v, _ in flatten_lets(out["main"].body)[0]]
    assert bound == ["a"]  # %a is read twice, %b once
    assert_same_outputs(mod, out)


def test_cse_merges_repeats_but_not_different_attrs_or_sibling_branches():
    x = Var("x", TensorType((2, 6)))
    s1 = call("nn.softmax", x, axis=1)
    s2 = call("nn.softmax", x, axis=1)
    s3 = call("nn.softmax", x, axis=0)
    shared = call("add", call("add", s1, s2), s3)
    cond = call("greater", call("sum", x), const(0.0))
    branchy = If(cond, call("exp", x), call("exp", x))  # one exp per branch: both stay
    mod = IRModule.from_expr(Function((x,), Tuple((shared, branchy))))
    out = EliminateCommonSubexpr()(typed(mod))
    assert ops(out)["nn.softmax"] == 2 and ops(out)["exp"] == 2
    assert_same_outputs(mod, out)


def test_cse_in_a_normal_form_reuses_the_variable():
    x = Var("x", TensorType((3,)))
    a, b = Var("a"), Var("b")
    body = Let(a, call("exp", x), Let(b, call("exp", x), call("add", a, b)))
    mod = IRModule.from_expr(Function((x,), body))
    out = EliminateCommonSubexpr()(typed(mod))
    bindings, _ = flatten_lets(out["main"].body)
    assert bindings[1][1] is bindings[0][0]  # let %b = %a
    assert ops(out)["exp"] == 1
    assert_same_outputs(mod, out)


@pytest.mark.parametrize("net", sorted(NETS))
def test_cse_on_a_network_computed_twice(net):
    base = NETS[net]()["main"]
    twin = _Rebuild().visit(base.body)  # same weights and inputs, new call nodes
    combined = Tuple((base.body, twin))
    mod = IRModule.from_expr(Function(base.params, combined))
    before = sum(ops(mod).values())
    out = EliminateCommonSubexpr()(typed(mod))
    assert sum(ops(out).values()) == before // 2
    assert_same_outputs(mod, out)


def _inline_module() -> IRModule:
    x = Var("x", TensorType((3,)))
    f_gv, g_gv, loop_gv = GlobalVar("f"), GlobalVar("g"), GlobalVar("loop")
    y = Var("y", TensorType((3,)))
    f = Function((y,), call("multiply", y, const(2.0)))
    z = Var("z", TensorType((3,)))
    g = Function((z,), call("add", Call(f_gv, (z,)), const(1.0)))
    n, v = Var("n", TensorType((), "int32")), Var("v", TensorType((3,)))
    loop = Function((n, v), If(call("greater", n, const(0)),
                                Call(loop_gv, (call("subtract", n, const(1)), call("nn.relu", v))), v),
                    TensorType((3,)))
    main = Function((x,), call("add", Call(g_gv, (x,)), Call(loop_gv, (const(2), Call(g_gv, (x,))))))
    return IRModule({"main": main, "f": f, "g": g, "loop": loop})


def test_inline_globals_inlines_non_recursive_and_keeps_recursive():
    mod = _inline_module()
    out = InlineGlobals()(typed(mod))
    names = sorted(g.name_hint for g in out.functions)
    assert names == ["loop", "main"]
    called = {n.op.name_hint for n in autorelay.ir.post_order(out["main"])
              if isinstance(n, Call) and isinstance(n.op, GlobalVar)}
    assert called == {"loop"}
    assert ops(out["main"])["multiply"] == 2  # @f inlined once per call of @g, with fresh vars
    assert_same_outputs(mod, out)
    # (2x + 1) + relu(relu(2x + 1))
    assert np.allclose(autorelay.evaluate(out, np.array([1, -2, 3], "float32")), [6, -3, 14])


@pytest.mark.parametrize("net", sorted(NETS))
def test_inline_globals_on_whole_networks(net):
    body = NETS[net]()["main"]
    params = [Var(p.name_hint, p.type_annotation) for p in body.params]
    mod = IRModule({"main": Function(params, Call(GlobalVar("net"), tuple(params))), "net": body})
    out = InlineGlobals()(typed(mod))
    assert [g.name_hint for g in out.functions] == ["main"]
    assert ops(out) == ops(mod)
    assert_same_outputs(mod, out)


@pytest.mark.parametrize("net", sorted(NETS))
def test_dce_on_whole_networks_in_a_normal_form(net):
    from autorelay.transform import ToANormalForm

    mod = typed(NETS[net]())
    anf = ToANormalForm()(mod)
    fn = anf["main"]
    dead = Let(Var("dead"), call("exp", fn.params[0]), fn.body)  # an unused binding on top
    padded = IRModule.from_expr(Function(fn.params, dead))
    out = DeadCodeElimination()(typed(padded))
    assert ops(out) == ops(mod)
    assert len(flatten_lets(out["main"].body)[0]) == len(flatten_lets(fn.body)[0])
    inlined = DeadCodeElimination(inline_once=True)(typed(padded))
    assert len(flatten_lets(inlined["main"].body)[0]) < len(flatten_lets(fn.body)[0])
    for o in (out, inlined):
        assert_same_outputs(mod, o)
