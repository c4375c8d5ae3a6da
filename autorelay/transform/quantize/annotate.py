"""Annotate: find the quantizable patterns of a prepared float graph and the tensors they quantize.

The quantizer works on `@main` after the inference rewrites (`prepare_for_quantize`: weights bound,
batch norm folded into the convolutions as a per-channel constant `add`). There it recognises

* layers: `nn.conv2d` / `nn.dense` with a constant weight, optionally followed by a per-channel
  constant bias (`nn.bias_add` or `add`) and an activation (`nn.relu`, `clip`) — each step only when
  the previous result has no other consumer, so the whole epilogue can become one fused
  requantize;
* joins: `add` of two tensors of the same shape and `concatenate`, optionally followed by an
  activation; they run in int8 (qnn.add / qnn.concatenate) when every input is int8 already.

The "points" are the tensors whose real-number ranges calibration measures, named
`<layer>:in` (the layer's data input, quantized when it arrives in float), `<layer>:out` and
`<join>:out` (the end of the epilogue, where a requantize writes uint8). They do not depend on the
plan, so one calibration serves every plan the precision search tries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Tuple
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import children, post_order
from autorelay.transform.bind import bind_params
from autorelay.transform.cse import EliminateCommonSubexpr
from autorelay.transform.dce import DeadCodeElimination
from autorelay.transform.fold_constant import FoldConstant
from autorelay.transform.fold_scale_axis import FoldScaleAxis
from autorelay.transform.normal_form import ToGraphNormalForm
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.quantize.layers import LAYER_OPS, layer_calls
from autorelay.transform.simplify_expr import SimplifyExpr
from autorelay.transform.simplify_inference import SimplifyInference
from autorelay.transform.util import op_name, tensor_type

# Ops that move or select quantized values without arithmetic: exact on the integers, so an int8
# value stays int8 through them (max pooling commutes with the monotone quantization map; its
# padding reads the dtype's minimum, the real -inf).
PASSTHROUGH = ("nn.max_pool2d", "nn.global_max_pool2d", "nn.batch_flatten", "reshape", "squeeze",
               "expand_dims", "transpose", "nn.relu", "clip")
ACTIVATIONS = ("nn.relu", "clip")


def prepare_for_quantize(mod: IRModule, params: Mapping[str, np.ndarray] | None = None) -> IRModule:
    """Bind the weights and run the inference rewrites (batch norm folded into conv weights and a
    per-channel add) the quantizer expects; the layers keep their names (checked)."""
    before = quantizable_layers_kinds(mod)
    if params:
        mod = bind_params(mod, params)
    passes = [ToGraphNormalForm(), SimplifyInference(), FoldConstant(), SimplifyExpr(), FoldScaleAxis(),
              FoldConstant(), EliminateCommonSubexpr(), DeadCodeElimination()]
    out = Pipeline(passes)(mod)
    after = quantizable_layers_kinds(out)
    if after != before:
        raise ValueError(f"prepare_for_quantize changed the layers: {len(before)} before, {len(after)} after")
    return out


def quantizable_layers_kinds(mod: IRModule) -> list[str]:
    return [LAYER_OPS[op_name(c) or ""] for c in layer_calls(mod).values()]


@dataclass(eq=False)
class Layer:
    """A conv2d/dense call with its epilogue; `out` is the epilogue's last node."""

    name: str
    call: Call
    out: Expr
    bias: np.ndarray | None = None  # (channels,) float
    bias_call: Call | None = None  # the bias_add / add that adds it
    activation: Call | None = None  # the relu / clip node, applied last
    unsupported: str = ""  # why the layer cannot be int8 ("" when it can)
    inner: list[Expr] = field(default_factory=list)  # nodes of the epilogue before `out`

    @property
    def kind(self) -> str:
        return LAYER_OPS[op_name(self.call) or ""]

    @property
    def axis(self) -> int:
        """The output's channel axis: 1 of an NCHW convolution, the last of a dense layer (whose
        data may have several row axes, as a transformer's (batch, tokens, features))."""
        return channel_axis(self.call)


def channel_axis(layer: Call) -> int:
    if op_name(layer) == "nn.dense":
        t = tensor_type(layer)
        return len(t.shape) - 1 if t is not None else 1
    return 1


@dataclass(eq=False)
class Join:
    """An add of two tensors or a concatenate, with an optional activation; int8 when its inputs are."""

    name: str
    call: Call
    out: Expr
    inputs: list[Expr]
    activation: Call | None = None


@dataclass(eq=False)
class Annotation:
    fn: Function
    layers: dict[str, Layer]
    joins: dict[str, Join]
    uses: dict[int, list[Expr]]  # node id -> its consumers

    def points(self) -> dict[str, Expr]:
        """Calibration point name -> the float node whose range it needs."""
        out: dict[str, Expr] = {}
        for name, layer in self.layers.items():
            out[f"{name}:in"] = layer.call.args[0]
            out[f"{name}:out"] = layer.out
        for name, join in self.joins.items():
            out[f"{name}:out"] = join.out
        return out


