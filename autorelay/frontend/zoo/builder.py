"""A small network builder for the model zoo: named, seeded weights plus layer helpers.

Every weight becomes a parameter of `@main` (as in Relay's testing zoo), and its value goes into
the `params` dict, so passes such as FoldConstant/FoldScaleAxis can bind and fold them. Weights
are drawn from a generator seeded per model, so `zoo.get(name)` is deterministic.
"""

from __future__ import annotations

import numpy as np

from autorelay.ir.expr import Expr, Function, TupleGetItem, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType
from autorelay.op.registry import call


class NetBuilder:
    def __init__(self, seed: int, dtype: str = "float32") -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.params: dict[str, np.ndarray] = {}
        self.param_vars: list[Var] = []

    # ---- weights ------------------------------------------------------------------------

    def weight(self, name: str, shape: tuple[int, ...], init: str = "he", fan_in: int | None = None) -> Var:
        """A named parameter with its initial value (He-normal by default, scaled to fan-in)."""
        if name in self.params:
            raise ValueError(f"parameter {name} defined twice")
        if init == "he":
            fan = fan_in if fan_in is not None else int(np.prod(shape[1:])) or 1
            value = self.rng.standard_normal(shape) * np.sqrt(2.0 / fan)
        elif init == "uniform":
            fan = fan_in if fan_in is not None else int(np.prod(shape[1:])) or 1
            bound = 1.0 / np.sqrt(fan)
            value = self.rng.uniform(-bound, bound, shape)
        elif init == "zeros":
            value = np.zeros(shape)
        elif init == "ones":
            value = np.ones(shape)
        elif init == "small":
            value = self.rng.standard_normal(shape) * 0.1
        elif init == "positive":  # batch-norm variances
            value = self.rng.uniform(0.5, 1.5, shape)
        else:
            raise ValueError(f"unknown initialiser {init}")
        self.params[name] = value.astype(self.dtype)
        var = Var(name, TensorType(tuple(shape), self.dtype))
        self.param_vars.append(var)
        return var

    def input(self, name: str, shape: tuple[int, ...], dtype: str | None = None) -> Var:
        return Var(name, TensorType(tuple(shape), dtype or self.dtype))

    # ---- layers -------------------------------------------------------------------------

    def conv2d(
        self,
        x: Expr,
        name: str,
        in_ch: int,
        out_ch: int,
        kernel: int | tuple[int, int],
        stride: int = 1,
        padding: int | None = None,
        groups: int = 1,
        bias: bool = False,
    ) -> Expr:
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        pad = (kh // 2, kw // 2) if padding is None else (padding, padding)
        w = self.weight(f"{name}_weight", (out_ch, in_ch // groups, kh, kw))
        y = call(
            "nn.conv2d", x, w, strides=(stride, stride), padding=pad, groups=groups,
            channels=out_ch, kernel_size=(kh, kw),
        )
        if bias:
            y = call("nn.bias_add", y, self.weight(f"{name}_bias", (out_ch,), "small"), axis=1)
        return y

    def batch_norm(self, x: Expr, name: str, channels: int, epsilon: float = 1e-5) -> Expr:
        gamma = self.weight(f"{name}_gamma", (channels,), "positive")
        beta = self.weight(f"{name}_beta", (channels,), "small")
        mean = self.weight(f"{name}_moving_mean", (channels,), "small")
        var = self.weight(f"{name}_moving_var", (channels,), "positive")
        return TupleGetItem(call("nn.batch_norm", x, gamma, beta, mean, var, axis=1, epsilon=epsilon), 0)

    def conv_bn_relu(self, x: Expr, name: str, in_ch: int, out_ch: int, kernel: int, stride: int = 1,
                     groups: int = 1, relu: bool = True) -> Expr:
        y = self.batch_norm(self.conv2d(x, name, in_ch, out_ch, kernel, stride, groups=groups),
                            f"{name}_bn", out_ch)
        return call("nn.relu", y) if relu else y

    def dense(self, x: Expr, name: str, in_features: int, units: int, bias: bool = True) -> Expr:
        w = self.weight(f"{name}_weight", (units, in_features), "uniform")
        y = call("nn.dense", x, w, units=units)
        if bias:
            y = call("nn.bias_add", y, self.weight(f"{name}_bias", (units,), "small"), axis=-1)
        return y

    # ---- result -------------------------------------------------------------------------

    def finish(self, inputs: list[Var], body: Expr) -> tuple[IRModule, dict[str, np.ndarray]]:
        fn = Function(tuple(inputs) + tuple(self.param_vars), body)
        return IRModule.from_expr(fn), dict(self.params)
