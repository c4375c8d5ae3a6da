"""Train a small CNN written in the AutoRelay IR on scikit-learn's digits (8x8 images), by SGD.

The network and its loss are an IR function; `autorelay.gradient` turns it into a function
returning `(loss, (d loss / d every parameter))`, which the reference interpreter runs on each
mini-batch (the batch is the tensor's first dimension). The update step and the data handling are
plain NumPy in Python.

    python experiments/train_digits.py              # full run: prints accuracy and time
    python experiments/train_digits.py --epochs 3   # shorter

Model: conv3x3(1->16) + bias + relu -> maxpool 2x2 -> conv3x3(16->32) + bias + relu -> maxpool 2x2
-> flatten (128) -> dense(10) + bias -> softmax cross-entropy against one-hot labels (the network
and the data split are `reproduce.digits`', which the quantization experiment trains too).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first
import autorelay
from autorelay.ir import Function, IRModule, TensorType, Var
from autorelay.op.registry import call
from autorelay.runtime.interpreter import Interpreter
from reproduce.digits import CLASSES, PARAM_SHAPES, load_digits_split, logits_expr

__all__ = ["CLASSES", "PARAM_SHAPES", "DigitsTrainer", "TrainResult", "init_params", "load_digits_split",
           "logits_expr", "loss_function", "predict_function"]


def _params() -> dict[str, Var]:
    return {name: Var(name, TensorType(shape, "float32")) for name, shape in PARAM_SHAPES.items()}


def loss_function(batch: int) -> Function:
    """`(data, one-hot labels, params...) -> mean softmax cross-entropy` for a fixed batch size."""
    data = Var("data", TensorType((batch, 1, 8, 8), "float32"))
    labels = Var("labels", TensorType((batch, CLASSES), "float32"))
    p = _params()
    log_probs = call("nn.log_softmax", logits_expr(data, p), axis=-1)
    per_example = call("sum", call("multiply", log_probs, labels), axis=(1,))
    loss = call("negative", call("mean", per_example))
    return Function((data, labels, *p.values()), loss)


def predict_function(batch: int) -> Function:
    data = Var("data", TensorType((batch, 1, 8, 8), "float32"))
    p = _params()
    return Function((data, *p.values()), call("argmax", logits_expr(data, p), axis=(1,)))


def init_params(seed: int) -> dict[str, np.ndarray]:
    """He-normal weights, zero biases."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in PARAM_SHAPES.items():
        if name.startswith("b"):
            out[name] = np.zeros(shape, "float32")
        else:
            fan_in = int(np.prod(shape[1:]))
            out[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype("float32")
    return out


@dataclass
class TrainResult:
    epoch_losses: list[float] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)
    test_accuracy: float = 0.0
    train_seconds: float = 0.0
    steps: int = 0


class DigitsTrainer:
    """Holds the compiled-once programs (gradient + prediction) and the parameters."""

    def __init__(self, batch: int = 32, lr: float = 0.1, momentum: float = 0.9, seed: int = 0) -> None:
        self.batch = batch
        self.lr = lr
        self.momentum = momentum
        self.seed = seed
        grad_fn = autorelay.gradient(loss_function(batch))
        self.grad = Interpreter(IRModule.from_expr(grad_fn))
        self.params = init_params(seed)
        self.velocity = {k: np.zeros_like(v) for k, v in self.params.items()}

    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One SGD-with-momentum step on a batch; returns the batch loss (before the update)."""
        onehot = np.eye(CLASSES, dtype="float32")[labels]
        loss, grads = self.grad.call("main", images, onehot, *self.params.values())
        for (name, value), g in zip(self.params.items(), grads[2:]):
            v = self.velocity[name]
            v *= self.momentum
            v -= self.lr * g
            value += v
        return float(loss)

    def accuracy(self, images: np.ndarray, labels: np.ndarray) -> float:
        pred = Interpreter(IRModule.from_expr(predict_function(len(images))))
        guesses = pred.call("main", images, *self.params.values())
        return float(np.mean(guesses == labels))

    def train(self, x: np.ndarray, y: np.ndarray, epochs: int, max_steps: int | None = None,
              log: Callable[[str], None] | None = print) -> TrainResult:
        """SGD over shuffled full batches; the learning rate follows a cosine decay to zero."""
        rng = np.random.default_rng(self.seed + 1)
        result = TrainResult()
        base_lr = self.lr
        t0 = time.perf_counter()
        for epoch in range(epochs):
            self.lr = base_lr * 0.5 * (1 + np.cos(np.pi * epoch / epochs))
            order = rng.permutation(len(x))
            losses = []
            for start in range(0, len(x) - self.batch + 1, self.batch):  # full batches only
                idx = order[start:start + self.batch]
                losses.append(self.step(x[idx], y[idx]))
                result.step_losses.append(losses[-1])
                result.steps += 1
                if max_steps is not None and result.steps >= max_steps:
                    break
            result.epoch_losses.append(float(np.mean(losses)))
            if log:
                log(f"epoch {epoch + 1:2d}  loss {result.epoch_losses[-1]:.4f}  "
                    f"({time.perf_counter() - t0:.1f} s)")
            if max_steps is not None and result.steps >= max_steps:
                break
        result.train_seconds = time.perf_counter() - t0
        self.lr = base_lr
        return result


def main(argv: list[str] | None = None) -> TrainResult:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    x_train, x_test, y_train, y_test = load_digits_split(args.seed)
    print(f"digits: {len(x_train)} training / {len(x_test)} test images")
    t0 = time.perf_counter()
    trainer = DigitsTrainer(batch=args.batch, lr=args.lr, seed=args.seed)
    print(f"built the gradient program in {time.perf_counter() - t0:.2f} s")
    result = trainer.train(x_train, y_train, args.epochs)
    result.test_accuracy = trainer.accuracy(x_test, y_test)
    print(f"test accuracy {result.test_accuracy * 100:.2f}%  after {result.steps} steps "
          f"in {result.train_seconds:.1f} s of training ({time.perf_counter() - t0:.1f} s total)")
    return result


if __name__ == "__main__":
    res = main()
    sys.exit(0 if res.test_accuracy >= 0.95 else 1)
