"""Which values of a model are stored with a zero border (`autorelay.te.halo`), decided before the
graph builder compiles anything: a producer's kernel must know it writes into a bordered buffer
before its readers are reached.

A value gets a halo when the kernel producing it is a compiled primitive with one output, and a
convolution-like reader pads it with zeros (a pad stage that is the only reader of that input).
The border is the one most of its readers ask for; they read the bordered buffer whole, with
their pad stage gone, and every other kernel reading the value reads its interior in place.
Values that are model outputs, tuple fields, or read by a view or an in-place concatenation
(which alias their input's storage as one contiguous block) keep a plain buffer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from autorelay.ir.expr import Call, Expr, Function, Let, Op, Tuple, TupleGetItem
from autorelay.ir.types import TensorType
from autorelay.ir.visitor import post_order
from autorelay.lower.lower import LoweredFunction
from autorelay.runtime.views import concat_offsets, view_offset
from autorelay.te.halo import BufferPlan, Halo, pad_request, padded_shape

Lowering = Callable[[Call], LoweredFunction | None]  # a call site's lowering (None: no compute)


@dataclass
class HaloChoice:
    """A value stored with `halo`; `readers`: (id of the reading call, input position of its
    kernel) pairs that read the bordered buffer whole instead of padding."""

    halo: Halo
    readers: set[tuple[int, int]] = field(default_factory=set)


def dataflow_children(node: Expr) -> list[Expr]:
    """Children of a node of `@main`, not entering functions (primitive bodies are kernels)."""
    if isinstance(node, Call):
        return list(node.args) if isinstance(node.op, Function | Op) else [node.op, *node.args]
    if isinstance(node, Tuple):
        return list(node.fields)
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, Let):
        return [node.value, node.body]
    return []


def _is_kernel_call(node: Expr) -> bool:
    """A call of a fused function that compiles to one kernel step of its own (not a view, not a
    concatenation written in place by its pieces' producers)."""
    return (isinstance(node, Call) and isinstance(node.op, Function) and node.op.is_primitive
            and view_offset(node.op) is None and concat_offsets(node.op) is None)


def plan_halos(body: Expr, lowering: Lowering) -> dict[int, HaloChoice]:
    """The values of `body` (@main's dataflow) to store with a zero border, by id of their call."""
    nodes = post_order(body, dataflow_children)
    uses: dict[int, list[tuple[Call, int] | None]] = {}  # None: a use that needs a plain buffer
    for node in nodes:
        for j, child in enumerate(dataflow_children(node)):
            ok = (_is_kernel_call(node) and isinstance(node, Call) and j < len(node.args)
                  and child is node.args[j])
            uses.setdefault(id(child), []).append((node, j) if ok else None)  # type: ignore[arg-type]
    uses.setdefault(id(body), []).append(None)  # the model's output
    out: dict[int, HaloChoice] = {}
    for node in nodes:
        typed = node.has_checked_type and isinstance(node.checked_type, TensorType)
        if not (typed and _is_kernel_call(node)):
            continue
        readers = uses.get(id(node), [])
        if not readers or any(r is None for r in readers):
            continue
        own = lowering(node)  # type: ignore[arg-type]
        if own is None or len(own.cdef.outputs) != 1:
            continue
        asks: list[tuple[int, int, Halo]] = []
        for call, j in readers:  # type: ignore[misc]
            low = lowering(call)
            if low is None:
                continue
            for k, src in enumerate(low.sources):
                if src.kind == "param" and src.index == j and (h := pad_request(low.cdef, k)) is not None:
                    asks.append((id(call), k, h))
        if not asks:
            continue
        halo = Counter(h for _, _, h in asks).most_common(1)[0][0]
        out[id(node)] = HaloChoice(halo, {(c, k) for c, k, h in asks if h == halo})
    return out


def buffer_plans(body: Expr, halos: dict[int, HaloChoice], lowering: Lowering) -> dict[int, BufferPlan]:
    """Per call site (by id) of `body`, where its kernel finds the bordered values of `halos`:
    the inputs it reads whole and padded (their pad stages dropped), the inputs it reads in a
    border's interior, and its own output's border; sites with none are left out."""
    out: dict[int, BufferPlan] = {}
    for node in post_order(body, dataflow_children):
        if not _is_kernel_call(node) or (low := lowering(node)) is None:  # type: ignore[arg-type]
            continue
        reads, pitches = [], []
        for k, src in enumerate(low.sources):
            arg = node.args[src.index] if src.kind == "param" else None  # type: ignore[attr-defined]
            if arg is None or (choice := halos.get(id(arg))) is None:
                continue
            if (id(node), k) in choice.readers:
                reads.append(k)
            else:
                pitches.append((k, padded_shape(arg.checked_type.concrete_shape, choice.halo)))
        if (own := halos.get(id(node))) is not None:
            pitches.append((-1, padded_shape(node.checked_type.concrete_shape, own.halo)))  # type: ignore[attr-defined]
        if plan := BufferPlan(tuple(reads), tuple(pitches)):
            out[id(node)] = plan
    return out


def call_buffer_plans(body: Expr, lowering: Lowering) -> dict[int, BufferPlan]:
    """`buffer_plans` of the values `plan_halos` borders: what a CPU graph build compiles each
    call's kernel with (`kernel_prefetch` compiles the same ahead)."""
    return buffer_plans(body, plan_halos(body, lowering), lowering)


__all__ = ["HaloChoice", "Lowering", "buffer_plans", "call_buffer_plans", "dataflow_children",
           "plan_halos"]
