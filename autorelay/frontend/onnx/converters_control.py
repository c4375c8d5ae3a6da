"""Control flow: ONNX `If` becomes the IR's `if`, so the VM (or AoT) runs the branch the data picks;
`Loop` becomes a recursive closure (loop-carried values as its parameters).

A branch is a subgraph that reads the values of the enclosing graph by name; the importer converts
it in that scope (`GraphBuilder.subgraph`). A condition known at import time picks its branch there
and then (exporters often leave such `If`s behind). Both branches must produce the same types: the
IR's `if` has one type, as Relay's does.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar
from autorelay.ir.expr import Call, Expr, Function, If, Let, Var
from autorelay.ir.types import TensorType, TupleType

TABLE: dict = {}
_reg = registrar(TABLE)




@_reg("If")
def _if(g: GraphBuilder, node: NodeView) -> list[Expr]:
    cond = node.input(0)
    if cond is None:
        raise node.fail("input 0 (the condition) is required")
    then_graph, else_graph = node.attr("then_branch"), node.attr("else_branch")
    if then_graph is None or else_graph is None:
        raise node.fail("then_branch and else_branch are required")
    known = g.value_or_none(cond)
    if known is not None:
        if np.asarray(known).size != 1:
            raise node.fail(f"the condition must hold one value, got shape {np.shape(known)}")
        return g.subgraph(then_graph if bool(np.asarray(known).reshape(-1)[0]) else else_graph)
    if g.dtype(cond) != "bool" or len([d for d in g.shape(cond) if d != 1]) > 0:
        raise node.fail(f"the condition must be one bool value, got {g.type_of(cond)}")
    if g.ndim(cond):
        cond = g.call("reshape", cond, newshape=())
    then_outs, else_outs = g.subgraph(then_graph), g.subgraph(else_graph)
    if len(then_outs) != len(else_outs) or len(then_outs) != node.num_outputs:
        raise node.fail(f"the branches produce {len(then_outs)} and {len(else_outs)} values for "
                        f"{node.num_outputs} outputs")
    for i, (t, e) in enumerate(zip(then_outs, else_outs)):
        if g.type_of(t) != g.type_of(e):
            raise node.fail(f"output {i}: the then branch gives {g.type_of(t)}, the else branch "
                            f"{g.type_of(e)}; the IR's if needs one type")
    if len(then_outs) == 1:
        return [g.record(If(cond, then_outs[0], else_outs[0]), g.type_of(then_outs[0]))]
    t, e = g.tuple(then_outs), g.tuple(else_outs)
    both = g.record(If(cond, t, e), g.type_of(t))
    return [g.item(both, i) for i in range(len(then_outs))]


__all__ = ["TABLE"]


@_reg("Loop")
def _loop(g: GraphBuilder, node: NodeView) -> list[Expr]:
    """ONNX Loop as a recursive closure: `let %loop = fn (%i, %cond, %state...) { if (%cond and
    %i < M) { %loop(%i + 1, body...) } else { %state } }; %loop(0, cond, initial state...)`. The body
    reads enclosing values through the closure. Scan outputs (values stacked per iteration) would
    need a growing shape and are refused."""
    body = node.attr("body")
    if body is None:
        raise node.fail("the body attribute is required")
    state = [e for e in node.inputs[2:]]
    if any(e is None for e in state):
        raise node.fail("every loop-carried initial value is required")
    if len(body.output) != 1 + len(state):
        raise node.fail(f"{len(body.output) - 1 - len(state)} scan output(s): values stacked per iteration "
                        f"are not supported (loop-carried values are)")
    if len(body.input) != 2 + len(state):
        raise node.fail(f"the body takes {len(body.input)} inputs, expected {2 + len(state)}")
    scalar_i, scalar_c = TensorType((), "int64"), TensorType((), "bool")
    i, c = Var("loop_i", scalar_i), Var("loop_cond", scalar_c)
    vs = [Var(f"loop_v{k}", g.type_of(e)) for k, e in enumerate(state)]
    bind = {body.input[0].name: i, body.input[1].name: c,
            **{vi.name: v for vi, v in zip(body.input[2:], vs)}}
    outs = g.subgraph(body, bind)
    cond_out, new_state = _scalar(g, outs[0], "bool", node, "the body's condition"), outs[1:]
    for k, (v, o) in enumerate(zip(vs, new_state)):
        if g.type_of(o) != v.type_annotation:
            raise node.fail(f"loop-carried value {k} is {v.type_annotation} before an iteration and "
                            f"{g.type_of(o)} after it; it must keep its type")
    ret = TupleType(tuple(v.type_annotation for v in vs)) if len(vs) != 1 else vs[0].type_annotation
    loop = Var("loop")
    go: Expr = c
    trip = node.input(0)
    if trip is not None:
        go = g.call("logical_and", c, g.call("less", i, _scalar(g, trip, "int64", node, "M")))
    again = g.record(Call(loop, (g.call("add", i, g.const(np.array(1, "int64"))), cond_out, *new_state)), ret)
    done = vs[0] if len(vs) == 1 else g.tuple(vs)
    fn = Function((i, c, *vs), g.record(If(go, again, done), ret), ret)
    first = node.input(1)
    cond0 = g.const(np.array(True)) if first is None else _scalar(g, first, "bool", node, "cond")
    start = g.record(Call(loop, (g.const(np.array(0, "int64")), cond0, *state)), ret)
    result = g.record(Let(loop, fn, start), ret)
    return [result] if len(vs) == 1 else [g.item(result, k) for k in range(len(vs))]


def _scalar(g: GraphBuilder, e: Expr, dtype: str, node: NodeView, what: str) -> Expr:
    """`e` as a scalar of `dtype` (ONNX passes trip counts and conditions as () or (1,) tensors)."""
    if g.dtype(e) != dtype or any(d != 1 for d in g.shape(e)):
        raise node.fail(f"{what} must be one {dtype} value, got {g.type_of(e)}")
    return g.call("reshape", e, newshape=()) if g.ndim(e) else e
