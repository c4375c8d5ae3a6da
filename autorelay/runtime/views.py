"""Primitive functions that only reinterpret their input's shape, run as views, not kernels.

`reshape`, `expand_dims`, `squeeze` and `nn.batch_flatten` keep a row-major tensor's bytes as
they are. ONNX Runtime and PyTorch make them free; as kernels they copied every element (a
decoder step with a KV cache reshapes and stacks megabytes per layer). The graph executor gives
such a call's result an ``alias`` slot: a NumPy view of its input's buffer, whose storage then
stays reserved until the alias's last reader (`graph_plan.plan_memory`).
"""

from __future__ import annotations

from autorelay.ir.expr import Call, Function, Op
from autorelay.ir.types import TensorType

VIEW_OPS = frozenset({"reshape", "expand_dims", "squeeze", "nn.batch_flatten"})


def is_view_function(fn: Function) -> bool:
    """Whether `fn` is a chain of shape-only ops over its one parameter (same dtype in and out)."""
    if len(fn.params) != 1:
        return False
    e = fn.body
    while isinstance(e, Call) and isinstance(e.op, Op) and e.op.name in VIEW_OPS:
        e = e.args[0]
    if e is not fn.params[0] or e is fn.body:
        return False
    p = fn.params[0]
    src = p.type_annotation or (p.checked_type if p.has_checked_type else None)
    out = fn.body.checked_type if fn.body.has_checked_type else fn.ret_type
    return isinstance(src, TensorType) and isinstance(out, TensorType) and src.dtype == out.dtype


__all__ = ["VIEW_OPS", "is_view_function"]
