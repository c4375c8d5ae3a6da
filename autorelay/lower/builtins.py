"""Computes for the few ops the RNN programs need that have no `OpDef.compute` yet (`argmax`,
`argmin`, `one_hot`), written in the `te` DSL so that they compile like any other kernel.

Why here: the AoT path must run a generative RNN (char-rnn: argmax of the logits, fed back
one-hot) without calling into Python, so it cannot fall back to a NumPy reference. Only a
primitive function that is exactly one such call is handled; `builtin_lowering` returns None for
anything else. When the ops gain real computes, lowering uses those and this module is bypassed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autorelay.ir.expr import Call, Constant, Function, Op, Var
from autorelay.ir.types import TensorType
from autorelay.lower.lower import InputSource, LoweredFunction
from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.tensor import ComputeDef, Tensor


def _static(t: Any) -> TensorType | None:
    return t if isinstance(t, TensorType) and t.is_static else None


def _arg_reduce(name: str, x: Tensor, attrs: Any, out: TensorType) -> Tensor | None:
    axis = attrs["axis"]
    if isinstance(axis, list | tuple):
        if len(axis) != 1:
            return None
        axis = axis[0]
    if axis is None or attrs["exclude"] or attrs["select_last_index"]:
        return None
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    keep = bool(attrs["keepdims"])

    def at(idx: tuple, k: Any) -> tuple:
        """Input indices for output indices `idx`, with `k` on the reduced axis."""
        full, it = [], iter(idx)
        for d in range(x.ndim):
            if d == axis:
                full.append(k)
                if keep:
                    next(it)
            else:
                full.append(next(it))
        return tuple(full)

    shape = tuple(int(d) for d in out.concrete_shape)
    assert len(shape) == (x.ndim if keep else x.ndim - 1)
    k1 = te.reduce_axis(n, "k")
    best = (te.max if name == "argmax" else te.min)
    m = te.compute(shape, lambda *i: best(x[at(i, k1.var)], k1), name=f"{name}_value") if shape else \
        te.compute((), lambda: best(x[at((), k1.var)], k1), name=f"{name}_value")
    k2 = te.reduce_axis(n, "kk")

    def first(*i: Any) -> E.Expr:
        hit = E.compare("eq", x[at(i, k2.var)], m[i] if shape else m[()])
        return te.min(E.select(hit, E.cast(k2.var, "int32"), E.const(n, "int32")), k2)

    return te.compute(shape, first, name=name) if shape else te.compute((), lambda: first(), name=name)


def _one_hot(ind: Tensor, on: E.Expr | Tensor, off: E.Expr | Tensor, attrs: Any, out: TensorType) -> Tensor:
    shape = tuple(int(d) for d in out.concrete_shape)
    axis = int(attrs["axis"]) % len(shape)

    def scalar(v: E.Expr | Tensor) -> E.Expr:
        return v[()] if isinstance(v, Tensor) else v

    def body(*i: Any) -> E.Expr:
        src = tuple(v for d, v in enumerate(i) if d != axis)
        hit = E.compare("eq", ind[src] if src else ind[()], E.cast(i[axis], ind.dtype))
        return E.select(hit, E.cast(scalar(on), out.dtype), E.cast(scalar(off), out.dtype))

    return te.compute(shape, body, name="one_hot")


def builtin_lowering(fn: Function) -> LoweredFunction | None:
    """A lowering of `fn` if it is a single argmax/argmin/one_hot call on its parameters."""
    body = fn.body
    if not (isinstance(body, Call) and isinstance(body.op, Op)) or body.op.name not in ("argmax", "argmin",
                                                                                          "one_hot"):
        return None
    out = _static(body.checked_type if body.has_checked_type else fn.ret_type)
    if out is None:
        return None
    inputs: list[Tensor] = []
    sources: list[InputSource] = []
    args: list[Any] = []
    index = {id(p): k for k, p in enumerate(fn.params)}
    for a in body.args:
        if isinstance(a, Var) and id(a) in index:
            t = _static(a.type_annotation or (a.checked_type if a.has_checked_type else None))
            if t is None or t.dtype == "bool":
                return None
            ph = te.placeholder(t.concrete_shape, t.dtype, f"p{index[id(a)]}")
            inputs.append(ph)
            sources.append(InputSource("param", index[id(a)]))
            args.append(ph)
        elif isinstance(a, Constant) and np.asarray(a.data).size == 1:
            v = np.asarray(a.data)
            args.append(E.const(v.reshape(()).item(), str(v.dtype)))
        else:
            return None
    name = body.op.name
    if name == "one_hot":
        if not isinstance(args[0], Tensor):
            return None
        result = _one_hot(args[0], args[1], args[2], body.attrs, out)
    else:
        if not isinstance(args[0], Tensor):
            return None
        result = _arg_reduce(name, args[0], body.attrs, out)
        if result is None:
            return None
    return LoweredFunction(ComputeDef(tuple(inputs), (result,), "fused"), tuple(sources), name)
