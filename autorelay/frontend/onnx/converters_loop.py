"""ONNX `Loop` and `Scan` as recursive closures, run by the VM.

Why closures: the IR's control flow is functional (Relay's). A loop is `let %loop = fn (%i, carried...)
{ if (go) { %loop(%i + 1, body...) } else { (carried...) } }; %loop(0, initial...)`; the body reads
the enclosing graph's values through the closure (`GraphBuilder.subgraph` converts it in scope).

Two things make ONNX loops more than that:

* A carried value may change extents between iterations (a Slice by the iteration number gives `?`
  extents): its parameter gets the join of its types before and after an iteration (`?` where they
  differ), found by converting the body again until the types settle. Dtype and rank must hold.
* Scan outputs (a value per iteration, stacked along a new axis) are carried too, typed
  `(?, *shape)`, started empty and grown by one concatenation per iteration; the VM compiles that
  once per length it meets (the empty start is dropped from the concatenation when specialised).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView, extent_scalar, normalize_axis, registrar
from autorelay.ir.expr import Call, Constant, Expr, Function, If, Let, Var
from autorelay.ir.types import TensorType, TupleType, Type
from autorelay.ir.visitor import ExprMutator
from autorelay.op.shape_utils import ANY

TABLE: dict = {}
_reg = registrar(TABLE)
_I64 = TensorType((), "int64")

# the body, converted with the carried values bound to these vars: (next carried values, other outputs)
Body = Callable[[list[Var]], tuple[list[Expr], list[Expr]]]


def _join(node: NodeView, k: int, before: Type, after: Type) -> Type:
    """A type holding both: `?` where the extents differ; dtype and rank must agree."""
    if before == after:
        return before
    if not (isinstance(before, TensorType) and isinstance(after, TensorType)
            and before.dtype == after.dtype and before.ndim == after.ndim):
        raise node.fail(f"loop-carried value {k} is {before} before an iteration and {after} after it; "
                        "it must keep its dtype and rank")
    return TensorType(tuple(a if a == b else ANY for a, b in zip(before.shape, after.shape)), before.dtype)


def _settle(g: GraphBuilder, node: NodeView, names: list[str], init: list[Expr],
            body: Body) -> tuple[list[Var], list[Expr], list[Expr]]:
    """The carried vars (typed to hold every iteration's values), the body's next values for them
    and its other outputs, converting the body until the carried types stop widening."""
    types = [g.type_of(e) for e in init]
    for _ in range(2 + max((len(t.shape) for t in types if isinstance(t, TensorType)), default=0)):
        vs = [Var(n, t) for n, t in zip(names, types)]
        nxt, rest = body(vs)
        joined = [_join(node, k, t, g.type_of(e)) for k, (t, e) in enumerate(zip(types, nxt))]
        if joined == types:
            return vs, nxt, rest
        types = joined
    raise node.fail("the loop-carried types do not settle")  # unreachable: each round adds a `?`


def _stacks(g: GraphBuilder, node: NodeView, per_iter: list[Expr],
            prepend: list[bool]) -> tuple[list[Var], list[Expr], list[Expr]]:
    """Scan-output accumulators: their vars `(?, *shape)`, empty start values, grown values."""
    accs, empties, grown = [], [], []
    for k, (o, front) in enumerate(zip(per_iter, prepend)):
        t = g.tensor_type(o)
        acc = Var(f"scan_out{k}", TensorType((ANY, *t.shape), t.dtype))
        zeros = (0, *(d if isinstance(d, int) else 0 for d in t.shape))  # `?` extents: 0, dropped later
        one = g.call("expand_dims", o, axis=0)
        accs.append(acc)
        empties.append(g.const(np.zeros(zeros, t.dtype)))
        grown.append(g.call("concatenate", g.tuple([one, acc] if front else [acc, one]), axis=0))
    return accs, empties, grown


def _closure(g: GraphBuilder, counters: list[Var], carried: list[Var], go: Expr, again_args: list[Expr],
             start_args: list[Expr], enclosing: frozenset[int]) -> list[Expr]:
    """`let %outer = ...; let %loop = fn (counters..., carried...) { if (go) { %loop(again...) } else
    { (carried...) } }; %loop(start...)`, projected to the carried values.

    The body reads the enclosing graph's values (the ids in `enclosing`); each is bound by a `let`
    before the loop and read through the closure. Read in place, it would be computed again on
    every iteration: Mask R-CNN's paste loop ran the whole box head (two NonMaxSuppressions over
    tens of thousands of boxes) once per detection."""
    types = tuple(v.type_annotation for v in carried)
    ret = types[0] if len(carried) == 1 else TupleType(types)  # type: ignore[arg-type]
    loop = Var("loop")
    again = g.record(Call(loop, tuple(again_args)), ret)
    done = carried[0] if len(carried) == 1 else g.tuple(carried)
    outer = _Enclosing(g, enclosing)
    fn = Function((*counters, *carried), outer.visit(g.record(If(go, again, done), ret)), ret)
    result = g.record(Let(loop, fn, g.record(Call(loop, tuple(start_args)), ret)), ret)
    for v, value in reversed(outer.bound):
        result = g.record(Let(v, value, result), ret)
    return [result] if len(carried) == 1 else [g.item(result, k) for k in range(len(carried))]


class _Enclosing(ExprMutator):
    """Replaces each enclosing value a loop body reads by a variable (`bound`: the lets to make)."""

    def __init__(self, g: GraphBuilder, enclosing: frozenset[int]) -> None:
        super().__init__()
        self.g, self.enclosing = g, enclosing
        self.bound: list[tuple[Var, Expr]] = []

    def visit(self, expr: Expr) -> Expr:
        if id(expr) in self.enclosing and not isinstance(expr, Var | Constant | Function):
            if id(expr) not in self.memo:
                v = Var(f"outer{len(self.bound)}", self.g.type_of(expr))
                self.bound.append((v, expr))
                self.memo[id(expr)] = (expr, v)
            return self.memo[id(expr)][1]
        return super().visit(expr)


@_reg("Loop")
def _loop(g: GraphBuilder, node: NodeView) -> list[Expr]:
    """ONNX Loop: counters (iteration number, condition), then the state, then the scan outputs."""
    body = node.attr("body")
    if body is None:
        raise node.fail("the body attribute is required")
    state = list(node.inputs[2:])
    if any(e is None for e in state):
        raise node.fail("every loop-carried initial value is required")
    n_scan = len(body.output) - 1 - len(state)
    if n_scan < 0 or len(body.input) != 2 + len(state):
        raise node.fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs, "
                        f"expected {2 + len(state)} and at least {1 + len(state)}")
    i, c = Var("loop_i", _I64), Var("loop_cond", TensorType((), "bool"))
    enclosing = g.built()

    def convert(vs: list[Var]) -> tuple[list[Expr], list[Expr]]:
        bind = {body.input[0].name: i, body.input[1].name: c,
                **{vi.name: v for vi, v in zip(body.input[2:], vs)}}
        outs = g.subgraph(body, bind)
        return outs[1:1 + len(vs)], [outs[0], *outs[1 + len(vs):]]

    vs, new_state, (cond_out, *per_iter) = _settle(g, node, [f"loop_v{k}" for k in range(len(state))],
                                                   state, convert)  # type: ignore[arg-type]
    cond_out = _scalar(g, cond_out, "bool", node, "the body's condition")
    accs, empties, grown = _stacks(g, node, per_iter, [False] * n_scan)
    go: Expr = c
    trip = node.input(0)
    if trip is not None:
        go = g.call("logical_and", c, g.call("less", i, _scalar(g, trip, "int64", node, "M")))
    first = node.input(1)
    cond0 = g.const(np.array(True)) if first is None else _scalar(g, first, "bool", node, "cond")
    step = g.call("add", i, g.const(np.array(1, "int64")))
    return _closure(g, [i, c], [*vs, *accs], go, [step, cond_out, *new_state, *grown],
                    [g.const(np.array(0, "int64")), cond0, *state, *empties], enclosing)  # type: ignore[list-item]


@_reg("Scan")
def _scan(g: GraphBuilder, node: NodeView) -> list[Expr]:
    """ONNX Scan (opset >= 9): the body runs once per slice of the scan inputs along their scan axes
    (backwards for direction 1), carrying the state; scan outputs are stacked along their output
    axes (prepended for direction 1). The sequence length is the scan inputs' extent there, read at
    run time (`shape_of`) when it is not static."""
    if node.opset < 9:
        raise node.fail("opset 8 Scan (a batch axis and sequence_lens) is not supported; opset >= 9 is")
    body, m = node.attr("body"), node.attr("num_scan_inputs")
    if body is None or m is None:
        raise node.fail("the body and num_scan_inputs attributes are required")
    n = len(node.inputs) - m
    state, xs = list(node.inputs[:n]), list(node.inputs[n:])
    if n < 0 or any(e is None for e in node.inputs) or len(body.input) != len(node.inputs):
        raise node.fail(f"{len(node.inputs)} inputs (all required) for num_scan_inputs={m} and a body "
                        f"taking {len(body.input)}")
    k_out = len(body.output) - n
    in_axes = _ints_attr(node, "scan_input_axes", m, 0)
    in_dirs = _ints_attr(node, "scan_input_directions", m, 0)
    out_axes = _ints_attr(node, "scan_output_axes", k_out, 0)
    out_dirs = _ints_attr(node, "scan_output_directions", k_out, 0)
    for what, dirs in (("scan_input_directions", in_dirs), ("scan_output_directions", out_dirs)):
        if any(d not in (0, 1) for d in dirs):
            raise node.fail(f"{what}={dirs}: each direction must be 0 (forward) or 1 (reverse)")
    in_axes = [normalize_axis(g, a, g.ndim(x), "scan_input_axes") for a, x in zip(in_axes, xs)]
    length = _sequence_length(g, node, xs, in_axes)  # type: ignore[arg-type]
    i = Var("scan_i", _I64)
    last = g.call("subtract", length, g.const(np.array(1, "int64")))
    enclosing = g.built()  # `last` too: the reversed slices read it
    slices = [g.call("take", x, i if not d else g.call("subtract", last, i), axis=a, mode="clip")
              for x, a, d in zip(xs, in_axes, in_dirs)]

    def convert(vs: list[Var]) -> tuple[list[Expr], list[Expr]]:
        bind = {vi.name: v for vi, v in zip(body.input, [*vs, *slices])}
        outs = g.subgraph(body, bind)
        return outs[:n], outs[n:]

    vs, new_state, per_iter = _settle(g, node, [f"scan_v{k}" for k in range(n)], state,  # type: ignore[arg-type]
                                      convert)
    accs, empties, grown = _stacks(g, node, per_iter, [bool(d) for d in out_dirs])
    step = g.call("add", i, g.const(np.array(1, "int64")))
    outs = _closure(g, [i], [*vs, *accs], g.call("less", i, length), [step, *new_state, *grown],
                    [g.const(np.array(0, "int64")), *state, *empties], enclosing)  # type: ignore[list-item]
    for k, a in enumerate(out_axes):
        stacked = outs[n + k]
        rank = g.ndim(stacked)
        a = normalize_axis(g, a, rank, "scan_output_axes")
        if a:  # the stacking axis 0 moves to `a`
            perm = [*range(1, a + 1), 0, *range(a + 1, rank)]
            outs[n + k] = g.call("transpose", stacked, axes=tuple(perm))
    return outs


def _ints_attr(node: NodeView, name: str, count: int, default: int) -> list[int]:
    value = node.attr(name)
    if value is None:
        return [default] * count
    if len(value) != count:
        raise node.fail(f"{name} has {len(value)} entries, expected {count}")
    return [int(v) for v in value]


def _sequence_length(g: GraphBuilder, node: NodeView, xs: list[Expr], axes: list[int]) -> Expr:
    """The number of iterations as an int64 scalar: the scan inputs' extent on their scan axes."""
    if not xs:
        raise node.fail("num_scan_inputs must be at least 1")
    known = {g.shape(x)[a] for x, a in zip(xs, axes) if isinstance(g.shape(x)[a], int)}
    if len(known) > 1:
        raise node.fail(f"the scan inputs have different extents {sorted(known)} on their scan axes")
    if known:
        return g.const(np.array(known.pop(), "int64"))
    return extent_scalar(g, xs[0], axes[0])


def _scalar(g: GraphBuilder, e: Expr, dtype: str, node: NodeView, what: str) -> Expr:
    """`e` as a scalar of `dtype` (ONNX passes trip counts and conditions as () or (1,) tensors)."""
    if g.dtype(e) != dtype or any(d != 1 for d in g.shape(e)):
        raise node.fail(f"{what} must be one {dtype} value, got {g.type_of(e)}")
    return g.call("reshape", e, newshape=()) if g.ndim(e) else e


__all__ = ["TABLE"]