def _consumers(body: Expr) -> dict[int, list[Expr]]:
    uses: dict[int, list[Expr]] = {}
    for node in post_order(body, lambda e: [] if isinstance(e, Function) else children(e)):
        for k in children(node):
            uses.setdefault(id(k), []).append(node)
    return uses


def _sole_consumer(uses: dict[int, list[Expr]], e: Expr) -> Expr | None:
    cs = uses.get(id(e), [])
    return cs[0] if len(cs) == 1 else None


def _channel_bias(add: Expr, x: Expr, channels: int, axis: int) -> np.ndarray | None:
    """The (channels,) bias vector when `add` adds a constant along `x`'s channel `axis`, else None."""
    if not isinstance(add, Call):  # a tuple or a function reads the layer: no bias to fold
        return None
    name = op_name(add)
    if name == "nn.bias_add" and add.args[0] is x and isinstance(add.args[1], Constant):
        t = tensor_type(x)
        if t is not None and add.attrs["axis"] % len(t.shape) == axis:
            return np.asarray(add.args[1].data, np.float64).reshape(-1)
        return None
    if name != "add" or add.args[0] is not x or not isinstance(add.args[1], Constant):
        return None
    c, t = add.args[1].data, tensor_type(x)
    if t is None or c.ndim > len(t.shape):
        return None
    shape = (1,) * (len(t.shape) - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (channels,)).copy()


def _is_activation(e: Expr) -> bool:
    if op_name(e) == "nn.relu":
        return True
    return op_name(e) == "clip" and float(e.attrs["a_min"]) == 0.0  # type: ignore[union-attr]


def _unsupported(c: Call) -> str:
    t, wt = tensor_type(c.args[0]), tensor_type(c.args[1])
    if not isinstance(c.args[1], Constant):
        return "its weight is not a constant"
    if t is None or t.dtype != "float32" or wt is None or not t.is_static:
        return "its input is not a static float32 tensor"
    if op_name(c) == "nn.conv2d":
        a = c.attrs
        layouts = (a["data_layout"], a["kernel_layout"], a.get("out_layout", "") or "NCHW")
        if layouts != ("NCHW", "OIHW", "NCHW"):
            return f"layout {a['data_layout']}/{a['kernel_layout']} (NCHW/OIHW only)"
    return ""


def annotate(fn: Function | IRModule) -> Annotation:
    """Find the layers and joins of a prepared (typed) function."""
    if isinstance(fn, IRModule):
        fn = fn["main"]
    uses = _consumers(fn.body)
    layers: dict[str, Layer] = {}
    for name, c in layer_calls(fn).items():
        layer = Layer(name, c, c, unsupported=_unsupported(c))
        t = tensor_type(c)
        channels = t.shape[layer.axis] if t is not None else None
        nxt = _sole_consumer(uses, c)
        if nxt is not None and isinstance(channels, int):
            bias = _channel_bias(nxt, c, channels, layer.axis)
            if bias is not None:
                layer.bias, layer.bias_call, layer.inner, layer.out = bias, nxt, [c], nxt  # type: ignore[assignment]
                nxt = _sole_consumer(uses, nxt)
        if nxt is not None and _is_activation(nxt):
            layer.inner.append(layer.out)
            layer.activation, layer.out = nxt, nxt  # type: ignore[assignment]
        layers[name] = layer
    joins: dict[str, Join] = {}
    counters = {"add": 0, "concatenate": 0}
    for node in post_order(fn.body, lambda e: [] if isinstance(e, Function) else children(e)):
        kind = op_name(node)
        if kind == "add":
            a, b = node.args  # type: ignore[union-attr]
            ta, tb, to = tensor_type(a), tensor_type(b), tensor_type(node)
            if isinstance(a, Constant) or isinstance(b, Constant) or None in (ta, tb, to):
                continue
            if not (ta.shape == tb.shape == to.shape and to.dtype == "float32"):  # type: ignore[union-attr]
                continue
            inputs = [a, b]
        elif kind == "concatenate":
            tup = node.args[0]  # type: ignore[union-attr]
            if not isinstance(tup, Tuple) or any(isinstance(f, Constant) for f in tup.fields):
                continue
            if (tensor_type(node) or tensor_type(tup.fields[0]) or None) is None:
                continue
            inputs = list(tup.fields)
        else:
            continue
        name = f"{kind}_{counters[kind]}"
        counters[kind] += 1
        join = Join(name, node, node, inputs)  # type: ignore[arg-type]
        nxt = _sole_consumer(uses, node)
        if nxt is not None and _is_activation(nxt):
            join.activation, join.out = nxt, nxt  # type: ignore[assignment]
        joins[name] = join
    return Annotation(fn, layers, joins, uses)


def layer_support(mod: IRModule, params: Mapping[str, np.ndarray] | None = None) -> dict[str, str]:
    """Layer name -> why it cannot run in int8 ("" when it can): a plan's "int8" for such a layer
    leaves it in float, so a search can skip it."""
    ann = annotate(prepare_for_quantize(mod, params))
    return {name: layer.unsupported for name, layer in ann.layers.items()}
