"""Values stored with a zero border (a *halo*), so a convolution reading them needs no padding pass.

A convolution pads its input before it reads it: a `pad` stage that is either a separate pass into
a workspace (a copy of the whole input, 30-60 us per ResNet-18 layer on the 2-core AVX-512 host) or
inlined as a bounds test on every load. When the value the convolution reads is produced by
another kernel of the same model, the producer can instead write it into the interior of a
larger buffer whose border is zero, allocated once: the padded tensor then already exists, and
the convolution reads it as its input, its pad stage gone. Other readers of the value address
the interior through the larger buffer's strides (`tir.nodes.Buffer.pitch`).

This module holds the compute-side rules; `autorelay.runtime.halo_plan` chooses which values of
a model get a halo, and the graph executor owns the zero-bordered buffers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autorelay.te.expr import Expr, Read
from autorelay.te.tensor import ComputeDef, ComputeOp, Tensor, topo_order
from autorelay.te.traverse import transform

Halo = tuple[tuple[int, int], ...]  # per dimension: elements of zero border (before, after)


def padded_shape(shape: Sequence[int], halo: Halo) -> tuple[int, ...]:
    return tuple(int(s) + lo + hi for s, (lo, hi) in zip(shape, halo))


def _pad_reader(cdef: ComputeDef, k: int) -> Tensor | None:
    """The zero-valued pad stage that is input k's only reader, and pads input k itself: it reads
    nothing else, and no other stage was inlined into it (a re-layout or an activation fused as a
    prologue makes it read the input through that stage)."""
    x = cdef.inputs[k]
    readers = [t for t in topo_order(cdef.outputs) if t.op is not None
               and any(r is x for r in t.op.inputs())]
    if len(readers) != 1:
        return None
    p = readers[0]
    attrs = p.op.attrs if p.op is not None else {}
    value = attrs.get("value")  # a number, or an expression (a quantized input's zero point)
    if (p.op is None or p.op.tag != "pad" or "before" not in attrs or not isinstance(value, int | float)
            or value != 0 or attrs.get("source") != x.name or any(p is o for o in cdef.outputs)
            or len(p.op.inputs()) != 1):
        return None
    halo = tuple(zip(attrs["before"], attrs["after"]))
    if len(halo) != x.ndim or p.shape != padded_shape(x.shape, halo) or p.dtype != x.dtype:
        return None
    return p


def pad_request(cdef: ComputeDef, k: int) -> Halo | None:
    """The zero border input `k` is padded with before it is read, when a pad stage is its only
    reader (a convolution's input); None otherwise."""
    p = _pad_reader(cdef, k)
    if p is None or p.op is None:
        return None
    halo = tuple(zip(p.op.attrs["before"], p.op.attrs["after"]))
    if any(lo < 0 or hi < 0 for lo, hi in halo):
        return None
    return halo if any(lo or hi for lo, hi in halo) else None


def read_padded(cdef: ComputeDef, k: int) -> ComputeDef:
    """`cdef` reading input `k` already padded: its pad stage becomes the input itself, a
    placeholder of the padded shape under the input's name (the caller passes the whole
    zero-bordered buffer)."""
    p = _pad_reader(cdef, k)
    if p is None:
        raise ValueError(f"{cdef.name}: input {cdef.inputs[k].name} is not read through a zero pad stage")
    x = cdef.inputs[k]
    whole = Tensor(x.name, p.shape, x.dtype)
    memo: dict[int, Tensor] = {id(p): whole}

    def rebuild(t: Tensor) -> Tensor:
        if t.op is None:
            return t
        if id(t) not in memo:
            op = t.op

            def fix(n: Expr) -> Expr | None:
                if isinstance(n, Read) and n.tensor.op is not None:
                    return Read(rebuild(n.tensor), n.indices, n.dtype)
                return None

            body = transform(op.body, fix)
            memo[id(t)] = Tensor(t.name, t.shape, t.dtype, ComputeOp(op.axes, body, op.tag, op.attrs))
        return memo[id(t)]

    inputs = tuple(whole if i == k else t for i, t in enumerate(cdef.inputs))
    return ComputeDef(inputs, tuple(rebuild(o) for o in cdef.outputs), cdef.name, cdef.pitches)


@dataclass(frozen=True)
class BufferPlan:
    """How one kernel's buffers lie: the inputs it reads whole and padded (their pad stages
    dropped: `read_padded`), and the inputs/outputs that are the interior of a zero-bordered
    buffer (the shape whose strides address them). Inputs by position, outputs as -1 - k.
    Hashable: kernels compiled under it are memoised with it."""

    padded_reads: tuple[int, ...] = ()
    pitches: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.padded_reads or self.pitches)

    def apply(self, cdef: ComputeDef) -> ComputeDef:
        for k in self.padded_reads:
            cdef = read_padded(cdef, k)
        named = tuple(((cdef.inputs[i] if i >= 0 else cdef.outputs[-1 - i]).name, shape)
                      for i, shape in self.pitches)
        return ComputeDef(cdef.inputs, cdef.outputs, cdef.name, cdef.pitches + named)

    def describe(self) -> str:
        """For the build report."""
        parts = []
        if self.padded_reads:
            parts.append("reads its input with the border its producer wrote (no padding pass)")
        if any(i < 0 for i, _ in self.pitches):
            parts.append("writes into a zero-bordered buffer")
        if any(i >= 0 for i, _ in self.pitches):
            parts.append("reads the interior of a zero-bordered buffer")
        return "; ".join(parts)


DENSE = BufferPlan()  # every buffer dense: what a kernel compiled alone assumes


__all__ = ["DENSE", "BufferPlan", "Halo", "pad_request", "padded_shape", "read_padded"]
