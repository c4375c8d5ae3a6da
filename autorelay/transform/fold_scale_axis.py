"""FoldScaleAxis: fold per-channel constant scales into convolution / dense weights.

Backward folding (a scale *after* the layer): `conv2d(x, W) * s` where `s` is constant along the
output-channel axis equals `conv2d(x, W * s[:, None, None, None])`; a `bias_add` or a per-channel
constant `add` between the layer and the scale is scaled too (`(y + b) * s = y * s + b * s`).
This is what removes a ResNet's batch norms: SimplifyInference turns each into `y * s + t`,
FoldConstant makes `s` and `t` constant vectors, and this pass moves `s` into the weights.

Forward folding (a scale *before* the layer): `conv2d(x * s, W)` with `s` constant along the input
channel axis equals `conv2d(x, W * s[None, :, None, None])` for ungrouped convolutions (zero
padding commutes with scaling); likewise `dense(x * s, W) = dense(x, W * s[None, :])`.

Both need the weights (and scales) to be constants, the scaled value to have no other user, and
unblocked layouts; the new weights are computed here with NumPy, so no runtime work is added.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, GlobalVar
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.transform.pass_base import FunctionPass
from autorelay.transform.util import node_uses, op_name, static_shape, tensor_type, with_type

LAYERS = ("nn.conv2d", "nn.dense")


def _channel_axes(layer: Call, output: bool) -> tuple[int, int] | None:
    """(axis in the layer's data/output, axis in its weight) of the channel a scale may act on."""
    if op_name(layer) == "nn.dense":
        t = tensor_type(layer if output else layer.args[0])
        return (t.ndim - 1, 0 if output else 1) if t is not None else None
    a = layer.attrs
    data_layout = (a["out_layout"] or a["data_layout"]) if output else a["data_layout"]
    kernel_layout = a["kernel_layout"]
    if not (data_layout.isupper() and kernel_layout.isupper()):
        return None  # blocked layouts (NCHW16c) are left alone
    if not output and a["groups"] != 1:
        return None
    return data_layout.index("C"), kernel_layout.index("O" if output else "I")


def _per_channel(scale: Expr, shape: tuple[int, ...] | None, axis: int) -> np.ndarray | None:
    """The scale as a vector over `axis` of a tensor of `shape`, if it is constant along all others."""
    if not isinstance(scale, Constant) or shape is None or scale.data.ndim > len(shape):
        return None
    aligned = (1,) * (len(shape) - scale.data.ndim) + scale.data.shape
    if any(d != 1 for i, d in enumerate(aligned) if i != axis) or aligned[axis] not in (1, shape[axis]):
        return None
    vec = scale.data.reshape(aligned).reshape(-1)
    return np.broadcast_to(vec, (shape[axis],)).copy()


def _scale_weight(w: Constant, vec: np.ndarray, axis: int) -> Constant:
    shape = [1] * w.data.ndim
    shape[axis] = vec.size
    c = Constant((w.data * vec.reshape(shape)).astype(w.data.dtype))
    c.set_checked_type(c.type)
    return c


def _scale_bias(b: Constant, vec: np.ndarray, shape: tuple[int, ...], axis: int,
                bias_add: bool) -> Constant | None:
    """`b * s` for a per-channel bias (a vector for bias_add, or a broadcast constant for add)."""
    if bias_add:
        out = b.data * vec
    else:
        if _per_channel(b, shape, axis) is None:
            return None
        aligned = [1] * len(shape)
        aligned[axis] = vec.size
        out = b.data * vec.reshape(aligned)
    c = Constant(out.astype(b.data.dtype))
    c.set_checked_type(c.type)
    return c


class _Folder(ExprMutator):
    def __init__(self, uses: Counter) -> None:
        super().__init__()
        self.uses = uses
        self.folded = 0

    def visit_function(self, f: Function) -> Expr:
        return f if f.is_primitive else super().visit_function(f)

    def _single_use(self, e: Expr) -> bool:
        return self.uses[id(e)] == 1

    def visit_call(self, c: Call) -> Expr:
        name = op_name(c)
        if name == "multiply":
            for prod, scale in ((c.args[0], c.args[1]), (c.args[1], c.args[0])):
                out = self._backward(c, prod, scale)
                if out is not None:
                    self.folded += 1
                    return out
        elif name in LAYERS:
            out = self._forward(c)
            if out is not None:
                self.folded += 1
                return out
        return super().visit_call(c)

    def _layer(self, layer: Call, data: Expr, weight: Constant) -> Call:
        new = Call(layer.op, (data, weight), layer.attrs)
        return with_type(new, layer)  # type: ignore[return-value]

    def _backward(self, mul: Call, prod: Expr, scale: Expr) -> Expr | None:
        if not self._single_use(prod) or static_shape(prod) != static_shape(mul):
            return None
        bias: Call | None = None
        layer = prod
        if op_name(prod) in ("nn.bias_add", "add") and isinstance(prod, Call):
            if not isinstance(prod.args[1], Constant) or not self._single_use(prod.args[0]):
                return None
            bias, layer = prod, prod.args[0]
        if op_name(layer) not in LAYERS or not isinstance(layer.args[1], Constant):  # type: ignore[union-attr]
            return None
        assert isinstance(layer, Call)
        axes = _channel_axes(layer, output=True)
        shape = static_shape(layer)
        if axes is None or shape is None:
            return None
        vec = _per_channel(scale, shape, axes[0])
        if vec is None:
            return None
        bias_axis = int(bias.attrs["axis"]) % len(shape) if op_name(bias) == "nn.bias_add" else axes[0]
        if bias_axis != axes[0]:
            return None
        new_b = None
        if bias is not None:
            new_b = _scale_bias(bias.args[1], vec, shape, axes[0], op_name(bias) == "nn.bias_add")  # type: ignore[arg-type]
        if bias is not None and new_b is None:
            return None
        out: Expr = self._layer(layer, self.visit(layer.args[0]), _scale_weight(layer.args[1], vec, axes[1]))
        if bias is not None:
            out = with_type(Call(bias.op, (out, new_b), bias.attrs), bias)  # type: ignore[arg-type]
        return with_type(out, mul)

    def _forward(self, layer: Call) -> Expr | None:
        data, weight = layer.args
        if op_name(data) != "multiply" or not isinstance(weight, Constant) or not self._single_use(data):
            return None
        assert isinstance(data, Call)
        axes = _channel_axes(layer, output=False)
        if axes is None:
            return None
        for x, scale in ((data.args[0], data.args[1]), (data.args[1], data.args[0])):
            shape = static_shape(data)
            if shape is None or static_shape(x) != shape:
                continue
            vec = _per_channel(scale, shape, axes[0])
            if vec is not None:
                return self._layer(layer, self.visit(x), _scale_weight(weight, vec, axes[1]))
        return None


@dataclass(frozen=True)
class FoldScaleAxis(FunctionPass):
    """Fold constant per-channel scales into the weights of the adjacent conv2d / dense."""

    name: ClassVar[str] = "FoldScaleAxis"
    requires_types: ClassVar[bool] = True

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        out = _Folder(node_uses(fn)).visit(fn)
        assert isinstance(out, Function)
        return out
