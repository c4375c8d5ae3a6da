"""Folding the QDQ format into quantised operators before import, as ONNX Runtime's own QDQ
transformers do, so the int8 kernels run instead of float ops between dequantize and quantize.

ONNX Runtime's quantizer (QuantFormat.QDQ) and PyTorch's exporter write a quantised layer as float
ops between DequantizeLinear and QuantizeLinear nodes:

    DQ(x_q) ─┐
    DQ(w_q) ─┼─ Conv ─(Relu)─ Q ─> y_q        becomes    QLinearConv(x_q, …, w_q, …, bias_i32) ─> y_q
    DQ(b_i32)┘

Which chains fold (every other node stays, and runs in float through qnn.dequantize / quantize —
correct, only slower):

* Conv (1-d/2-d) whose weight is a constant DQ (per tensor or per output channel), bias absent, a
  constant DQ or a float constant -> `QLinearConv`;
* MatMul -> `QLinearMatMul`; Gemm with a constant weight -> `com.microsoft.QGemm`;
* Add of two DQs -> `com.microsoft.QLinearAdd`; Concat of DQs -> `com.microsoft.QLinearConcat`;
* Relu, Flatten, Reshape, Transpose, Squeeze, Unsqueeze between a DQ and a Q of the same scale and
  zero point -> the op on the integers (a Relu as `Max(x, zero_point)`);

when the op's output goes only to one QuantizeLinear (optionally through a Relu: quantising
`max(v, 0)` is `max(Q(v), zero_point)` exactly, kept as an integer Max), every scale and zero point
is a constant, the activations are per tensor and all types are 8-bit. Constants may come as
exporters write them: initializers, Constant nodes, Identity / Cast / ConstantOfShape of constants
and QuantizeLinear of a float weight (PyTorch). The fused node takes the chain's place at its
QuantizeLinear, after every parameter it reads. The bias is re-expressed at the accumulator's scale
`x_scale * w_scale` (the same integers when the quantizer already used that scale, as ONNX
Runtime's does).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

_DQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
_Q8 = (np.dtype("uint8"), np.dtype("int8"))


@dataclass(frozen=True)
class _QInput:
    """A DequantizeLinear's quantised input and its parameters (names and static values)."""

    data: str
    scale: str
    zp: str
    scale_v: np.ndarray
    axis: int
    const: np.ndarray | None  # the quantised value when it is a constant (a weight)

    @property
    def per_tensor(self) -> bool:
        return self.scale_v.size == 1

    def names(self) -> list[str]:
        return [self.data, self.scale, self.zp]


