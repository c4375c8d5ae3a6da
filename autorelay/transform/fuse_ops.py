"""FuseOps: group op calls into primitive functions, each one kernel.

Every op call ends up in exactly one group; a group becomes
`Function(params, body, attrs={"Primitive": 1})` called from the main function with the group's
outside inputs (constants stay inside, as weights the kernel can pack at build time).

Grouping is greedy over a dependency order: for each op call `c` and each argument `a` that is an
op call with `c` as its *only* user, `a`'s group joins `c`'s when the `FusionPlan` allows the pair
(group pattern, pattern of `c`), the edge is not disabled, the merged group keeps at most one
anchor and at most `max_depth` ops. Then an argument with several users joins too when every one
of its users is already in `c`'s group: a diamond that closes inside the group, as GELU's
`x * (1 + erf(x / √2)) / 2` reads the dense output `x` twice. So every group has one output, its
last op, and every other member's users are members: no merge can create a cycle through outside
nodes. A tuple that feeds an injective op (concatenate's input) joins that op's group.

With `FusionPlan.pool_epilogues`, a max pooling joins the group of the convolution whose activation
it reads (a second anchor, the group's last op; `pool_epilogue_fits` says which pairs).

With `FusionPlan.depthwise_bands`, a depthwise convolution's group (the convolution and its
elementwise tail) joins the 1x1 convolution that reads it (`depthwise_band_fits`). The depthwise
part then counts as the 1x1's prologue, not as a second anchor, so the 1x1's own epilogue (bias,
a residual add) still joins; a banded group takes no pooling epilogue and joins no other band.
With `FusionPlan.expansions` as well, the group of the convolution producing the depthwise
convolution's input (`expansion_fits`) then joins the band's kernel too, unless its edge into the
depthwise convolution is disabled.

With `FusionPlan.slice_fields` (the default), a `split` whose uses each take one field becomes one
slice per field first (`split_fields`), so each field fuses into the chain that reads it.

With `FusionPlan.copy_shared`, a cheap producer that several anchors read as their prologue is
first copied once per reader (`copy_shared_producers`), so that each fuses its own copy.

`let`, `if`, `match`, calls of functions and nested functions are boundaries; nested non-primitive
functions are fused on their own. Existing primitive functions are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, Var
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import OpPattern
from autorelay.transform.fusion_graph import op_pattern, readers_of, region_order
from autorelay.transform.fusion_pairs import (
    depthwise_band_fits,
    expansion_fits,
    pool_epilogue_fits,
    pools_an_activation,
)
from autorelay.transform.fusion_plan import ANCHORS, NO_HALOS, FusionPlan
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.split_fields import slice_split_fields
from autorelay.transform.util import op_name

PRIMITIVE = Attrs({"Primitive": 1})


@dataclass
class _Group:
    root: Expr
    members: list[Expr] = field(default_factory=list)
    pattern: OpPattern = OpPattern.ELEMWISE
    anchors: int = 0
    ops: int = 0
    banded: bool = False  # holds a depthwise band (`FusionPlan.depthwise_bands`)


class _Grouping:
    """Union-find over the op calls of one region, driven by a FusionPlan."""

    def __init__(self, body: Expr, plan: FusionPlan) -> None:
        self.plan = plan
        # the body the groups are of
        self.body = copy_shared_producers(slice_split_fields(body, plan), plan)
        order = region_order(self.body)
        self.calls = [n for n in order if op_pattern(n) is not None]  # op calls, as edges number them
        self.index = {id(n): i for i, n in enumerate(self.calls)}
        self.users = readers_of(order)
        self.uses = uses = {key: len(readers) for key, readers in self.users.items()}
        self.group: dict[int, _Group] = {}
        self.edges: list[tuple[int, int]] = []
        self.merged: list[tuple[int, int]] = []  # the edges whose groups the plan joined
        for n in order:
            p = op_pattern(n)
            if p is None:
                continue
            g = _Group(n, [n], p, int(p in ANCHORS), 1)
            self.group[id(n)] = g
            producers = self._producers(n)
            for a in producers:
                if uses.get(id(a), 0) == 1:
                    self._try_merge(a, n)
            for a in producers:  # a diamond closing at n: every user of `a` is in n's group by now
                if uses.get(id(a), 0) > 1 and not isinstance(a, Tuple) and self._users_in(a, g):
                    self._try_merge(a, n)

    def _producers(self, n: Call) -> list[Expr]:
        out: list[Expr] = []
        for a in n.args:
            feeds_injective = isinstance(a, Tuple) and op_pattern(n) <= OpPattern.INJECTIVE  # type: ignore[operator]
            if feeds_injective or op_pattern(a) is not None:
                out.append(a)
        return out

    def _users_in(self, a: Expr, g: _Group) -> bool:
        return all(self.group.get(id(u)) is g for u in self.users.get(id(a), []))

    def _try_merge(self, a: Expr, c: Call) -> None:
        gc = self.group[id(c)]
        cp = op_pattern(c)
        assert cp is not None
        if isinstance(a, Tuple):  # a tuple feeding an injective op joins it (as its input list)
            gc.members.insert(0, a)  # its fields stay outside, so it may come first
            self.group[id(a)] = gc
            return
        ga = self.group[id(a)]
        if ga is gc:
            return
        edge = (self.index[id(a)], self.index[id(c)])
        self.edges.append(edge)
        if edge in self.plan.disabled_edges or ga.ops + gc.ops > self.plan.max_depth:
            return
        band = self._depthwise_band(ga, a, gc)
        if not band and not self._pool_epilogue(ga, a, gc) and (
                not self.plan.allows(ga.pattern, cp) or ga.anchors + gc.anchors > 1):
            return
        self._join(ga, gc, edge)
        gc.anchors += 0 if band else ga.anchors
        gc.banded = gc.banded or ga.banded or band
        if band and self.plan.expansions:
            self._expansion(_anchor(ga), gc)

    def _join(self, ga: _Group, gc: _Group, edge: tuple[int, int]) -> None:
        """Merge `ga` into `gc` over `edge` (anchors and bands are the caller's to count)."""
        self.merged.append(edge)
        # still a dependency order: no member of `ga` reads one of gc's (every user of gc's members
        # is in gc, and `ga` is not yet)
        gc.members = ga.members + gc.members
        gc.pattern = max(gc.pattern, ga.pattern)
        gc.ops += ga.ops
        for m in ga.members:
            self.group[id(m)] = gc

    def _pool_epilogue(self, ga: _Group, a: Expr, gc: _Group) -> bool:
        """Whether `gc` (a pooling alone so far) joins `ga` as its pooling epilogue: the plan
        allows it, `a` (the op the pooling reads, `ga`'s output) is the elementwise tail of a
        group with one anchor, and the pair fits (`pool_epilogue_fits`)."""
        if not self.plan.pool_epilogues or gc.ops != 1 or ga.anchors != 1 or ga.banded \
                or not pools_an_activation(gc.root):
            return False
        return pool_epilogue_fits(_anchor(ga), gc.root)  # type: ignore[arg-type]

    def _depthwise_band(self, ga: _Group, a: Expr, gc: _Group) -> bool:
        """Whether `ga` (a depthwise convolution and its elementwise tail, `a` its output) joins `gc`
        (a 1x1 convolution alone so far) as the band it reads: the plan allows it, neither group
        holds another anchor or band, and the pair fits (`depthwise_band_fits`)."""
        if not self.plan.depthwise_bands or gc.ops != 1 or gc.anchors != 1 or ga.anchors != 1 \
                or ga.banded or gc.banded:
            return False
        return depthwise_band_fits(_anchor(ga), a, gc.root)  # type: ignore[arg-type]

    def _expansion(self, depthwise: Call, gc: _Group) -> None:
        """Let the group producing `depthwise`'s input join `gc`, the kernel `depthwise` was just
        banded into, when it is one convolution and its tail (`expansion_fits`), read by
        `depthwise` alone, and the plan and `max_depth` allow the edge."""
        a = depthwise.args[0]
        ge = self.group.get(id(a))
        if ge is None or ge is gc or ge.root is not a or ge.anchors != 1 or ge.banded \
                or self.uses.get(id(a), 0) != 1:
            return
        edge = (self.index[id(a)], self.index[id(depthwise)])
        if edge not in self.plan.disabled_edges and ge.ops + gc.ops <= self.plan.max_depth \
                and expansion_fits(_anchor(ge), a, depthwise):
            self._join(ge, gc, edge)  # the expansion counts as the band's prologue, not an anchor


def _anchor(g: _Group) -> Expr:
    """The first anchor among a group's members."""
    return next(m for m in g.members if op_pattern(m) in ANCHORS)


class _Fuser(ExprMutator):
    def __init__(self, plan: FusionPlan) -> None:
        super().__init__()
        self.plan = plan
        self.groups: dict[int, _Group] = {}
        self.made = 0

    def fuse_body(self, body: Expr) -> Expr:
        grouping = _Grouping(body, self.plan)
        self.groups.update(grouping.group)
        return self.visit(grouping.body)

    def visit_function(self, f: Function) -> Expr:
        if f.is_primitive:
            return f
        body = self.fuse_body(f.body)
        return f if body is f.body else f.replace(body=body)

    def visit_call(self, c: Call) -> Expr:
        g = self.groups.get(id(c))
        if g is None or g.root is not c:
            return super().visit_call(c)
        return self._make(g)

    def _make(self, g: _Group) -> Expr:
        member_ids = {id(m) for m in g.members}
        params: list[Var] = []
        outside: list[Expr] = []
        param_of: dict[int, Var] = {}
        inner: dict[int, Expr] = {}

        def operand(a: Expr) -> Expr:
            if id(a) in member_ids:
                return inner[id(a)]
            if isinstance(a, Constant | Op | GlobalVar):
                return a
            if id(a) not in param_of:
                ann = a.checked_type if a.has_checked_type else None
                v = Var(f"p{len(params)}", ann)
                param_of[id(a)] = v
                params.append(v)
                outside.append(a)
            return param_of[id(a)]

        for m in g.members:  # members are in dependency order
            if isinstance(m, Tuple):
                inner[id(m)] = Tuple(tuple(operand(f) for f in m.fields))
            else:
                assert isinstance(m, Call)
                new = Call(m.op, tuple(operand(a) for a in m.args), m.attrs, m.type_args)
                if m.has_checked_type:
                    new.set_checked_type(m.checked_type)
                inner[id(m)] = new
        ret = g.root.checked_type if g.root.has_checked_type else None
        fn = Function(tuple(params), inner[id(g.root)], ret, (), PRIMITIVE)
        self.made += 1
        return Call(fn, tuple(self.visit(a) for a in outside))


def copy_shared_producers(body: Expr, plan: FusionPlan) -> Expr:
    """`body` with each injective op call that more than one op reads, every reader an anchor that
    takes it as a prologue under `plan`, copied once per reader (`FusionPlan.copy_shared`); `body`
    itself when the plan does not copy or nothing qualifies."""
    if not plan.copy_shared:
        return body
    order = region_order(body)
    users = readers_of(order)

    def takes_as_prologue(producer: OpPattern, reader: Expr) -> bool:
        q = op_pattern(reader)
        return q is not None and q in ANCHORS and plan.allows(producer, q)

    shared = {id(n) for n in order
              if (p := op_pattern(n)) is not None and p <= OpPattern.INJECTIVE
              and len(users.get(id(n), ())) > 1 and all(takes_as_prologue(p, u) for u in users[id(n)])}
    return _Copier(shared).visit(body) if shared else body


class _Copier(ExprMutator):
    """Gives every reader of a shared producer its own copy, keeping checked types (FuseOps reads them)."""

    def __init__(self, shared: set[int]) -> None:
        super().__init__()
        self.shared = shared

    def visit_call(self, c: Call) -> Expr:
        new = super().visit_call(c)
        if any(id(a) in self.shared for a in c.args):
            assert isinstance(new, Call)
            new = new.replace(args=tuple(_typed_copy(n) if id(a) in self.shared else n
                                         for a, n in zip(c.args, new.args)))
        if new is not c and c.has_checked_type:
            new.set_checked_type(c.checked_type)
        return new


def _typed_copy(e: Expr) -> Expr:
    """A copy of `e` for one reader; a call's tuple arguments (a concatenate's inputs) are copied
    too: a tuple node the copies shared would have several readers, so no copy's group could take
    it in, and each fused function would get the tuple as one parameter, which kernels cannot take."""
    if isinstance(e, Call):
        copy = e.replace(args=tuple(_typed_copy(a) if isinstance(a, Tuple) else a for a in e.args))
    else:
        copy = e.replace()
    if e.has_checked_type:
        copy.set_checked_type(e.checked_type)
    return copy


@dataclass(frozen=True)
class FuseOps(FunctionPass):
    """Group op calls into primitive functions following `plan` (Relay's rules by default)."""

    name: ClassVar[str] = "FuseOps"
    requires_types: ClassVar[bool] = True
    plan: FusionPlan = field(default_factory=FusionPlan.default)

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Fuser(self.plan).visit(fn)
        assert isinstance(out, Function)
        if not self.plan.halos:  # the builder reads it off the fused function
            out = out.replace(attrs=Attrs({**out.attrs, NO_HALOS: 1}))
        return out


def candidate_edges(fn: Function, plan: FusionPlan | None = None) -> list[tuple[int, int]]:
    """The producer → consumer edges (by op index) that the plan's rules were asked about.

    A search toggles subsets of these through `FusionPlan.disabled_edges`.
    """
    return list(_Grouping(fn.body, plan or FusionPlan.default()).edges)


def fused_edge_calls(fn: Function, plan: FusionPlan) -> dict[tuple[int, int], tuple[Expr, Expr]]:
    """The edges `plan` fuses in `fn`'s body, each with its (producer, consumer) op calls."""
    g = _Grouping(fn.body, plan)
    return {(a, c): (g.calls[a], g.calls[c]) for a, c in g.merged}


def fused_edges(fn: Function, plan: FusionPlan) -> dict[tuple[int, int], str]:
    """The edges `plan` fuses in `fn`'s body, each with a name for reports ("layout_transform ->
    nn.conv2d"). Comparing two plans' sets says which producers one of them fuses that the other
    leaves to their own kernels."""
    return {e: edge_name(a, c) for e, (a, c) in fused_edge_calls(fn, plan).items()}


def edge_name(producer: Expr, consumer: Expr) -> str:
    """An edge's name for reports: "layout_transform -> nn.conv2d"."""
    return f"{op_name(producer)} -> {op_name(consumer)}"
