"""A child-sum Tree-LSTM (Tai et al., 2015) over a `Tree` ADT, as in the Relay paper's evaluation.

The model recurses over the data structure itself: `@tree_lstm` matches a `Rose(x, children)`
node and `@child_sum` folds over the `List` of children. The input is a tree value whose leaves
and inner nodes each hold a `(1, input_size)` tensor.
"""

from __future__ import annotations

import numpy as np

from autorelay.frontend.zoo.builder import NetBuilder
from autorelay.frontend.zoo.rnn import list_adt
from autorelay.ir.expr import (
    Call,
    Clause,
    Constructor,
    Function,
    GlobalVar,
    Let,
    Match,
    PatternConstructor,
    PatternVar,
    Tuple,
    TupleGetItem,
    Var,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import GlobalTypeVar, TensorType, TupleType, TypeCall, TypeData, TypeVar
from autorelay.op.registry import call


def tree_adt(list_td: TypeData) -> tuple[TypeData, Constructor]:
    """`type Tree[A] { Rose(A, List[Tree[A]]) }`, identical to the prelude's definition."""
    header = GlobalTypeVar("Tree")
    a = TypeVar("A")
    rose = Constructor("Rose", (a, TypeCall(list_td.header, (TypeCall(header, (a,)),))), header, 0)
    return TypeData(header, (a,), (rose,)), rose


def tree_lstm(batch_size: int = 1, dtype: str = "float32", input_size: int = 64, hidden: int = 64,
              seed: int = 0):
    if batch_size != 1:
        raise ValueError("tree-lstm processes one tree at a time (batch_size=1)")
    b = NetBuilder(seed, dtype)
    for name, shape in [("w_iou", (3 * hidden, input_size)), ("u_iou", (3 * hidden, hidden)),
                        ("b_iou", (3 * hidden,)), ("w_f", (hidden, input_size)), ("u_f", (hidden, hidden)),
                        ("b_f", (hidden,))]:
        b.weight(name, shape, "uniform", fan_in=hidden)
    list_td, cons, nil = list_adt()
    tree_td, rose = tree_adt(list_td)
    x_t = TensorType((1, input_size), dtype)
    h_t = TensorType((1, hidden), dtype)
    state_t = TupleType((h_t, h_t))
    tree_t = TypeCall(tree_td.header, (x_t,))
    node_fn, sum_fn = GlobalVar("tree_lstm"), GlobalVar("child_sum")

    def weights() -> tuple[list[Var], dict[str, Var]]:
        ws = [Var(p.name_hint, p.type_annotation) for p in b.param_vars]
        return ws, {v.name_hint: v for v in ws}

    # @child_sum(children, xf, weights) -> (sum of h_k, sum of f_k * c_k)
    children = Var("children", TypeCall(list_td.header, (tree_t,)))
    xf = Var("xf", h_t)
    ws, w = weights()
    head, tail, s, r = Var("head"), Var("tail"), Var("s"), Var("r")
    f_k = call("sigmoid", call("add", xf, call("nn.dense", TupleGetItem(s, 0), w["u_f"])))
    cons_rhs = Let(s, Call(node_fn, (head, *ws)), Let(r, Call(sum_fn, (tail, xf, *ws)), Tuple((
        call("add", TupleGetItem(s, 0), TupleGetItem(r, 0)),
        call("add", call("multiply", f_k, TupleGetItem(s, 1)), TupleGetItem(r, 1)),
    ))))
    zeros = call("zeros", shape=(1, hidden), dtype=dtype)
    body = Match(children, (
        Clause(PatternConstructor(cons, (PatternVar(head), PatternVar(tail))), cons_rhs),
        Clause(PatternConstructor(nil, ()), Tuple((zeros, zeros))),
    ))
    child_sum = Function((children, xf, *ws), body, ret_type=state_t)

    # @tree_lstm(tree, weights) -> (h, c)
    tree = Var("tree", tree_t)
    ws, w = weights()
    x, kids, sums = Var("x"), Var("kids"), Var("sums")
    xf_val = call("add", call("nn.dense", x, w["w_f"]), w["b_f"])
    iou = call("add", call("add", call("nn.dense", x, w["w_iou"]),
                           call("nn.dense", TupleGetItem(sums, 0), w["u_iou"])), w["b_iou"])
    parts = call("split", iou, indices_or_sections=3, axis=1)
    i, o, u = (TupleGetItem(parts, k) for k in range(3))
    c = call("add", call("multiply", call("sigmoid", i), call("tanh", u)), TupleGetItem(sums, 1))
    cvar = Var("c")
    node_rhs = Let(sums, Call(sum_fn, (kids, xf_val, *ws)),
                   Let(cvar, c, Tuple((call("multiply", call("sigmoid", o), call("tanh", cvar)), cvar))))
    node_body = Match(tree, (Clause(PatternConstructor(rose, (PatternVar(x), PatternVar(kids))), node_rhs),))
    node = Function((tree, *ws), node_body, ret_type=state_t)

    root = Var("tree", tree_t)
    main = Function((root, *b.param_vars), TupleGetItem(Call(node_fn, (root, *b.param_vars)), 0))
    mod = IRModule({GlobalVar("main"): main, node_fn: node, sum_fn: child_sum},
                   {list_td.header: list_td, tree_td.header: tree_td})
    return mod, dict(b.params)


def tree_lstm_reference(tree, params: dict[str, np.ndarray]) -> np.ndarray:
    """The same model in NumPy over a nested `(x, [children…])` Python tree: a test oracle."""
    sig = lambda v: 1 / (1 + np.exp(-v))

    def node(t):
        x, kids = t
        states = [node(k) for k in kids]
        hidden = params["u_f"].shape[0]
        hsum = sum((h for h, _ in states), np.zeros((1, hidden), x.dtype))
        xf = x @ params["w_f"].T + params["b_f"]
        fc = sum((sig(xf + h @ params["u_f"].T) * c for h, c in states), np.zeros((1, hidden), x.dtype))
        iou = x @ params["w_iou"].T + hsum @ params["u_iou"].T + params["b_iou"]
        i, o, u = np.split(iou, 3, axis=1)
        c = sig(i) * np.tanh(u) + fc
        return sig(o) * np.tanh(c), c

    return node(tree)[0]
