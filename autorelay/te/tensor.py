"""Tensors of the compute DSL: placeholders and `compute(shape, lambda i, j: ...)` stages.

A compute declaration says *what* each output element is, never *how* to loop: the schedule
(`autorelay.schedule`) decides loops. An op's compute is a function
`compute(inputs: list[Tensor], attrs) -> Tensor`; `ComputeDef` bundles the inputs and outputs
that a kernel is built from.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from autorelay.te.expr import DTYPES, Expr, IterVar, Read, Reduce, Var, as_expr, cast
from autorelay.te.traverse import distinct_nodes, substitute, transform


@dataclass(frozen=True, eq=False)
class ComputeOp:
    """The body of a computed tensor: `axes` are its spatial axes, `body` may be a top-level Reduce."""

    axes: tuple[IterVar, ...]
    body: Expr
    tag: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    def inputs(self) -> list[Tensor]:
        """Tensors this op reads, in first-read order, without repeats."""
        return list(self._inputs)

    @cached_property
    def _inputs(self) -> tuple[Tensor, ...]:
        """Computed once (the op is immutable), visiting a subtree its body shares once: an
        unrolled body (a Winograd transform's selects) shares subtrees that a tree walk would
        visit once per use."""
        reads: dict[int, Tensor] = {}
        for n in distinct_nodes(self.body):
            if isinstance(n, Read) and id(n.tensor) not in reads:
                reads[id(n.tensor)] = n.tensor
        return tuple(reads.values())


class Tensor:
    """A placeholder (`op is None`) or a computed tensor. Identity-compared.

    A placeholder may carry the `value` it will be bound to (a constant of the model: a weight, a
    scale): computes may read it to precompute what depends only on constants (a requantize's
    fixed-point multipliers, a convolution's zero-point correction) as new `constant`s."""

    __slots__ = ("dtype", "name", "op", "shape", "value")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, op: ComputeOp | None = None,
                 value: Any = None):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.op = op
        self.value = value

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return self.op is None

    def __getitem__(self, idx: Any) -> Read:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self.ndim:
            raise IndexError(f"tensor {self.name} has {self.ndim} dims, indexed with {len(idx)}")
        exprs = tuple(as_expr(i) for i in idx)
        for i, e in enumerate(exprs):
            if e.dtype not in ("int64", "int32"):
                raise TypeError(f"tensor {self.name}: index {i} has dtype {e.dtype}, expected an integer")
        # buffer offsets are 64-bit arithmetic: an int32 index (a value read from an int32 tensor,
        # an int32 reduction) is widened here, where the read is made
        exprs = tuple(e if e.dtype == "int64" else cast(e, "int64") for e in exprs)
        return Read(self, exprs, self.dtype)

    def __repr__(self) -> str:
        kind = "placeholder" if self.op is None else f"compute[{self.op.tag or 'anon'}]"
        return f"Tensor({self.name}, {self.shape}, {self.dtype}, {kind})"


_counter = itertools.count()


def _check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    out = tuple(int(s) for s in shape)
    if any(s <= 0 for s in out):
        raise ValueError(f"{what}: shape {out} must have positive static dimensions")
    return out


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "X") -> Tensor:
    if dtype not in DTYPES:
        raise TypeError(f"placeholder {name}: unknown dtype {dtype!r}")
    return Tensor(name, _check_shape(shape, f"placeholder {name}"), dtype)


def constant(value: Any, dtype: str, name: str = "const") -> Tensor:
    """A placeholder bound to a known array: the lowering passes it to the kernel as a constant
    input (see `autorelay.lower.lower`). Zero-dimensional values should be inline `E.const`s."""
    arr = np.ascontiguousarray(np.asarray(value).astype(dtype))
    if arr.ndim == 0:
        raise ValueError(f"constant {name}: a scalar is an inline expression (E.const), not a tensor")
    t = placeholder(arr.shape, dtype, name)
    t.value = arr
    return t


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    if int(extent) <= 0:
        raise ValueError(f"reduce_axis {name}: extent must be positive, got {extent}")
    return IterVar(Var(name), int(extent), "reduce")


