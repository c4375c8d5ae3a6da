"""The joint per-layer layout choice as a dynamic program: costs in, layouts out (nothing measured here).

The model is a `LayoutGraph`: its value-producing nodes in topological order. A conv node picks a
layout (0 = NCHW, b = NCHW{b}c) among its candidates, each with a kernel time; every other node's
layout follows from its inputs by the rules `ConvertLayout` realises a plan with, so the plan (conv
blocks only) and the cost the program minimises describe the same graph:

* `input`: 0 (a function parameter); `opaque`: 0 (reshape, dense, the output: NCHW consumers);
* `join` (a binary op of two values, e.g. a residual add): the first input's layout that is not 0,
  else 0 — the other input is transformed to it;
* `concat`: the common layout when all inputs share one, else 0 (each blocked input transformed).
  Given the inputs' channel counts, "one layout" is the one `ConvertLayout` emits: each block shrunk
  to a divisor of its input's channels (blocks of 16 on 8 and on 16 channels are two layouts; a
  block of 16 on 8 channels and a block of 8 are one, and the result takes the label 8).

Total cost = sum of the chosen kernel times + sum, over every edge whose producer's layout differs
from the layout its consumer reads it in, of that edge's transform time (`Node.transform[i]` maps
(from, to) to seconds; an equal pair costs nothing). Edges that carry the same value (`Node.values`:
a residual block's input read by its first conv and by the join) share one transform to a layout,
as `ConvertLayout` emits it once: the first consumer in node order pays it.

The program walks the nodes in order with a state per assignment of layouts to the *live* values
(produced, still to be consumed), and the transforms of live values already made: exact for every
graph, at cost (layouts x transforms made)^(live values). A chain has one live value; a ResNet block
two (the shortcut and the branch); an Inception block one per open branch plus the fork — small.
Where the frontier is wider than `max_states`, only the `max_states` cheapest partial assignments
are kept (a beam): the answer is then an approximation and `Solution.exact` is False.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from autorelay.transform.convert_layout import channel_block

INPUT, CONV, JOIN, CONCAT, OPAQUE = "input", "conv", "join", "concat", "opaque"
KINDS = (INPUT, CONV, JOIN, CONCAT, OPAQUE)


@dataclass(frozen=True)
class Node:
    """One value of the graph. `kernel`: a conv's candidate layouts -> kernel seconds;
    `transform[i]`: (from layout, to layout) -> seconds to re-layout input i for this node;
    `values[i]`: the value input i carries (edges carrying the same one share its transforms),
    None or absent: a value of its own."""

    name: str
    kind: str
    inputs: tuple[int, ...] = ()
    kernel: Mapping[int, float] = field(default_factory=dict)
    transform: tuple[Mapping[tuple[int, int], float], ...] = ()
    values: tuple[Hashable | None, ...] = ()
    channels: tuple[int, ...] = ()  # concat: each input's channel count (() : labels are the layouts)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"layout graph node {self.name}: unknown kind {self.kind!r}")
        if self.kind == CONV and (len(self.inputs) != 1 or not self.kernel):
            raise ValueError(f"layout graph node {self.name}: a conv has one input and candidate layouts")

    def value(self, i: int, k: int) -> Hashable:
        """What input i of this node (node k) carries: its `values` entry, else the edge itself."""
        v = self.values[i] if i < len(self.values) else None
        return ("edge", k, i) if v is None else v

    def seconds(self, out: int) -> float:
        """Kernel seconds of this node producing layout `out` (a conv's candidate; others are free)."""
        return self.kernel[out] if self.kind == CONV else 0.0

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
        return _concat_layout(node, ins)
    return 0


def _concat_layout(node: Node, ins: tuple[int, ...]) -> int:
    """A concatenation stays in its inputs' layout when they share one (see the module docstring),
    as the candidate layout of that block; else, or when no candidate is that block, NCHW."""
    if not ins:
        return 0
    if not node.channels:
        return ins[0] if all(lay == ins[0] for lay in ins) else 0
    actual = {channel_block(c, lay) for c, lay in zip(node.channels, ins)}
    block = actual.pop() if len(actual) == 1 else 0
    candidates = {src for table in node.transform for src, _ in table}
    return block if block in candidates else 0


Made = frozenset[tuple[Hashable, int]]  # (value, layout): transforms already emitted


def _transforms(node: Node, k: int, ins: tuple[int, ...], out: int, made: Made) -> tuple[float, Made]:
    """Seconds of the transforms node k needs to read its inputs (in layouts `ins`) in `out`, those
    in `made` being free; and `made` with the ones it emitted."""
    cost, new = 0.0, set()
    for i, lay in enumerate(ins):
        key = (node.value(i, k), out)
        if lay != out and key not in made and key not in new:
            cost += node.edge(i, lay, out)
            new.add(key)
    return cost, made | new if new else made


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
    """Per node, (kernel seconds, transform seconds on its inputs) under `layouts` (a transform
    shared by several consumers counted at the first)."""
    made: Made = frozenset()
    out = []
    for k, n in enumerate(graph.nodes):
        t, made = _transforms(n, k, tuple(layouts[u] for u in n.inputs), layouts[k], made)
        out.append((n.seconds(layouts[k]), t))
    return out


def solve(graph: LayoutGraph, max_states: int = 4096) -> Solution:
    """The cheapest conv layouts (see the module docstring); exact unless the frontier outgrows
    `max_states`."""
    nodes = graph.nodes
    last_use: dict[int, int] = {}
    last_read: dict[Hashable, int] = {}  # value -> the last node reading it (its transforms die there)
    for k, n in enumerate(nodes):
        for i, u in enumerate(n.inputs):
            last_use[u] = k
            last_read[n.value(i, k)] = k
    live: list[int] = []
    State = tuple[tuple[int, ...], Made]  # the live values' layouts, the transforms made of them
    states: dict[State, tuple[float, tuple[int, ...]]] = {((), frozenset()): (0.0, ())}
    exact, widest = True, 1
    for k, node in enumerate(nodes):
        pos = {u: i for i, u in enumerate(live)}
        kept = [u for u in live if last_use[u] != k]
        produces = k in last_use
        new_live = kept + ([k] if produces else [])
        nxt: dict[State, tuple[float, tuple[int, ...]]] = {}
        for (key, made), (cost, assign) in states.items():
            ins = tuple(key[pos[u]] for u in node.inputs)
            base = tuple(key[pos[u]] for u in kept)
            for out in (list(node.kernel) if node.kind == CONV else [output_layout(node, ins)]):
                t, now = _transforms(node, k, ins, out, made)
                total = cost + t + node.seconds(out)
                nkey = ((*base, out) if produces else base, frozenset(m for m in now if last_read[m[0]] > k))
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
        choice = conv_layouts.get(n.name, 0)
        if n.kind == CONV and choice not in n.kernel:  # else a concatenation would quietly read NCHW
            raise ValueError(f"layout graph node {n.name}: layout {choice} is not one of its candidates "
                             f"{sorted(n.kernel)}")
        out.append(output_layout(n, tuple(out[u] for u in n.inputs), choice))
    return tuple(out)


__all__ = ["CONCAT", "CONV", "INPUT", "JOIN", "KINDS", "OPAQUE", "LayoutGraph", "Node", "Solution",
           "assign", "breakdown", "output_layout", "plan_cost", "solve"]
