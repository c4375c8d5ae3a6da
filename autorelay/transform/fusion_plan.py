"""FusionPlan: the fusion decisions of FuseOps, as plain data a search can change.

FuseOps walks op calls in dependency order and asks, for each edge producer → consumer whose
producer has no other user, whether the producer's group may join the consumer's. The answer
comes only from the plan:

* `rules`: pairs `(producer group pattern, consumer op pattern)` that may fuse, where a group's
  pattern is the highest (least fusable) `OpPattern` among its ops;
* `max_depth`: the most ops one fused function may hold;
* `disabled_edges`: specific edges `(producer index, consumer index)` never to fuse, where an
  index numbers the op calls of a function in dependency (post-)order — `candidate_edges` lists
  them, so a search can switch any subset off and measure;
* `copy_shared`: a cheap (injective) op call that several kernels read, each of them an anchor
  that takes it as a prologue under `rules`, is first copied once per reader, so each reader
  fuses its own copy: a re-layout that a residual block's first convolution and its shortcut
  both read runs inside both instead of writing a tensor for them to read back. Indices (and
  `disabled_edges`) then number the op calls after copying;
* `pool_epilogues`: a pooling layer joins the blocked convolution whose activation it reads
  (`pool_epilogue_fits` says which pairs), so the kernel pools each tile of the convolution's output
  while it is still in cache instead of writing the whole map for a pooling kernel to read back;
* `depthwise_bands`: a depthwise convolution (with its elementwise tail: bias, ReLU6) joins the
  1x1 convolution that reads it (`depthwise_band_fits` says which pairs), so each parallel unit of
  the 1x1 convolution computes the rows of the depthwise output it reads into a band buffer (tens
  of KB, in cache) instead of the depthwise kernel writing its whole map for the 1x1 to read back:
  MobileNet's depthwise-separable pairs. The 1x1 reads exactly the band's rows, so nothing is
  computed twice;
* `expansions` (with `depthwise_bands`): the convolution producing a band's depthwise input (with
  its tail; `expansion_fits` says which) joins the band's kernel too, which computes, per channel
  block of each band, the rows of that input the band reads: MobileNet-v2's inverted residual
  block (expand, depthwise, project) in one kernel, its widest map never stored. Neighbouring
  bands share the depthwise kernel's halo rows, which both compute;
* `halos`: a convolution's zero padding is folded into the kernel producing its input, which writes
  the value into the interior of a zero-bordered buffer (`autorelay.halo_plan`), so the
  convolution needs no padding pass. On by default; a plan without (`halos=False`) marks the
  fused function (`NO_HALOS`) and the graph builder stores every value plainly. A tuned kernel
  that inlines its padding as bounds tests gains nothing from the border and other readers
  address the value through the border's strides, so the layout search measures both.
* `slice_fields`: a `split` whose every use takes one field becomes one slice per field, and the
  cheap ops only those fields read are copied per field (`split_fields`), so each field fuses into
  the chain that reads it instead of a kernel copying every field to memory (an LSTM cell's four
  gates). On by default: the fields are disjoint, so the copies recompute nothing.

A group also never holds two "anchors" (ops whose pattern is COMM_REDUCE or worse): two
convolutions or a convolution and a reduction are separate kernels; the exceptions are a pooling
epilogue under `pool_epilogues` and a depthwise band (and its expansion) under `depthwise_bands`.
`FusionPlan.default()` reproduces Relay's rules: an out-elemwise-fusable op (conv2d, dense,
pooling) with its elementwise/broadcast consumers; chains of injective ops; a reduction with its
injective producers. `FusionPlan.none()` fuses nothing (each op becomes its own function).

`FusionPlan.prologues()` adds what Relay leaves out: an out-elemwise-fusable op may also take its
injective producers (`PROLOGUE_RULES`), as a reduction does. A layout transform or a flatten in
front of a convolution or a dense layer then runs inside that kernel, where the lowering inlines
it into the anchor's input (or its padding stage), instead of writing its result to memory for
the next kernel to read back. Whether that pays depends on the layer and its schedule (an input
read through a re-layout may no longer be read in vectors), so the layout search measures it per
edge (`search.fusion_choice`) and the stored plan switches off the edges that lost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from autorelay.ir.expr import Function
from autorelay.op.registry import OpPattern

E, B, I, R, O = (OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE, OpPattern.COMM_REDUCE,
                 OpPattern.OUT_ELEMWISE_FUSABLE)

RELAY_RULES: frozenset[tuple[OpPattern, OpPattern]] = frozenset(
    # injective chains: elementwise, broadcast and injective ops fuse with each other
    {(p, c) for p in (E, B, I) for c in (E, B, I)}
    # a reduction absorbs its injective producers
    | {(p, R) for p in (E, B, I)}
    # an out-elemwise-fusable op (conv2d, dense) takes its elementwise/broadcast consumers
    | {(O, E), (O, B)}
)

# an out-elemwise-fusable op (conv2d, dense, pooling) takes its injective producers as a prologue
PROLOGUE_RULES: frozenset[tuple[OpPattern, OpPattern]] = frozenset({(p, O) for p in (E, B, I)})

# the attribute a fused function carries when its plan stores every value without a border
NO_HALOS = "NoHalos"

ANCHORS = (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.TUPLE, OpPattern.OPAQUE)


@dataclass(frozen=True)
class FusionPlan:
    rules: frozenset[tuple[OpPattern, OpPattern]] = RELAY_RULES
    max_depth: int = 256
    disabled_edges: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    copy_shared: bool = False
    pool_epilogues: bool = False
    halos: bool = True
    slice_fields: bool = True
    depthwise_bands: bool = False
    expansions: bool = False

    def __post_init__(self) -> None:
        if self.max_depth < 1:
            raise ValueError(f"FusionPlan.max_depth must be at least 1, got {self.max_depth}")
        object.__setattr__(self, "rules", frozenset(self.rules))
        object.__setattr__(self, "disabled_edges", frozenset(tuple(e) for e in self.disabled_edges))
        for p, c in self.rules:
            if OpPattern.OPAQUE in (p, c):
                raise ValueError("FusionPlan.rules may not fuse OPAQUE ops")

    @staticmethod
    def default(max_depth: int = 256) -> FusionPlan:
        return FusionPlan(RELAY_RULES, max_depth)

    @staticmethod
    def prologues(max_depth: int = 256) -> FusionPlan:
        """Relay's rules and injective producers fused into the kernel they feed (see above)."""
        return FusionPlan(RELAY_RULES | PROLOGUE_RULES, max_depth)

    @staticmethod
    def none() -> FusionPlan:
        return FusionPlan(frozenset(), 1)

    def __repr__(self) -> str:
        rules = f"{len(self.rules)} rules"
        if self.rules == RELAY_RULES:
            rules = "relay"
        elif self.rules == RELAY_RULES | PROLOGUE_RULES:
            rules = "relay+prologues"
        elif not self.rules:
            rules = "none"
        off = f", disabled_edges={sorted(self.disabled_edges)}" if self.disabled_edges else ""
        copies = ", copy_shared=True" if self.copy_shared else ""
        pools = ", pool_epilogues=True" if self.pool_epilogues else ""
        plain = "" if self.halos else ", halos=False"
        whole = "" if self.slice_fields else ", slice_fields=False"
        bands = ", depthwise_bands=True" if self.depthwise_bands else ""
        grown = ", expansions=True" if self.expansions else ""
        flags = f"{copies}{pools}{plain}{whole}{bands}{grown}"
        return f"FusionPlan(rules={rules}, max_depth={self.max_depth}{off}{flags})"

    def allows(self, producer_group: OpPattern, consumer: OpPattern) -> bool:
        return (producer_group, consumer) in self.rules

    def without_edges(self, edges: Iterable[tuple[int, int]]) -> FusionPlan:
        """The same plan with some more edges switched off."""
        return replace(self, disabled_edges=self.disabled_edges | frozenset(tuple(e) for e in edges))

    def to_json(self) -> dict:
        return {
            "rules": sorted([int(p), int(c)] for p, c in self.rules),
            "max_depth": self.max_depth,
            "disabled_edges": sorted(list(e) for e in self.disabled_edges),
            **({"copy_shared": True} if self.copy_shared else {}),
            **({"pool_epilogues": True} if self.pool_epilogues else {}),
            **({} if self.halos else {"halos": False}),
            **({} if self.slice_fields else {"slice_fields": False}),
            **({"depthwise_bands": True} if self.depthwise_bands else {}),
            **({"expansions": True} if self.expansions else {}),
        }

    @staticmethod
    def from_json(data: dict) -> FusionPlan:
        return FusionPlan(
            frozenset((OpPattern(p), OpPattern(c)) for p, c in data["rules"]),
            int(data["max_depth"]),
            frozenset(tuple(e) for e in data.get("disabled_edges", ())),
            bool(data.get("copy_shared", False)),
            bool(data.get("pool_epilogues", False)),
            bool(data.get("halos", True)),
            bool(data.get("slice_fields", True)),
            bool(data.get("depthwise_bands", False)),
            bool(data.get("expansions", False)),
        )


def halos_allowed(fn: Function) -> bool:
    """Whether the graph builder may store `fn`'s values with zero borders: unless the fusion
    plan that fused it said not to (`FusionPlan.halos`)."""
    return not fn.attrs.get(NO_HALOS, 0)