def _reduce(combiner: str, body: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes or any(a.kind != "reduce" for a in axes):
        raise ValueError(f"{combiner}: axis must be one or more reduce_axis()")
    body = as_expr(body)
    return Reduce(combiner, body, axes, body.dtype)


def sum(body: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("sum", body, axis)


def max(body: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("max", body, axis)


def min(body: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("min", body, axis)


def prod(body: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("prod", body, axis)


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Any],
    name: str = "T",
    tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Tensor:
    """A tensor whose element at `(i, j, ...)` is `fcompute(i, j, ...)`.

    Axis names come from the lambda's parameter names, so schedules can say `Split("C", "i", 8)`.
    """
    shape = _check_shape(shape, f"compute {name}")
    params = list(inspect.signature(fcompute).parameters.values())
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params]
        if len(names) != len(shape):
            raise ValueError(f"compute {name}: lambda takes {len(names)} indices for a {len(shape)}-d shape")
    axes = tuple(IterVar(Var(n), s) for n, s in zip(names, shape))
    body = as_expr(fcompute(*[a.var for a in axes]))
    _validate(name, body)
    if isinstance(body, Reduce):
        clash = {a.name for a in axes} & {a.name for a in body.axes}
        if clash:
            raise ValueError(f"compute {name}: reduce axis names {sorted(clash)} clash with spatial axes")
    return Tensor(name, shape, body.dtype, ComputeOp(axes, body, tag, dict(attrs or {})))


def _validate(name: str, body: Expr) -> None:
    nodes = distinct_nodes(body)
    for n in nodes[1:]:
        if isinstance(n, Reduce):
            raise ValueError(f"compute {name}: a reduction must be the whole body, not nested inside it")


def inline_body(t: Tensor, indices: Sequence[Expr]) -> Expr:
    """The body of injective tensor `t` at `indices` (what ComputeInline substitutes)."""
    assert t.op is not None
    if isinstance(t.op.body, Reduce):
        raise ValueError(f"cannot inline {t.name}: it is a reduction")
    return substitute(t.op.body, {a.var: i for a, i in zip(t.op.axes, indices)})


def inline_reads(body: Expr, victims: set[int]) -> Expr:
    """Replace every read of a tensor whose id is in `victims` by its (recursively inlined) body."""

    def fn(n: Expr) -> Expr | None:
        if isinstance(n, Read) and id(n.tensor) in victims:
            return inline_reads(inline_body(n.tensor, n.indices), victims)
        return None

    return transform(body, fn)


def topo_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Every tensor reachable from `outputs`, producers first."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        if t.op is not None:
            for p in t.op.inputs():
                visit(p)
        order.append(t)

    for o in outputs:
        visit(o)
    return order


@dataclass(frozen=True, eq=False)
class ComputeDef:
    """What a kernel computes: its input placeholders (argument order) and outputs."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    name: str = "kernel"
    # (input or output name, the shape whose strides address it): buffers that are the interior of
    # a larger zero-bordered array (`autorelay.te.halo`); the kernel's pointer is their first element
    pitches: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        ins = {id(t) for t in self.inputs}
        for t in topo_order(self.outputs):
            if t.is_placeholder and id(t) not in ins:
                raise ValueError(f"{self.name}: placeholder {t.name} is read but not listed as an input")
        names = [t.name for t in self.inputs + self.outputs]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: tensor names must be unique, got {names}")

    @property
    def output(self) -> Tensor:
        return self.outputs[0]


def make_def(
    inputs: Sequence[Tensor], outputs: Tensor | Sequence[Tensor], name: str = "kernel"
) -> ComputeDef:
    outs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
    return ComputeDef(tuple(inputs), outs, name)


def inline_injective(cdef: ComputeDef, keep: Sequence[str] = ("keep",),
                     kept: Collection[int] = ()) -> ComputeDef:
    """Inline every non-output injective stage into its consumers (the fused-function lowering rule).

    Stages tagged with one of `keep`, or whose id is in `kept`, are left alone so a schedule can
    compute them separately.
    """
    outs = {id(t) for t in cdef.outputs}
    victims = {
        id(t)
        for t in topo_order(cdef.outputs)
        if t.op is not None and id(t) not in outs and not isinstance(t.op.body, Reduce)
        and t.op.tag not in keep and id(t) not in kept
    }
    if not victims:
        return cdef
    memo: dict[int, Tensor] = {}

    def rebuild_t(t: Tensor) -> Tensor:
        if t.op is None:
            return t
        if id(t) in memo:
            return memo[id(t)]
        body = inline_reads(t.op.body, victims)

        def fix(n: Expr) -> Expr | None:
            if isinstance(n, Read) and n.tensor.op is not None:
                return Read(rebuild_t(n.tensor), n.indices, n.dtype)
            return None

        body = transform(body, fix)
        nt = Tensor(t.name, t.shape, t.dtype, ComputeOp(t.op.axes, body, t.op.tag, t.op.attrs))
        memo[id(t)] = nt
        return nt

    return ComputeDef(cdef.inputs, tuple(rebuild_t(o) for o in cdef.outputs), cdef.name)


def fresh_name(prefix: str) -> str:
    return f"{prefix}{next(_counter)}"
