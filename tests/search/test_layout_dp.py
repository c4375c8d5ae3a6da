"""The layout dynamic program against brute-force enumeration of every conv's layout, on small
graphs (chains, ResNet residual blocks, a 3-branch concatenation, a graph that is not
series-parallel) with random costs. The oracle below re-derives each node's layout and cost on its
own, from the rules stated in `search.layout_dp`'s docstring, and tries every assignment. As in a
model, every edge leaving a node carries that node's value, with the same transform costs, so a
value read in one layout by two consumers is transformed once."""

from __future__ import annotations

import itertools
import random

import pytest

from search.layout_dp import (
    CONCAT,
    CONV,
    INPUT,
    JOIN,
    OPAQUE,
    LayoutGraph,
    Node,
    assign,
    breakdown,
    output_layout,
    solve,
)

LAYOUTS = (0, 8, 16)


class Builder:
    def __init__(self, rng: random.Random, layouts: tuple[int, ...] = LAYOUTS) -> None:
        self.rng, self.layouts, self.nodes = rng, layouts, []

        self.relayout: list[dict] = []  # per node: (from, to) -> seconds to re-layout its value

    def add(self, kind: str, *inputs: int, channels: tuple[int, ...] = ()) -> int:
        kernel = {}
        if kind == CONV:
            cands = [lay for lay in self.layouts if self.rng.random() < 0.8] or [0]
            kernel = {lay: self.rng.uniform(0.5, 10.0) for lay in cands}
        pairs = [(a, b) for a in self.layouts for b in self.layouts if a != b]
        self.relayout.append({p: self.rng.uniform(0.0, 3.0) for p in pairs})
        self.nodes.append(Node(f"n{len(self.nodes)}", kind, tuple(inputs), kernel,
                               tuple(self.relayout[u] for u in inputs), tuple(inputs), channels))
        return len(self.nodes) - 1

    def graph(self) -> LayoutGraph:
        return LayoutGraph(tuple(self.nodes))


def brute_force(graph: LayoutGraph) -> tuple[float, tuple[int, ...]]:
    convs = [k for k, n in enumerate(graph.nodes) if n.kind == CONV]
    best = (float("inf"), ())
    for picks in itertools.product(*[list(graph.nodes[k].kernel) for k in convs]):
        chosen = dict(zip(convs, picks))
        lay: list[int] = []
        total = 0.0
        made: set[tuple[int, int]] = set()  # (producer, layout) transforms already emitted
        for k, n in enumerate(graph.nodes):
            ins = [lay[u] for u in n.inputs]
            if n.kind == CONV:
                out = chosen[k]
                total += n.kernel[out]
            elif n.kind == JOIN:
                nonzero = [x for x in ins if x]
                out = nonzero[0] if nonzero else 0
            elif n.kind == CONCAT and n.channels:  # the blocks as built: shrunk to divisors
                built = {max((d for d in range(1, x + 1) if c % d == 0), default=0)
                         for c, x in zip(n.channels, ins)}
                out = built.pop() if len(built) == 1 else 0
                out = out if out in LAYOUTS else 0
            elif n.kind == CONCAT:
                out = ins[0] if len(set(ins)) == 1 else 0
            else:
                out = 0
            for i, (u, x) in enumerate(zip(n.inputs, ins)):
                if x != out and (u, out) not in made:
                    total += n.transform[i][(x, out)]
                    made.add((u, out))
            lay.append(out)
        if total < best[0]:
            best = (total, tuple(lay))
    return best


def chain(b: Builder, x: int, n: int) -> int:
    for _ in range(n):
        x = b.add(CONV, x)
    return x


def residual(b: Builder, x: int, downsample: bool) -> int:
    y = chain(b, x, 2)
    short = b.add(CONV, x) if downsample else x
    return b.add(JOIN, y, short)


def inception(b: Builder, x: int, branches: int = 3) -> int:
    outs = [chain(b, x, 1 + i % 2) for i in range(branches)]
    return b.add(CONCAT, *outs)


def _check(graph: LayoutGraph) -> None:
    sol = solve(graph)
    want, _ = brute_force(graph)
    assert sol.exact
    assert sol.cost == pytest.approx(want, rel=1e-12, abs=1e-12)
    # the DP's assignment really costs what it claims (recomputed node by node)
    assert sum(k + t for k, t in breakdown(graph, sol.layouts)) == pytest.approx(sol.cost, rel=1e-12)
    assert len(sol.layouts) == len(graph.nodes)


@pytest.mark.parametrize("seed", range(40))
def test_chain_matches_brute_force(seed: int) -> None:
    b = Builder(random.Random(seed))
    x = chain(b, b.add(INPUT), 1 + seed % 6)
    b.add(OPAQUE, x)
    _check(b.graph())


@pytest.mark.parametrize("seed", range(40))
def test_residual_blocks_match_brute_force(seed: int) -> None:
    b = Builder(random.Random(100 + seed))
    x = b.add(CONV, b.add(INPUT))
    for i in range(2):
        x = residual(b, x, downsample=(seed + i) % 2 == 0)
    b.add(OPAQUE, x)
    _check(b.graph())


@pytest.mark.parametrize("seed", range(40))
def test_three_branch_concat_matches_brute_force(seed: int) -> None:
    b = Builder(random.Random(200 + seed))
    x = inception(b, b.add(CONV, b.add(INPUT)), 3)
    x = b.add(CONV, x)
    b.add(OPAQUE, x)
    _check(b.graph())


