"""Post-training int8 quantization of two digit classifiers: accuracy per calibration method.

Trains (i) the digits CNN of `train_digits.py` on scikit-learn's 8x8 digits and (ii) a small
ResNet-style classifier (residual blocks with `add`) on the digits upsampled to 16x16, both by SGD
through `autorelay.gradient` and the reference interpreter; then, for each calibration method
(max, percentile 99.99, KL), calibrates on 256 training images, quantizes every conv/dense layer to
int8 (`autorelay.transform.quantize`), compiles the int8 model with `autorelay.build`, and compares
its test accuracy with the float model's. The bars: a drop of at most 0.5 points for the CNN and
1 point for the ResNet.

    PYTHONPATH=$PWD python experiments/quantize_digits.py            # full run, writes the results
    PYTHONPATH=$PWD python experiments/quantize_digits.py --quick    # fewer epochs, no results file
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train_digits as td

import autorelay
from autorelay.ir import Expr, Function, IRModule, TensorType, Var
from autorelay.op.registry import call
from autorelay.transform.quantize import METHODS, QuantizePlan, calibrate, quantize_model

CALIBRATION_IMAGES = 256
CALIBRATION_BATCH = 32
RESULTS = Path(__file__).resolve().parent / "results" / "quantize_digits.md"

# ---- the ResNet-style classifier (16x16 inputs) ---------------------------------------------------

R1, R2 = 16, 32
RESNET_SHAPES = {
    "stem_w": (R1, 1, 3, 3), "stem_b": (R1,),
    "b1c1_w": (R1, R1, 3, 3), "b1c1_b": (R1,), "b1c2_w": (R1, R1, 3, 3), "b1c2_b": (R1,),
    "down_w": (R2, R1, 3, 3), "down_b": (R2,),
    "b2c1_w": (R2, R2, 3, 3), "b2c1_b": (R2,), "b2c2_w": (R2, R2, 3, 3), "b2c2_b": (R2,),
    "fc_w": (td.CLASSES, R2 * 4 * 4), "fc_b": (td.CLASSES,),
}


def _conv(x: Expr, p: dict[str, Var], name: str, channels: int, relu: bool = True, stride: int = 1) -> Expr:
    y = call("nn.conv2d", x, p[f"{name}_w"], strides=(stride, stride), padding=(1, 1), channels=channels,
             kernel_size=(3, 3))
    y = call("nn.bias_add", y, p[f"{name}_b"])
    return call("nn.relu", y) if relu else y


def resnet_logits(data: Var, p: dict[str, Var]) -> Expr:
    """stem conv -> residual block (16) -> max pool -> conv (32) -> residual block (32) -> max pool
    -> flatten -> dense: 7 layers, two residual adds. (A global average pool instead of the last
    max pool barely trains in a few epochs without batch norm.)"""
    x = _conv(data, p, "stem", R1)
    x = call("nn.relu", call("add", _conv(_conv(x, p, "b1c1", R1), p, "b1c2", R1, relu=False), x))
    x = call("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2))
    x = _conv(x, p, "down", R2)
    x = call("nn.relu", call("add", _conv(_conv(x, p, "b2c1", R2), p, "b2c2", R2, relu=False), x))
    x = call("nn.batch_flatten", call("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2)))
    return call("nn.bias_add", call("nn.dense", x, p["fc_w"]), p["fc_b"])


# ---- a model: shapes, forward pass, images --------------------------------------------------------


@dataclass
class Model:
    name: str
    shapes: dict[str, tuple[int, ...]]
    logits: Callable[[Var, dict[str, Var]], Expr]
    image: int  # side of the square input

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
        labels = Var("labels", TensorType((batch, td.CLASSES), "float32"))
        log_probs = call("nn.log_softmax", self.logits(data, p), axis=-1)
        loss = call("negative", call("mean", call("sum", call("multiply", log_probs, labels), axis=(1,))))
        return Function((data, labels, *p.values()), loss)

    def init(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out = {}
        for k, s in self.shapes.items():
            fan_in = int(np.prod(s[1:])) if len(s) > 1 else 1
            # He-normal; the last conv of a residual branch starts small so each block starts near
            # the identity, and so does the classifier (as Fixup / zero-init residuals do: without
            # batch norm the residual sums grow, and large initial logits kill the ReLUs at once)
            gain = 0.1 if k.endswith("c2_w") or (k == "fc_w" and model_has_blocks(self.shapes)) else 1.0
            out[k] = np.zeros(s, "float32") if len(s) == 1 else \
                (rng.standard_normal(s) * gain * np.sqrt(2.0 / fan_in)).astype("float32")
        return out


def model_has_blocks(shapes: dict[str, tuple[int, ...]]) -> bool:
    return any(k.endswith("c2_w") for k in shapes)


CNN = Model("digits CNN (8x8)", td.PARAM_SHAPES, td.logits_expr, 8)
RESNET = Model("ResNet-style (16x16)", RESNET_SHAPES, resnet_logits, 16)


def upsample(x: np.ndarray, factor: int) -> np.ndarray:
    return np.repeat(np.repeat(x, factor, axis=2), factor, axis=3)


def train(model: Model, x: np.ndarray, y: np.ndarray, epochs: int, batch: int = 32, lr: float = 0.05,
          seed: int = 0) -> dict[str, np.ndarray]:
    """SGD with momentum 0.9 and a cosine learning rate (train_digits' loop) on `model`'s loss.

    The gradient program is compiled by `autorelay.build` (about 20x faster per step than the
    interpreter here); its output is the flattened `(loss, grad data, grad labels, grad params...)`."""
    grad = autorelay.build(IRModule.from_expr(autorelay.gradient(model.loss(batch))), target="llvm")
    params, rng = model.init(seed), np.random.default_rng(seed + 1)
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    t0 = time.perf_counter()
    for epoch in range(epochs):
        rate = lr * 0.5 * (1 + np.cos(np.pi * epoch / epochs))
        order, losses = rng.permutation(len(x)), []
        for start in range(0, len(x) - batch + 1, batch):
            idx = order[start:start + batch]
            onehot = np.eye(td.CLASSES, dtype="float32")[y[idx]]
            out = grad(x[idx], onehot, *params.values())
            losses.append(float(out[0]))
            for (k, v), g in zip(params.items(), out[3:]):
                velocity[k] = 0.9 * velocity[k] - rate * g
                v += velocity[k]
        elapsed = time.perf_counter() - t0
        print(f"  {model.name}: epoch {epoch + 1:2d} loss {np.mean(losses):.4f} ({elapsed:.1f} s)")
    return params


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == y)) * 100.0


@dataclass
class Row:
    model: str
    method: str
    fp32: float
    int8: float
    agree: float  # % of test images where the int8 and float predictions agree
    logit_error: float  # mean |int8 - fp32| logit, % of the fp32 logits' range
    seconds: float
    bit_exact: bool | None = None  # int8 logits of the build == the interpreter's (when checked)

    @property
    def drop(self) -> float:
        return self.fp32 - self.int8


def evaluate(model: Model, params: dict[str, np.ndarray], x_cal: np.ndarray, x_test: np.ndarray,
             y_test: np.ndarray, methods: list[str], check_interpreter: bool) -> list[Row]:
    float_mod = model.inference(len(x_test))
    fp32_logits = np.asarray(autorelay.build(float_mod, target="llvm", params=params)(x_test))
    fp32 = accuracy(fp32_logits, y_test)
    cal_mod = model.inference(CALIBRATION_BATCH)
    batches = [{"data": x_cal[i:i + CALIBRATION_BATCH]} for i in range(0, len(x_cal), CALIBRATION_BATCH)]
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        cal = calibrate(cal_mod, params, batches, method=method)
        qmod, qparams = quantize_model(float_mod, params, cal, QuantizePlan())
        logits = np.asarray(autorelay.build(qmod, target="llvm", params=qparams)(x_test))
        seconds = time.perf_counter() - t0
        exact = None
        if check_interpreter:  # the compiled int8 model computes what the reference interpreter does
            from autorelay.runtime.interpreter import evaluate as interpret
            from autorelay.transform import bind_params

            want = np.asarray(interpret(bind_params(qmod, qparams), x_test))
            exact = bool(np.array_equal(want, logits))
            if not exact:
                print(f"  WARNING: build and interpreter differ by up to {np.abs(want - logits).max():.3g}")
        err = float(np.mean(np.abs(logits - fp32_logits)) / np.ptp(fp32_logits)) * 100.0
        rows.append(Row(model.name, method, fp32, accuracy(logits, y_test),
                        float(np.mean(np.argmax(logits, 1) == np.argmax(fp32_logits, 1))) * 100.0,
                        err, seconds, exact))
        r = rows[-1]
        print(f"  {model.name} {method:10s}: fp32 {r.fp32:.2f}%  int8 {r.int8:.2f}%  drop {r.drop:+.2f}")
    return rows


def table(rows: list[Row], bars: dict[str, float]) -> str:
    lines = ["| model | calibration | fp32 acc % | int8 acc % | drop (points) | bar | agree % | logit err % "
             "| build == interpreter | s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        ok = "ok" if r.drop <= bars[r.model] else "FAIL"
        exact = {None: "not checked", True: "bit-exact", False: "DIFFERS"}[r.bit_exact]
        lines.append(f"| {r.model} | {r.method} | {r.fp32:.2f} | {r.int8:.2f} | {r.drop:+.2f} | "
                     f"<= {bars[r.model]} {ok} | {r.agree:.1f} | {r.logit_error:.2f} | {exact} | "
                     f"{r.seconds:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20, help="CNN epochs (the ResNet trains half as many)")
    ap.add_argument("--quick", action="store_true", help="3 epochs each, no results file")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-interpreter", action="store_true",
                    help="also run the int8 models on the reference interpreter and compare bit for bit")
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    epochs = 3 if args.quick else args.epochs
    t0 = time.perf_counter()
    x_train, x_test, y_train, y_test = td.load_digits_split(args.seed)
    x_cal = x_train[np.random.default_rng(args.seed).permutation(len(x_train))[:CALIBRATION_IMAGES]]
    print(f"digits: {len(x_train)} training / {len(x_test)} test images, {len(x_cal)} for calibration")
    rows = []
    cnn_params = train(CNN, x_train, y_train, epochs, lr=0.1, seed=args.seed)
    rows += evaluate(CNN, cnn_params, x_cal, x_test, y_test, methods, args.check_interpreter)
    up = 16 // 8
    res_epochs = max(epochs // 2, 2)
    res_params = train(RESNET, upsample(x_train, up), y_train, res_epochs, lr=0.01, seed=args.seed)
    rows += evaluate(RESNET, res_params, upsample(x_cal, up), upsample(x_test, up), y_test, methods,
                     args.check_interpreter)
    bars = {CNN.name: 0.5, RESNET.name: 1.0}
    text = table(rows, bars)
    total = time.perf_counter() - t0
    print(text)
    print(f"total {total:.0f} s")
    if not args.quick:
        RESULTS.write_text(
            "# Post-training int8 quantization on scikit-learn digits\n\n"
            f"Command: `PYTHONPATH=$PWD python experiments/quantize_digits.py --epochs {args.epochs}"
            f"{' --check-interpreter' if args.check_interpreter else ''}` "
            f"(seed {args.seed}, {total:.0f} s on this machine).\n\n"
            "Every conv2d / dense layer int8 (per-channel symmetric int8 weights, uint8 activations with\n"
            "zero points, fused requantize epilogues). Calibration: "
            f"{CALIBRATION_IMAGES} training images (batches of {CALIBRATION_BATCH}); accuracy on the "
            f"{len(x_test)} held-out test images; the int8 models are compiled by `autorelay.build`.\n"
            "'agree': share of test images where int8 and fp32 predict the same class; 'logit err': mean\n"
            "|int8 - fp32| logit as a share of the fp32 logits' range; 'build == interpreter': the compiled\n"
            "int8 logits against the reference interpreter's on the same quantized graph; 's': calibration,\n"
            "quantization and compilation time.\n\n"
            + text + "\n")
        print(f"wrote {RESULTS}")
    return 0 if all(r.drop <= bars[r.model] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
