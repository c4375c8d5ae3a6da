"""Labelled data for the quantization experiments: scikit-learn's 8x8 digits and two small
classifiers written in the IR, trained here by SGD through `autorelay.gradient` and the compiler.

Why train at all: accuracy after quantization means something only for a network that has learned
something, and a labelled held-out set is what top-1 needs. The digits set ships with scikit-learn
(no download), and both networks train to ~95% in seconds.

* `CNN`: conv3x3(1->16)+relu, maxpool, conv3x3(16->32)+relu, maxpool, dense(10) on 8x8 images;
* `RESNET`: a ResNet-style network (two residual blocks, 7 layers) on the digits upsampled to 16x16.

`trained(model, epochs, seed)` trains once per process and keeps the weights: the experiment's
units all quantize the same trained network.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autorelay.ir import Expr, Function, IRModule, TensorType, Var
from autorelay.op.registry import call

CLASSES = 10
C1, C2 = 16, 32  # channels of the CNN's two convolutions
PARAM_SHAPES = {"w1": (C1, 1, 3, 3), "b1": (C1,), "w2": (C2, C1, 3, 3), "b2": (C2,),
                "w3": (CLASSES, C2 * 2 * 2), "b3": (CLASSES,)}


def logits_expr(data: Var, p: dict[str, Var]) -> Expr:
    """The CNN's forward pass for a batch `data: (N, 1, 8, 8)`."""
    h = call("nn.conv2d", data, p["w1"], padding=(1, 1), channels=C1, kernel_size=(3, 3))
    h = call("nn.relu", call("nn.bias_add", h, p["b1"]))
    h = call("nn.max_pool2d", h, pool_size=(2, 2), strides=(2, 2))
    h = call("nn.conv2d", h, p["w2"], padding=(1, 1), channels=C2, kernel_size=(3, 3))
    h = call("nn.relu", call("nn.bias_add", h, p["b2"]))
    h = call("nn.max_pool2d", h, pool_size=(2, 2), strides=(2, 2))
    return call("nn.bias_add", call("nn.dense", call("nn.batch_flatten", h), p["w3"]), p["b3"])


@lru_cache(maxsize=2)
def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> tuple[np.ndarray, ...]:
    """(x_train, x_test, y_train, y_test): images in [0, 1] as (N, 1, 8, 8) float32, a stratified split
    (cached: callers must not change the arrays)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[:, None, :, :]
    y = digits.target.astype("int64")
    return tuple(train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y))


R1, R2 = 16, 32
RESNET_SHAPES = {
    "stem_w": (R1, 1, 3, 3), "stem_b": (R1,),
    "b1c1_w": (R1, R1, 3, 3), "b1c1_b": (R1,), "b1c2_w": (R1, R1, 3, 3), "b1c2_b": (R1,),
    "down_w": (R2, R1, 3, 3), "down_b": (R2,),
    "b2c1_w": (R2, R2, 3, 3), "b2c1_b": (R2,), "b2c2_w": (R2, R2, 3, 3), "b2c2_b": (R2,),
    "fc_w": (CLASSES, R2 * 4 * 4), "fc_b": (CLASSES,),
}


def _conv(x: Expr, p: dict[str, Var], name: str, channels: int, relu: bool = True, stride: int = 1) -> Expr:
    y = call("nn.conv2d", x, p[f"{name}_w"], strides=(stride, stride), padding=(1, 1), channels=channels,
             kernel_size=(3, 3))
    y = call("nn.bias_add", y, p[f"{name}_b"])
    return call("nn.relu", y) if relu else y


def resnet_logits(data: Var, p: dict[str, Var]) -> Expr:
    """stem conv -> residual block (16) -> max pool -> conv (32) -> residual block (32) -> max pool
    -> flatten -> dense. (A global average pool instead of the last max pool barely trains in a few
    epochs without batch norm.)"""
    x = _conv(data, p, "stem", R1)
    x = call("nn.relu", call("add", _conv(_conv(x, p, "b1c1", R1), p, "b1c2", R1, relu=False), x))
    x = call("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2))
    x = _conv(x, p, "down", R2)
    x = call("nn.relu", call("add", _conv(_conv(x, p, "b2c1", R2), p, "b2c2", R2, relu=False), x))
    x = call("nn.batch_flatten", call("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2)))
    return call("nn.bias_add", call("nn.dense", x, p["fc_w"]), p["fc_b"])


@dataclass(frozen=True)
class Model:
    """A digits classifier: parameter shapes, forward pass, input side and training settings."""

    name: str
    shapes: dict[str, tuple[int, ...]]
    logits: Callable[[Var, dict[str, Var]], Expr]
    image: int  # side of the square input (the 8x8 digits are upsampled to it)
    lr: float
    residual: bool = False

    def _vars(self) -> dict[str, Var]:
        return {k: Var(k, TensorType(s, "float32")) for k, s in self.shapes.items()}

    def _data(self, batch: int) -> Var:
        return Var("data", TensorType((batch, 1, self.image, self.image), "float32"))

    def inference(self, batch: int) -> IRModule:
        """`(data, weights...) -> logits`: what gets quantized."""
        data, p = self._data(batch), self._vars()
        return IRModule.from_expr(Function((data, *p.values()), self.logits(data, p)))

    def loss(self, batch: int) -> Function:
        data, p = self._data(batch), self._vars()
        labels = Var("labels", TensorType((batch, CLASSES), "float32"))
        log_probs = call("nn.log_softmax", self.logits(data, p), axis=-1)
        loss = call("negative", call("mean", call("sum", call("multiply", log_probs, labels), axis=(1,))))
        return Function((data, labels, *p.values()), loss)

    def init(self, seed: int) -> dict[str, np.ndarray]:
        """He-normal weights, zero biases; a residual branch's last conv and the classifier of the
        residual net start small (Fixup-style), so each block starts near the identity."""
        rng = np.random.default_rng(seed)
        out = {}
        for k, s in self.shapes.items():
            fan_in = int(np.prod(s[1:])) if len(s) > 1 else 1
            gain = 0.1 if k.endswith("c2_w") or (k == "fc_w" and self.residual) else 1.0
            out[k] = np.zeros(s, "float32") if len(s) == 1 else \
                (rng.standard_normal(s) * gain * np.sqrt(2.0 / fan_in)).astype("float32")
        return out

    def images(self, x: np.ndarray) -> np.ndarray:
        """8x8 digits at this model's input size (nearest-neighbour upsampling)."""
        f = self.image // x.shape[-1]
        return x if f == 1 else np.repeat(np.repeat(x, f, axis=2), f, axis=3)


