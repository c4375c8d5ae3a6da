"""Realize the plan's bf16 layers: bf16 weights and activations, float32 accumulation and output.

Runs on the function `realize` returned, where every layer that is not int8 is still its float
`nn.conv2d` / `nn.dense` call with the very weight constant the annotation saw (realize leaves
float layers' constants untouched), so a bf16 layer is found by the identity of its weight:

    nn.conv2d(x, W)  ->  bf16.conv2d(bf16.quantize(x), to_bf16(W))     (float32 out)
    nn.dense(x, W)   ->  bf16.dense(bf16.quantize(x), to_bf16(W))

Only the layer's inputs change: its bias and activation stay the float32 ops they were and fuse
into the bf16 kernel as its epilogue, and its output stays float32, so whatever reads it (an int8
layer's quantize, a float op, another bf16 layer's conversion) is unchanged. One conversion serves
every bf16 layer that reads the same value. Weights are rounded with `autorelay.op.bf16.to_bf16`,
the same function the kernels' conversion and the tests' oracle follow.

A layer the bf16 kernels cannot run (grouped or depthwise convolution, a layout other than
NCHW/OIHW, dense input of rank other than 2, a weight that is not a constant) stays in float32;
`bf16_support` says why, as `layer_support` does for int8.
"""

from __future__ import annotations

from autorelay.ir.expr import Call, Constant, Expr, Function
from autorelay.ir.visitor import ExprMutator
from autorelay.op.bf16 import to_bf16
from autorelay.op.registry import call, get
from autorelay.transform.quantize.annotate import Annotation, Layer
from autorelay.transform.quantize.layers import QuantizePlan
from autorelay.transform.util import op_name

__all__ = ["bf16_support", "realize_bf16"]


def bf16_support(layer: Layer) -> str:
    """Why `layer` cannot run in bf16 ("" when it can)."""
    if layer.unsupported:  # a non-constant weight, a non-float32 input, a layout other than NCHW
        return layer.unsupported
    if layer.kind == "conv2d" and layer.call.attrs["groups"] != 1:
        return "grouped convolution has no bf16 kernel"
    return ""


class _ToBf16(ExprMutator):
    def __init__(self, layers: dict[int, Layer]) -> None:
        super().__init__()
        self.layers = layers  # id(float weight Constant) -> its bf16 layer
        self.converted: dict[int, Expr] = {}  # id(float activation) -> its bf16.quantize
        self.weights: dict[int, str] = {}  # id(bf16 weight Constant) -> parameter name

    def visit_call(self, c: Call) -> Expr:
        layer = self.layers.get(id(c.args[1])) if len(c.args) == 2 else None
        if layer is None or op_name(c) not in ("nn.conv2d", "nn.dense"):
            return super().visit_call(c)
        x = self.visit(c.args[0])
        if id(x) not in self.converted:
            self.converted[id(x)] = call("bf16.quantize", x)
        w = Constant(to_bf16(c.args[1].data))  # type: ignore[union-attr]
        self.weights[id(w)] = f"{layer.name}_weight"
        op = "bf16.conv2d" if layer.kind == "conv2d" else "bf16.dense"
        known = get(op).attrs
        attrs = {k: v for k, v in c.attrs.items() if k in known and k != "out_dtype"}
        return call(op, self.converted[id(x)], w, **attrs)


def realize_bf16(fn: Function, ann: Annotation, plan: QuantizePlan) -> tuple[Function, dict[int, str]]:
    """`fn` (realize's output) with the plan's bf16 layers as bf16 ops, and the names of their
    weight constants (id -> name). A weight constant shared with a layer of another precision
    (deduplicated identical weights) leaves its bf16 layers in float32."""
    bf16 = [layer for layer in ann.layers.values()
            if plan.precision(layer.name) == "bf16" and not bf16_support(layer)]
    others = {id(layer.call.args[1]) for layer in ann.layers.values() if layer not in bf16}
    by_weight = {id(layer.call.args[1]): layer for layer in bf16 if id(layer.call.args[1]) not in others}
    if not by_weight:
        return fn, {}
    m = _ToBf16(by_weight)
    return Function(fn.params, m.visit(fn.body)), m.weights
