"""Layer names and the precision plan: the vocabulary the quantizer and the precision search share.

A quantizable layer is an `nn.conv2d` (depthwise included) or `nn.dense` call of `@main`. Layers
are named per kind in post order (`conv2d_0`, `conv2d_1`, …, `dense_0`): the names depend only on
the graph's structure, so they are the same before and after the inference rewrites the quantizer
runs first (batch-norm folding changes a convolution's weight, never the order of convolutions),
and a plan written for a model stays valid for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autorelay.ir.expr import Call, Expr, Function
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import children, post_order
from autorelay.transform.util import op_name

LAYER_OPS = {"nn.conv2d": "conv2d", "nn.dense": "dense"}
PRECISIONS = ("int8", "fp32", "bf16")


def _no_primitive(e: Expr) -> list[Expr]:
    return [] if isinstance(e, Function) and e.is_primitive else children(e)


def layer_calls(mod: IRModule | Function, entry: str = "main") -> dict[str, Call]:
    """Layer name -> its call, in post order of `entry` (primitive functions are not entered)."""
    fn = mod[entry] if isinstance(mod, IRModule) else mod
    counters: dict[str, int] = {}
    out: dict[str, Call] = {}
    for node in post_order(fn.body, _no_primitive):
        kind = LAYER_OPS.get(op_name(node) or "")
        if kind is not None:
            n = counters.get(kind, 0)
            counters[kind] = n + 1
            out[f"{kind}_{n}"] = node  # type: ignore[assignment]
    return out


def quantizable_layers(mod: IRModule | Function, entry: str = "main") -> list[str]:
    """Stable names of the conv2d / dense layers of `entry`: "conv2d_0", "conv2d_1", "dense_0", …"""
    return list(layer_calls(mod, entry))


@dataclass(frozen=True)
class QuantizePlan:
    """Which precision each layer runs in: `precisions[layer]`, else `default`.

    Values are "int8", "bf16" or "fp32". Unknown layer names are caught when the plan meets a
    model (`check`, `quantize_model`).
    """

    precisions: Mapping[str, str] = field(default_factory=dict)
    default: str = "int8"

    def __post_init__(self) -> None:
        object.__setattr__(self, "precisions", dict(sorted(dict(self.precisions).items())))
        for name, p in [("default", self.default), *self.precisions.items()]:
            if p not in PRECISIONS:
                raise ValueError(f"QuantizePlan: precision {p!r} for {name} is not one of "
                                 f"{', '.join(PRECISIONS)}")

    def precision(self, layer: str) -> str:
        return self.precisions.get(layer, self.default)

    def check(self, layers: list[str] | IRModule) -> None:
        """Raise ValueError when the plan names a layer the model does not have."""
        valid = quantizable_layers(layers) if isinstance(layers, IRModule) else list(layers)
        unknown = [name for name in self.precisions if name not in valid]
        if unknown:
            raise ValueError(f"QuantizePlan names unknown layer(s) {', '.join(unknown)}; "
                             f"the model's layers are: {', '.join(valid) or '(none)'}")

    def int8_layers(self, layers: list[str]) -> list[str]:
        return [name for name in layers if self.precision(name) == "int8"]

    # ---- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default, "precisions": dict(self.precisions)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_json(text: str | Mapping[str, Any]) -> QuantizePlan:
        """The inverse of `to_json` (also takes the already-parsed dict)."""
        data = json.loads(text) if isinstance(text, str) else dict(text)
        extra = sorted(set(data) - {"default", "precisions"})
        if extra:
            raise ValueError(f"QuantizePlan JSON has unknown key(s) {', '.join(extra)}")
        return QuantizePlan(dict(data.get("precisions", {})), data.get("default", "int8"))

    @staticmethod
    def uniform(precision: str) -> QuantizePlan:
        return QuantizePlan({}, precision)
