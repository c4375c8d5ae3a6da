"""Which depthwise bands take their expansion in (`FusionPlan.expansions`), decided per block from
kernel times measured in place.

An expanded band kernel runs a whole inverted residual block (expansion, depthwise, projection):
the expanded map is never stored, but each parallel unit computes its depthwise halo rows of the
expansion again. Which side wins depends on the block: on MobileNet-v2 (Zen 3, 2 threads, tuned
kernels) every expansion fused ran 0.8 ms slower end to end than none, while those on the largest
maps alone ran about 0.1 ms faster. Timing every subset end to end is out of reach, so:

1. the layout search's best fusion variant is built once more with every expansion of its bands;
2. both builds are profiled kernel by kernel, alternately (`kernel_profiles.profile_keys`);
3. an expansion is kept where its expanded kernel ran faster than the two kernels it replaces
   (the expansion's and the band's), matched by the shapes of their convolutions
   (`faster_expansions`): blocks of equal shapes are one workload, and get one answer;
4. the variant with those expansions is one more finalist of the search's end-to-end timing, which
   has the last word (kernel times in place still miss how a kernel leaves the cache for the next).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autorelay.ir.expr import Call, Expr, Function
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import post_order
from autorelay.lower import workload_key
from autorelay.transform.util import op_name, tensor_type

Edge = tuple[int, int]
# per convolution of a kernel, in program order: (its data shape, its weight shape)
Signature = tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]


@dataclass(frozen=True)
class Expansion:
    """An expansion edge's facts: the rows of the expanded map, the band edge it joins, and the
    convolutions of the expanded kernel it would make (expansion, depthwise, 1x1)."""

    rows: int
    band: Edge
    convs: Signature


def conv_signature(convs: Sequence[Expr]) -> Signature:
    """The (data shape, weight shape) of each convolution."""
    return tuple((tuple(tensor_type(c.args[0]).shape), tuple(tensor_type(c.args[1]).shape))  # type: ignore[attr-defined,union-attr]
                 for c in convs)


def kernel_signatures(module: IRModule) -> dict[str, Signature]:
    """Each kernel of a fused module's `@main` that holds convolutions, by workload key."""
    out = {}
    for node in post_order(module["main"].body):
        if isinstance(node, Call) and isinstance(node.op, Function) and node.op.is_primitive:
            convs = [n for n in post_order(node.op.body) if op_name(n) == "nn.conv2d"]
            if convs:
                out[workload_key(node.op)] = conv_signature(convs)
    return out


def faster_expansions(expansions: dict[Edge, Expansion], banded: tuple[IRModule, dict[str, float]],
                      expanded: tuple[IRModule, dict[str, float]]) -> dict[Edge, tuple[float, float]]:
    """The expansion edges whose expanded kernel (in `expanded`: a fused module and its kernel
    times by workload key) ran faster than its expansion's kernel and band's kernel together (in
    `banded`), each with (the expanded kernel's seconds, the pair's); an edge whose kernels are
    missing from either build is left out."""
    def by_signature(build: tuple[IRModule, dict[str, float]]) -> dict[Signature, float]:
        module, times = build
        found: dict[Signature, list[float]] = {}
        for key, sig in kernel_signatures(module).items():
            if key in times:
                found.setdefault(sig, []).append(times[key])
        return {sig: statistics.median(ts) for sig, ts in found.items()}

    apart, together = by_signature(banded), by_signature(expanded)
    out = {}
    for edge, ex in expansions.items():
        whole, first, rest = together.get(ex.convs), apart.get(ex.convs[:1]), apart.get(ex.convs[1:])
        if whole is not None and first is not None and rest is not None and whole < first + rest:
            out[edge] = (whole, first + rest)
    return out


__all__ = ["Expansion", "conv_signature", "faster_expansions", "kernel_signatures"]