CNN = Model("digits-cnn", PARAM_SHAPES, logits_expr, 8, lr=0.1)
RESNET = Model("digits-resnet", RESNET_SHAPES, resnet_logits, 16, lr=0.01, residual=True)
MODELS = {m.name: m for m in (CNN, RESNET)}


def train(model: Model, x: np.ndarray, y: np.ndarray, epochs: int, batch: int = 32, seed: int = 0,
          threads: int | None = None, log: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """SGD with momentum 0.9 and a cosine learning rate on `model`'s loss. The gradient program is
    compiled by `autorelay.build` (about 20x faster per step than the interpreter); its output is
    `(loss, (grad data, grad labels, grad params...))`, as the interpreter returns it."""
    import autorelay

    grad = autorelay.build(IRModule.from_expr(autorelay.gradient(model.loss(batch))), target="llvm",
                           threads=threads)
    params, rng = model.init(seed), np.random.default_rng(seed + 1)
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    t0 = time.perf_counter()
    for epoch in range(epochs):
        rate = model.lr * 0.5 * (1 + np.cos(np.pi * epoch / epochs))
        order, losses = rng.permutation(len(x)), []
        for start in range(0, len(x) - batch + 1, batch):
            idx = order[start:start + batch]
            loss, grads = grad(x[idx], np.eye(CLASSES, dtype="float32")[y[idx]], *params.values())
            losses.append(float(loss))
            for (k, v), g in zip(params.items(), grads[2:]):
                velocity[k] = 0.9 * velocity[k] - rate * g
                v += velocity[k]
        if log:
            log(f"{model.name}: epoch {epoch + 1} loss {np.mean(losses):.4f} "
                f"({time.perf_counter() - t0:.1f} s)")
    return params


@dataclass(frozen=True)
class Digits:
    """A model's data at its input size: training, calibration (a sample of the training set) and
    the held-out test set with its labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_cal: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def digits(model: Model, seed: int = 0, calibration: int = 256) -> Digits:
    x_train, x_test, y_train, y_test = load_digits_split(seed)
    cal = x_train[np.random.default_rng(seed).permutation(len(x_train))[:calibration]]
    return Digits(model.images(x_train), y_train, model.images(cal), model.images(x_test), y_test)


@lru_cache(maxsize=4)
def trained(name: str, epochs: int, seed: int = 0, threads: int | None = None) -> dict[str, np.ndarray]:
    """`MODELS[name]` trained for `epochs` (once per process; callers must not change the arrays)."""
    model = MODELS[name]
    d = digits(model, seed)
    return train(model, d.x_train, d.y_train, epochs, seed=seed, threads=threads)


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent."""
    return float(np.mean(np.argmax(logits, axis=1) == labels)) * 100.0


__all__ = ["CLASSES", "CNN", "MODELS", "PARAM_SHAPES", "RESNET", "Digits", "Model", "digits",
           "load_digits_split", "logits_expr", "top1", "train", "trained"]
