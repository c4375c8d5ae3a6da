"""The joint per-layer layout choice as a dynamic program: costs in, layouts out (nothing measured here).

The model is a `LayoutGraph`: its value-producing nodes in topological order. A conv node picks a
layout (0 = NCHW, b = NCHW{b}c) among its candidates, each with a kernel time; every other node's
layout follows from its inputs by the rules `ConvertLayout` realises a plan with, so the plan (conv
blocks only) and the cost the program minimises describe the same graph:

* `input`: 0 (a function parameter); `opaque`: 0 (reshape, dense, the output: NCHW consumers);
* `join` (a binary op of two values, e.g. a residual add): the first input's layout that is not 0,
  else 0 — the other input is transformed to it;
* `concat`: the common layout when all inputs share one, else 0 (each blocked input transformed).

Total cost = sum of the chosen kernel times + sum, over every edge whose producer's layout differs
from the layout its consumer reads it in, of that edge's transform time (`Node.transform[i]` maps
(from, to) to seconds; an equal pair costs nothing).

The program walks the nodes in order with a state per assignment of layouts to the *live* values
(produced, still to be consumed): exact for every graph, at cost layouts^(live values). A chain has
one live value; a ResNet block two (the shortcut and the branch); an Inception block one per open
branch plus the fork — small. Where the frontier is wider than `max_states`, only the `max_states`
cheapest partial assignments are kept (a beam): the answer is then an approximation and
`Solution.exact` is False.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

INPUT, CONV, JOIN, CONCAT, OPAQUE = "input", "conv", "join", "concat", "opaque"
KINDS = (INPUT, CONV, JOIN, CONCAT, OPAQUE)


@dataclass(frozen=True)
class Node:
    """One value of the graph. `kernel`: a conv's candidate layouts -> kernel seconds;
    `transform[i]`: (from layout, to layout) -> seconds to re-layout input i for this node."""

    name: str
    kind: str
    inputs: tuple[int, ...] = ()
    kernel: Mapping[int, float] = field(default_factory=dict)
    transform: tuple[Mapping[tuple[int, int], float], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"layout graph node {self.name}: unknown kind {self.kind!r}")
        if self.kind == CONV and (len(self.inputs) != 1 or not self.kernel):
            raise ValueError(f"layout graph node {self.name}: a conv has one input and candidate layouts")

    def edge(self, i: int, src: int, dst: int) -> float:
        """Seconds to bring input i from layout `src` to `dst`."""
        if src == dst:
            return 0.0
        table = self.transform[i] if i < len(self.transform) else {}
        if (src, dst) not in table:
            raise KeyError(f"layout graph node {self.name}: no transform cost for input {i} {src} -> {dst}")
        return table[(src, dst)]


def output_layout(node: Node, ins: tuple[int, ...], choice: int = 0) -> int:
    """The layout `node` produces from its inputs' layouts (`choice`: a conv's pick)."""
    if node.kind == CONV:
        return choice
    if node.kind == JOIN:
        return next((lay for lay in ins if lay != 0), 0)
    if node.kind == CONCAT:
        return ins[0] if ins and all(lay == ins[0] for lay in ins) else 0
    return 0


def node_cost(node: Node, ins: tuple[int, ...], out: int) -> tuple[float, float]:
    """(kernel seconds, transform seconds) of `node` producing `out` from inputs in `ins`."""
    kernel = node.kernel[out] if node.kind == CONV else 0.0
    return kernel, sum(node.edge(i, lay, out) for i, lay in enumerate(ins))


def _choices(node: Node, ins: tuple[int, ...]) -> list[tuple[int, float]]:
    outs = list(node.kernel) if node.kind == CONV else [output_layout(node, ins)]
    return [(out, sum(node_cost(node, ins, out))) for out in outs]


@dataclass(frozen=True)
class LayoutGraph:
    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        for k, n in enumerate(self.nodes):
            if any(not 0 <= u < k for u in n.inputs):
                raise ValueError(f"layout graph node {n.name}: inputs must be earlier nodes, got {n.inputs}")

    def convs(self) -> list[int]:
        return [k for k, n in enumerate(self.nodes) if n.kind == CONV]


@dataclass(frozen=True)
class Solution:
    cost: float
    layouts: tuple[int, ...]  # per node
    exact: bool  # False when the beam dropped partial assignments
    max_states: int  # the widest frontier met (states kept)

    def conv_layouts(self, graph: LayoutGraph) -> dict[str, int]:
        return {graph.nodes[k].name: self.layouts[k] for k in graph.convs()}


def breakdown(graph: LayoutGraph, layouts: tuple[int, ...]) -> list[tuple[float, float]]:
    """Per node, (kernel seconds, transform seconds on its inputs) under `layouts`."""
    return [node_cost(n, tuple(layouts[u] for u in n.inputs), layouts[k]) for k, n in enumerate(graph.nodes)]


def solve(graph: LayoutGraph, max_states: int = 4096) -> Solution:
    """The cheapest conv layouts (see the module docstring); exact unless the frontier outgrows
    `max_states`."""
    nodes = graph.nodes
    last_use: dict[int, int] = {}
    for k, n in enumerate(nodes):
        for u in n.inputs:
            last_use[u] = k
    live: list[int] = []
    states: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {(): (0.0, ())}
    exact, widest = True, 1
    for k, node in enumerate(nodes):
        pos = {u: i for i, u in enumerate(live)}
        kept = [u for u in live if last_use[u] != k]
        produces = k in last_use
        new_live = kept + ([k] if produces else [])
        nxt: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}
        for key, (cost, assign) in states.items():
            ins = tuple(key[pos[u]] for u in node.inputs)
            base = tuple(key[pos[u]] for u in kept)
            for out, c in _choices(node, ins):
                nkey = (*base, out) if produces else base
                total = cost + c
                if nkey not in nxt or total < nxt[nkey][0]:
                    nxt[nkey] = (total, (*assign, out))
        if len(nxt) > max_states:
            exact = False
            nxt = dict(sorted(nxt.items(), key=lambda kv: kv[1][0])[:max_states])
        widest = max(widest, len(nxt))
        states, live = nxt, new_live
    cost, assign = min(states.values(), key=lambda v: v[0])
    return Solution(cost, assign, exact, widest)


def plan_cost(graph: LayoutGraph, layouts: tuple[int, ...]) -> float:
    return sum(k + t for k, t in breakdown(graph, layouts))


def assign(graph: LayoutGraph, conv_layouts: Mapping[str, int]) -> tuple[int, ...]:
    """Every node's layout when the convs take `conv_layouts` (by name; unnamed convs: 0)."""
    out: list[int] = []
    for n in graph.nodes:
        out.append(output_layout(n, tuple(out[u] for u in n.inputs), conv_layouts.get(n.name, 0)))
    return tuple(out)


__all__ = ["CONCAT", "CONV", "INPUT", "JOIN", "KINDS", "OPAQUE", "LayoutGraph", "Node", "Solution",
           "assign", "breakdown", "node_cost", "output_layout", "plan_cost", "solve"]