class _Graph:
    def __init__(self, onnx: Any, graph: Any) -> None:
        self.onnx = onnx
        self.graph = graph
        self.consts: dict[str, np.ndarray] = {}
        for t in graph.initializer:
            if not t.external_data:
                self.consts[t.name] = onnx.numpy_helper.to_array(t)
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = defaultdict(list)
        for n in graph.node:
            for o in n.output:
                self.producer[o] = n
            for i in n.input:
                if i:
                    self.consumers[i].append(n)
        self.outputs = {o.name for o in graph.output}
        self.new_inits: list[Any] = []
        self.fresh = 0
        self.quantized: dict[str, str] = {}  # Q-of-constant output -> the initializer holding its value
        for n in graph.node:
            value = self._const_value(n) if n.domain in ("", "ai.onnx") and len(n.output) == 1 else None
            if value is not None:
                self.consts[n.output[0]] = value

    def _const_value(self, n: Any) -> np.ndarray | None:
        """The value of a node that only reshuffles constants, as exporters write quantisation
        parameters: Constant, Identity, Cast, ConstantOfShape (PyTorch) and QuantizeLinear."""
        numpy_helper, ins = self.onnx.numpy_helper, [self.consts.get(i) for i in n.input]
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "Constant" and set(attrs) == {"value"}:
            return numpy_helper.to_array(attrs["value"].t)
        if not ins or any(v is None for v in ins):
            return None
        if n.op_type == "Identity":
            return ins[0]
        if n.op_type == "Cast" and "to" in attrs:
            return ins[0].astype(self.onnx.helper.tensor_dtype_to_np_dtype(attrs["to"].i))
        if n.op_type == "ConstantOfShape" and ins[0].size <= 8:
            fill = numpy_helper.to_array(attrs["value"].t) if "value" in attrs else np.zeros(1, "float32")
            return np.full(tuple(int(d) for d in ins[0].reshape(-1)), fill.reshape(-1)[0], fill.dtype)
        return self._quantized_const(n)

    def _quantized_const(self, n: Any) -> np.ndarray | None:
        """The value of a QuantizeLinear of a float constant (a weight as PyTorch exports it), as
        ONNX Runtime computes it: saturate(round_half_even(x / scale) + zero_point)."""
        if n.op_type != "QuantizeLinear" or len(n.input) < 3:
            return None
        x, scale, zp = (self.consts.get(i) for i in n.input[:3])
        if x is None or scale is None or zp is None or x.dtype != np.float32 or zp.dtype not in _Q8:
            return None
        if any(a.name in ("block_size", "output_dtype", "saturate") for a in n.attribute) or scale.ndim > 1:
            return None
        if scale.size > 1:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1) % x.ndim
            shape = [1] * x.ndim
            shape[axis] = -1
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        info = np.iinfo(zp.dtype)
        q = np.rint(x / scale).astype(np.float64) + zp.astype(np.float64)
        return np.clip(q, info.min, info.max).astype(zp.dtype)

    def data_name(self, name: str) -> str:
        """`name`, or for a quantised constant an initializer holding its value (so that the
        QuantizeLinear of a float weight need not run, nor its float weight become a parameter)."""
        if name in self.producer and self.producer[name].op_type == "QuantizeLinear" and name in self.consts:
            if name not in self.quantized:
                self.quantized[name] = self.initializer(self.consts[name], name)
            return self.quantized[name]
        return name

    def dq(self, name: str) -> _QInput | None:
        n = self.producer.get(name)
        if n is None or n.op_type != "DequantizeLinear" or n.domain not in _DQ_DOMAINS:
            return None
        if any(a.name == "block_size" and a.i for a in n.attribute) or len(n.input) < 2:
            return None
        scale = self.consts.get(n.input[1])
        zp_name = n.input[2] if len(n.input) > 2 else ""
        zp = self.consts.get(zp_name) if zp_name else np.zeros((), "uint8")
        if scale is None or zp is None or scale.dtype != np.float32 or scale.ndim > 1:
            return None
        data = self.consts.get(n.input[0])
        dtype = data.dtype if data is not None else zp.dtype
        if dtype not in _Q8 and not (dtype == np.int32 and data is not None):  # int32: a bias
            return None
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        return _QInput(self.data_name(n.input[0]), n.input[1], zp_name, scale, axis, data)

    def sole_q(self, name: str) -> tuple[Any, Any | None] | None:
        """The QuantizeLinear that alone reads `name` (maybe through a Relu), and that Relu."""
        relu = None
        users = self.consumers.get(name, [])
        if name in self.outputs or len(users) != 1:
            return None
        if users[0].op_type == "Relu":
            relu = users[0]
            users = self.consumers.get(relu.output[0], [])
            if relu.output[0] in self.outputs or len(users) != 1:
                return None
        q = users[0]
        if q.op_type != "QuantizeLinear" or q.domain not in _DQ_DOMAINS or len(q.input) < 2:
            return None
        scale = self.consts.get(q.input[1])
        zp = self.consts.get(q.input[2]) if len(q.input) > 2 and q.input[2] else np.zeros((), "uint8")
        attrs = {a.name for a in q.attribute if a.name in ("output_dtype", "block_size")}
        if scale is None or zp is None or scale.size != 1 or zp.size != 1 or zp.dtype not in _Q8 or attrs:
            return None
        return q, relu

    def initializer(self, value: np.ndarray, hint: str) -> str:
        self.fresh += 1
        name = f"{hint}__qdq{self.fresh}"
        self.new_inits.append(self.onnx.numpy_helper.from_array(value, name))
        self.consts[name] = value
        return name


