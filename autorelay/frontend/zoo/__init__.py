"""The model zoo: `names()` and `get(name, batch_size=1, dtype="float32", **options) -> (mod, params)`.

Weights are deterministic (seeded) random values; every weight is a parameter of `@main` whose
value is in `params`, and the remaining parameters of `@main` are the model's inputs
(`random_inputs` makes some).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from autorelay.frontend.zoo import cnn, rnn, transformer, treelstm
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType

_MODELS: dict[str, Callable[..., tuple[IRModule, dict[str, np.ndarray]]]] = {
    "resnet-18": lambda **kw: cnn.resnet(18, **kw),
    "resnet-34": lambda **kw: cnn.resnet(34, **kw),
    "resnet-50": lambda **kw: cnn.resnet(50, **kw),
    "resnext-50": lambda **kw: cnn.resnet(50, cardinality=32, **kw),
    "mobilenet-v2": cnn.mobilenet_v2,
    "vgg-16": cnn.vgg16,
    "squeezenet-1.1": cnn.squeezenet1_1,
    "nature-dqn": cnn.nature_dqn,
    "dcgan": cnn.dcgan_generator,
    "inception": cnn.inception_net,
    "mlp": cnn.mlp,
    "transformer": transformer.transformer_encoder,
    "lstm": rnn.lstm,
    "gru": rnn.gru,
    "rnn": rnn.rnn,
    "char-rnn": rnn.char_rnn,
    "tree-lstm": treelstm.tree_lstm,
}

_ALIASES = {"resnet18": "resnet-18", "resnet34": "resnet-34", "resnet50": "resnet-50",
            "resnext50": "resnext-50", "mobilenet": "mobilenet-v2", "mobilenetv2": "mobilenet-v2",
            "vgg16": "vgg-16", "squeezenet": "squeezenet-1.1", "dqn": "nature-dqn", "charrnn": "char-rnn",
            "treelstm": "tree-lstm"}


def names() -> list[str]:
    return sorted(_MODELS)


def canonical_name(name: str) -> str:
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in _MODELS:
        raise KeyError(f"unknown model {name!r}; the zoo has: {', '.join(names())}")
    return key


def get(name: str, batch_size: int = 1, dtype: str = "float32", **options: Any):
    """Build a zoo model. Options are per model (e.g. `image_size`, `seq_len`, `steps`)."""
    return _MODELS[canonical_name(name)](batch_size=batch_size, dtype=dtype, **options)


def input_types(mod: IRModule, params: dict[str, np.ndarray]) -> dict[str, TensorType]:
    """The declared types of `@main`'s parameters that are not weights."""
    out = {}
    for p in mod["main"].params:
        if p.name_hint not in params:
            if not isinstance(p.type_annotation, TensorType):
                raise TypeError(f"input %{p.name_hint} is not a tensor")
            out[p.name_hint] = p.type_annotation
    return out


def random_inputs(mod: IRModule, params: dict[str, np.ndarray], seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal(t.concrete_shape).astype(t.dtype)
        for name, t in input_types(mod, params).items()
    }


__all__ = ["canonical_name", "get", "input_types", "names", "random_inputs"]