@pytest.mark.parametrize("seed", range(25))
def test_concat_of_channel_counts_matches_brute_force(seed: int) -> None:
    """With channel counts, a concatenation stays blocked where its inputs' blocks, shrunk to
    divisors of their channels, agree: 16 on 8 channels joins 8 on 24."""
    rng = random.Random(500 + seed)
    b = Builder(rng)
    x = b.add(CONV, b.add(INPUT))
    for _ in range(2):
        outs = [chain(b, x, 1 + i % 2) for i in range(3)]
        x = b.add(CONCAT, *outs, channels=tuple(rng.choice([8, 16, 24, 32]) for _ in outs))
    b.add(OPAQUE, b.add(CONV, x))
    _check(b.graph())


def test_concat_follows_the_blocks_as_built() -> None:
    to = {(a, c): 1.0 for a in LAYOUTS for c in LAYOUTS if a != c}
    node = Node("cat", CONCAT, (0, 1), {}, (to, to), (0, 1), channels=(8, 16))
    assert output_layout(node, (16, 16)) == 0  # NCHW8c and NCHW16c: not one layout
    assert output_layout(node, (16, 8)) == 8 and output_layout(node, (8, 8)) == 8
    assert output_layout(node, (0, 8)) == 0
    assert output_layout(Node("cat", CONCAT, (0, 1), {}, (to, to), (0, 1)), (16, 16)) == 16  # no counts
    odd = Node("cat", CONCAT, (0, 1), {}, (to, to), (0, 1), channels=(12, 12))
    assert output_layout(odd, (8, 8)) == 0  # built as NCHW4c, which no candidate names


@pytest.mark.parametrize("seed", range(25))
def test_random_dag_matches_brute_force(seed: int) -> None:
    """Not series-parallel: values consumed far downstream by joins keep several values live."""
    rng = random.Random(300 + seed)
    b = Builder(rng)
    vals = [b.add(INPUT)]
    for _ in range(7):
        kind = rng.choice([CONV, CONV, CONV, JOIN, CONCAT])
        if kind == CONV or len(vals) < 2:
            vals.append(b.add(CONV, rng.choice(vals)))
        else:
            vals.append(b.add(kind, *rng.sample(vals, 2)))
    b.add(OPAQUE, vals[-1])
    _check(b.graph())


def test_two_layouts_only_and_ties() -> None:
    """Candidates differ per conv (a layer may lack a block); equal costs still give the optimum."""
    for seed in range(20):
        b = Builder(random.Random(400 + seed), layouts=(0, 8))
        x = residual(b, chain(b, b.add(INPUT), 2), True)
        b.add(OPAQUE, inception(b, x, 2))
        _check(b.graph())


def test_beam_is_flagged_as_approximate() -> None:
    b = Builder(random.Random(7))
    x = b.add(INPUT)
    outs = [b.add(CONV, x) for _ in range(6)]  # six values live at once: 3^6 states
    b.add(OPAQUE, b.add(CONCAT, *outs))
    g = b.graph()
    exact = solve(g)
    beam = solve(g, max_states=4)
    assert exact.exact and not beam.exact
    assert beam.cost >= exact.cost - 1e-12
    assert exact.cost == pytest.approx(brute_force(g)[0])


def test_rejects_forward_references() -> None:
    with pytest.raises(ValueError, match="earlier nodes"):
        LayoutGraph((Node("a", OPAQUE, (1,)), Node("b", INPUT)))


def test_a_value_read_in_one_layout_by_two_consumers_is_transformed_once() -> None:
    """A residual block whose input comes in NCHW and whose convs run in blocks of 16: the first
    conv and the join read the input in 16c, which `ConvertLayout` transforms once."""
    to16 = {(0, 16): 1.0, (16, 0): 1.0}
    nodes = [Node("x", INPUT), Node("stem", CONV, (0,), {0: 5.0}, (to16,), (0,)),
             Node("a", CONV, (1,), {0: 10.0, 16: 8.75}, (to16,), (1,)),
             Node("b", CONV, (2,), {0: 10.0, 16: 8.75}, (to16,), (2,)),
             Node("add", JOIN, (3, 1), {}, (to16, to16), (3, 1)),
             Node("out", OPAQUE, (4,), {}, (to16,), (4,))]
    g = LayoutGraph(tuple(nodes))
    layouts = (0, 0, 16, 16, 16, 0)
    # stem's value to 16c once (for `a` and the join), the join's output back to NCHW once
    assert breakdown(g, layouts) == [(0.0, 0.0), (5.0, 0.0), (8.75, 1.0), (8.75, 0.0), (0.0, 0.0), (0.0, 1.0)]
    sol = solve(g)
    assert sol.layouts == layouts and sol.cost == pytest.approx(24.5)  # against 25 all in NCHW
    # edges that carry values of their own each pay: the blocked plan then costs 25.5, NCHW wins
    apart = LayoutGraph(tuple(Node(n.name, n.kind, n.inputs, n.kernel, n.transform) for n in nodes))
    assert sum(t for _, t in breakdown(apart, layouts)) == pytest.approx(3.0)
    assert solve(apart).layouts == (0,) * 6


def test_assign_refuses_a_layout_a_conv_does_not_offer() -> None:
    """A conv in a layout outside its candidates would have no kernel time, and a concatenation
    after it would quietly be modelled in NCHW: named instead."""
    to = {(0, 8): 0.1, (8, 0): 0.1}
    g = LayoutGraph((Node("x", INPUT), Node("conv", CONV, (0,), {0: 1.0, 8: 0.5}, (to,), (0,))))
    assert assign(g, {"conv": 8}) == (0, 8)
    with pytest.raises(ValueError, match=r"node conv: layout 16 is not one of its candidates \[0, 8\]"):
        assign(g, {"conv": 16})