def _int32_bias(g: _Graph, name: str, acc_scale: np.ndarray, hint: str) -> str | None:
    """The bias `name` (DQ of int32, or float constant) as int32 at `acc_scale`, or None."""
    d = g.dq(name)
    if d is not None and d.const is not None:
        zp = g.consts.get(d.zp, np.zeros((), "int32")) if d.zp else np.zeros((), "int32")
        real = (d.const.astype(np.float64) - zp.astype(np.float64)) * d.scale_v.astype(np.float64)
    elif name in g.consts and g.consts[name].dtype.kind == "f":
        real = g.consts[name].astype(np.float64)
    else:
        return None
    q = np.round(real / acc_scale.astype(np.float64))
    if np.any(np.abs(q) > 2**31 - 1):
        return None
    q = q.astype("int32")
    if d is not None and d.const is not None and np.array_equal(q, d.const) and d.const.dtype == np.int32:
        return d.data
    return g.initializer(q, hint)


def _weight(g: _Graph, name: str, channel_axis: int) -> _QInput | None:
    w = g.dq(name)
    if w is None or w.const is None or w.const.dtype not in _Q8:
        return None
    if not w.per_tensor and (w.axis % w.const.ndim) != channel_axis:
        return None
    return w


def _acts(g: _Graph, names: list[str]) -> list[_QInput] | None:
    found = [g.dq(n) for n in names]
    for d in found:
        if d is None or not d.per_tensor or (d.const is not None and d.const.dtype not in _Q8):
            return None
    return found  # type: ignore[return-value]


def _fold_node(g: _Graph, n: Any) -> tuple[Any, Any, Any | None, str] | None:
    """(the fused node, the Q it replaces, the Relu it absorbs, the output zero point's name) for
    node `n`, or None."""
    helper = g.onnx.helper
    if n.domain not in ("", "ai.onnx") or len(n.output) != 1:
        return None
    if n.op_type in _MOVES:
        return _fold_move(g, n)
    if n.op_type not in ("Conv", "MatMul", "Gemm", "Add", "Concat"):
        return None
    found = g.sole_q(n.output[0])
    if found is None:
        return None
    q, relu = found
    has_zp = len(q.input) > 2 and q.input[2]
    y = [q.input[1], q.input[2] if has_zp else g.initializer(np.zeros((), "uint8"), "zp")]
    out = q.output[0] if relu is None else f"{q.output[0]}__prerelu"
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    if n.op_type == "Conv":
        x = _acts(g, [n.input[0]])
        w = _weight(g, n.input[1], 0)
        if x is None or w is None or w.const.ndim not in (3, 4):
            return None
        inputs = x[0].names() + w.names() + y
        if len(n.input) > 2 and n.input[2]:
            acc = (np.float32(x[0].scale_v.reshape(())) * w.scale_v.reshape(-1)).astype(np.float32)
            bias = _int32_bias(g, n.input[2], acc, n.input[2])
            if bias is None:
                return None
            inputs.append(bias)
        fused = helper.make_node("QLinearConv", inputs, [out], name=n.name, **attrs)
    elif n.op_type == "MatMul":
        a = _acts(g, [n.input[0]])
        b = g.dq(n.input[1])
        if a is None or b is None or (b.const is not None and b.const.dtype not in _Q8):
            return None
        if not b.per_tensor and (b.const is None or b.const.ndim != 2 or b.axis % 2 != 1):
            return None
        fused = helper.make_node("QLinearMatMul", a[0].names() + b.names() + y, [out], name=n.name)
    elif n.op_type == "Gemm":
        a = _acts(g, [n.input[0]])
        tb = int(attrs.get("transB", 0))
        b = _weight(g, n.input[1], 0 if tb else 1)
        if a is None or b is None or b.const.ndim != 2:
            return None
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        inputs = a[0].names() + b.names()
        if len(n.input) > 2 and n.input[2] and beta != 0.0:
            acc = (np.float32(alpha / beta) * np.float32(a[0].scale_v.reshape(()))
                   * b.scale_v.reshape(-1)).astype(np.float32)
            bias = _int32_bias(g, n.input[2], acc, n.input[2])
            if bias is None:
                return None
            inputs.append(bias)
        else:
            inputs.append("")
        keep = {k: v for k, v in attrs.items() if k in ("alpha", "transA", "transB")}
        fused = helper.make_node("QGemm", inputs + y, [out], name=n.name, domain="com.microsoft", **keep)
    elif n.op_type == "Add":
        ab = _acts(g, list(n.input))
        if ab is None:
            return None
        fused = helper.make_node("QLinearAdd", ab[0].names() + ab[1].names() + y, [out], name=n.name,
                                 domain="com.microsoft")
    else:  # Concat
        if relu is not None:
            return None
        xs = _acts(g, list(n.input))
        if xs is None:
            return None
        inputs = y + [name for x in xs for name in x.names()]
        fused = helper.make_node("QLinearConcat", inputs, [out], name=n.name, domain="com.microsoft",
                                 axis=int(attrs["axis"]))
    return fused, q, relu, y[1]


