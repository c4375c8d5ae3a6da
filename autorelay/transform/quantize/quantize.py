"""`quantize_model`: prepare, annotate, realize, then lift the weights back into parameters.

The result follows the zoo's convention: weights (int8 weights, int32 biases, bf16 weights as
uint16 words, the float weights of fp32 layers) are parameters of `@main` with their values in the
returned dict; scales and zero points stay inline constants of the qnn calls (they are part of each
kernel's identity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from autorelay.ir.expr import Call, Constant, Expr, Function, Op, Var
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import ExprMutator
from autorelay.transform.bind import bind_params
from autorelay.transform.pass_base import ModulePass
from autorelay.transform.quantize.annotate import annotate, prepare_for_quantize
from autorelay.transform.quantize.bf16 import realize_bf16
from autorelay.transform.quantize.calibrate import Calibration
from autorelay.transform.quantize.layers import QuantizePlan, layer_calls, quantizable_layers
from autorelay.transform.quantize.realize import realize
from autorelay.transform.quantize.scheme import QuantizeScheme, scheme_named
from autorelay.typing import infer_types
from autorelay.utils.deep import deep

WEIGHT_SUFFIX = "_weight"  # a float layer's lifted weight parameter: `<layer>_weight` (`float_layers`)
# First argument position of each qnn op's scale / zero point arguments (kept inline).
_QPARAMS_FROM = {"qnn.quantize": 1, "qnn.dequantize": 1, "qnn.requantize": 1, "qnn.conv2d": 2,
                 "qnn.dense": 2, "qnn.add": 2, "qnn.concatenate": 1}


class _Lift(ExprMutator):
    """Constants with more than one element become parameters (named when known)."""

    def __init__(self, names: Mapping[int, str]) -> None:
        super().__init__()
        self.names = names
        self.params: dict[str, np.ndarray] = {}
        self.vars: list[Var] = []

    def visit_call(self, c: Call) -> Expr:
        start = _QPARAMS_FROM.get(c.op.name) if isinstance(c.op, Op) else None
        if start is None:
            return super().visit_call(c)
        args = tuple(self.visit(a) if i < start else a for i, a in enumerate(c.args))
        return c if all(a is b for a, b in zip(args, c.args)) else c.replace(args=args)

    def visit_constant(self, k: Constant) -> Expr:
        if k.data.size <= 1:
            return k
        name = self.names.get(id(k), f"const_{len(self.vars)}")
        while name in self.params:
            name += "_"
        v = Var(name, k.type)
        self.params[name] = k.data
        self.vars.append(v)
        return v


@deep
def quantize_model(mod: IRModule, params: Mapping[str, np.ndarray] | None, calibration: Calibration,
                   plan: QuantizePlan | None = None, scheme: str | QuantizeScheme = "cpu"
                   ) -> tuple[IRModule, dict[str, np.ndarray]]:
    """The model with the plan's int8 layers as qnn ops and its bf16 layers as bf16 ops (float
    inputs and outputs), and its weights.

    `scheme`: how the integers represent numbers ("cpu", or "vta" for the accelerator's int8,
    power-of-two scales; `autorelay.transform.quantize.scheme`). Only `@main` is kept (a dataflow
    graph; the quantizer rejects control flow)."""
    plan = plan or QuantizePlan()
    scheme = scheme_named(scheme)
    layers = quantizable_layers(mod)
    plan.check(layers)
    if calibration.layers and tuple(calibration.layers) != tuple(layers):
        raise ValueError("quantize_model: the calibration was made for a model with other layers")
    ann = annotate(prepare_for_quantize(mod, params))
    fn, names = realize(ann, calibration, plan, scheme)
    fn, bf16_names = realize_bf16(fn, ann, plan)  # the plan's bf16 layers (autorelay...quantize.bf16)
    names = {**names, **bf16_names}
    for layer in ann.layers.values():
        names.setdefault(id(layer.call.args[1]), f"{layer.name}{WEIGHT_SUFFIX}")
        if layer.bias_call is not None:
            names.setdefault(id(layer.bias_call.args[1]), f"{layer.name}_bias")
    lift = _Lift(names)
    body = lift.visit(fn.body)
    out = IRModule.from_expr(Function(tuple(fn.params) + tuple(lift.vars), body))
    return infer_types(out), lift.params


def float_layers(qmod: IRModule) -> list[str]:
    """The float model's names of the layers `quantize_model` left in float32 (the plan's fp32
    layers, and int8/bf16 ones no kernel runs), in the quantized model's layer order: its
    `conv2d_i`/`dense_i` are only those layers, numbered again, and each still reads the weight
    parameter `<its float name>_weight` it was lifted to."""
    out = []
    for name, call in layer_calls(qmod).items():
        weight = call.args[1]
        if not (isinstance(weight, Var) and weight.name_hint.endswith(WEIGHT_SUFFIX)):
            raise ValueError(f"float_layers: layer {name} of the quantized model reads no lifted weight "
                             f"(not a model from quantize_model?)")
        out.append(weight.name_hint[: -len(WEIGHT_SUFFIX)])
    return out


@dataclass(frozen=True)
class Quantize(ModulePass):
    """`quantize_model` as a pass value, for pipelines: weights stay constants (bind them first).

    `Pipeline([Quantize(calibration, plan), *pipeline_passes("default")])`."""

    name: ClassVar[str] = "Quantize"
    calibration: Calibration = field(default_factory=lambda: Calibration("max", {}))
    plan: QuantizePlan = field(default_factory=QuantizePlan)
    scheme: str = "cpu"

    def transform_module(self, mod: IRModule) -> IRModule:
        qmod, params = quantize_model(mod, None, self.calibration, self.plan, self.scheme)
        return bind_params(qmod, params)
