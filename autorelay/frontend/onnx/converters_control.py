"""Control flow: ONNX `If` becomes the IR's `if`, so the VM (or AoT) runs the branch the data picks
(`Loop` and `Scan`, recursive closures, are in `converters_loop`).

A branch is a subgraph that reads the values of the enclosing graph by name; the importer converts
it in that scope (`GraphBuilder.subgraph`). A condition known at import time picks its branch there
and then (exporters often leave such `If`s behind). Both branches must produce the same types: the
IR's `if` has one type, as Relay's does. Where they differ only in extents (a detector's branch
for "no boxes" gives a constant (0, 4), the other branch (?, 4)), both are viewed with every extent
`?`, which the VM's kernels read at run time.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, registrar
from autorelay.ir.expr import Expr, If
from autorelay.ir.types import TensorType
from autorelay.op.registry import call as op_call
from autorelay.op.shape_utils import ANY

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
        if g.type_of(t) != g.type_of(e) and _same_kind(g, t, e):  # extents differ: both become `?`
            then_outs[i], else_outs[i] = _dynamic_view(g, t), _dynamic_view(g, e)
        elif g.type_of(t) != g.type_of(e):
            raise node.fail(f"output {i}: the then branch gives {g.type_of(t)}, the else branch "
                            f"{g.type_of(e)}; the IR's if needs one type")
    if len(then_outs) == 1:
        return [g.record(If(cond, then_outs[0], else_outs[0]), g.type_of(then_outs[0]))]
    t, e = g.tuple(then_outs), g.tuple(else_outs)
    both = g.record(If(cond, t, e), g.type_of(t))
    return [g.item(both, i) for i in range(len(then_outs))]


def _same_kind(g: GraphBuilder, a: Expr, b: Expr) -> bool:
    """Whether two tensors differ at most in their extents (one dtype, one rank): a branch that
    keeps no boxes gives a constant (0, 4) where the other gives (?, 4)."""
    ta, tb = g.type_of(a), g.type_of(b)
    return isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.dtype == tb.dtype \
        and ta.ndim == tb.ndim


def _dynamic_view(g: GraphBuilder, x: Expr) -> Expr:
    """`x` itself, typed with every extent `?` (the whole of it, sliced at run time). Built
    without `g.call`, which would fold a constant branch back to its static shape."""
    n, dtype = g.ndim(x), g.dtype(x)
    zeros, ones = (g.const(np.full(n, v, "int64")) for v in (0, 1))
    extents = g.record(op_call("shape_of", x), TensorType((n,), "int64"))
    return g.record(op_call("dyn.strided_slice", x, zeros, extents, ones), TensorType((ANY,) * n, dtype))


__all__ = ["TABLE"]