_MOVES = ("Relu", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze")


def _fold_move(g: _Graph, n: Any) -> tuple[Any, Any, None, str] | None:
    """DQ -> an op that moves or drops values -> Q with the same scale and zero point: the op on the
    quantised values themselves (Q(DQ(x)) = x), a Relu as the integer max(x, zero point)."""
    x = _acts(g, [n.input[0]])
    found = g.sole_q(n.output[0])
    if x is None or found is None or found[1] is not None or not x[0].zp:
        return None
    q = found[0]
    if len(q.input) < 3 or not q.input[2]:
        return None
    same = [(g.consts.get(a), g.consts.get(b)) for a, b in ((x[0].scale, q.input[1]), (x[0].zp, q.input[2]))]
    if any(a is None or b is None or a.dtype != b.dtype or a.size != 1 or b.size != 1
           or a.reshape(-1)[0] != b.reshape(-1)[0] for a, b in same):
        return None
    helper = g.onnx.helper
    if n.op_type == "Relu":
        moved = helper.make_node("Max", [x[0].data, q.input[2]], [q.output[0]], name=n.name)
    else:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        moved = helper.make_node(n.op_type, [x[0].data, *n.input[1:]], [q.output[0]], name=n.name, **attrs)
    return moved, q, None, q.input[2]


def fold_qdq(onnx: Any, model: Any) -> Any:
    """A copy of `model` whose foldable DQ -> op -> Q chains are quantised operators (the module
    docstring says which); the model itself when nothing folds.

    The fold only optimises: on a malformed model (a tensor that does not decode, a node without
    outputs) it folds nothing, and the import reports the fault at the node where it lies."""
    try:
        return _fold(onnx, model)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return model


def _fold(onnx: Any, model: Any) -> Any:
    g = _Graph(onnx, model.graph)
    replace: dict[int, list[Any]] = {}  # id(a chain's Q) -> the nodes standing in its place
    drop: set[int] = set()
    for n in model.graph.node:
        folded = _fold_node(g, n)
        if folded is None:
            continue
        fused, q, relu, y_zp = folded
        nodes = [fused]
        if relu is not None:
            nodes.append(onnx.helper.make_node("Max", [fused.output[0], y_zp], [q.output[0]],
                                               name=f"{relu.name or q.output[0]}__qrelu"))
            drop.add(id(relu))
        replace[id(q)] = nodes  # where the chain ends: its Q's parameters may be defined after the op
        drop.add(id(n))
    if not replace:
        return model
    new_nodes = []
    for n in model.graph.node:
        if id(n) in drop:
            continue
        new_nodes.extend(replace.get(id(n), [n]))
    new_nodes = _without_dead_dq(new_nodes, {o.name for o in model.graph.output})
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    out.graph.initializer.extend(g.new_inits)
    if not any(o.domain == "com.microsoft" for o in out.opset_import):
        out.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    return out


def _without_dead_dq(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """Drop the (De)QuantizeLinear nodes nothing reads any more (the folded weights' and biases')."""
    while True:
        used = {i for n in nodes for i in n.input} | outputs
        kept = [n for n in nodes if n.op_type not in ("DequantizeLinear", "QuantizeLinear")
                or any(o in used for o in n.output)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept
