"""Post-training int8 quantization of two digit classifiers: accuracy per calibration method.

Trains the digits CNN (8x8) and a small ResNet-style classifier (digits upsampled to 16x16) of
`reproduce.digits`, then, for each calibration method (max, percentile 99.99, KL), quantizes every
conv/dense layer to int8 and compares the compiled int8 model's held-out accuracy with the float
model's (`reproduce.quant_measure.measure_digits`, the measurement `autorelay reproduce
quantization` stores). The bars: a drop of at most 0.5 points for the CNN and 1 point for the
ResNet. `--check-interpreter` also runs each int8 model on the reference interpreter and compares
the logits bit for bit.

    PYTHONPATH=$PWD python experiments/quantize_digits.py            # full run, writes the results
    PYTHONPATH=$PWD python experiments/quantize_digits.py --quick    # fewer epochs, no results file
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autorelay
from autorelay.transform.quantize import METHODS
from reproduce.digits import CNN, RESNET, Model, digits, trained
from reproduce.quant_measure import measure_digits, quantize_digits_model

RESULTS = Path(__file__).resolve().parent / "results" / "quantize_digits.md"
BARS = {CNN.name: 0.5, RESNET.name: 1.0}


def interpreter_matches(model: Model, params: dict, method: str) -> bool:
    """The compiled int8 logits equal the reference interpreter's on the same quantized graph."""
    from autorelay.runtime.interpreter import evaluate as interpret
    from autorelay.transform import bind_params

    data = digits(model)
    qmod, qparams = quantize_digits_model(model, params, data, method, "int8", len(data.x_test))
    got = np.asarray(autorelay.build(qmod, target="llvm", params=qparams)(data.x_test))
    return bool(np.array_equal(np.asarray(interpret(bind_params(qmod, qparams), data.x_test)), got))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20, help="CNN epochs (the ResNet trains half as many)")
    ap.add_argument("--quick", action="store_true", help="3 epochs each, no results file")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-interpreter", action="store_true",
                    help="also run the int8 models on the reference interpreter and compare bit for bit")
    args = ap.parse_args(argv)
    epochs = 3 if args.quick else args.epochs
    t0 = time.perf_counter()
    lines = ["| model | calibration | fp32 acc % | int8 acc % | drop (points) | bar | agree % | logit err % "
             "| int8 ms | fp32 ms | build == interpreter |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    ok = True
    for model, n in ((CNN, epochs), (RESNET, max(epochs // 2, 2))):
        params = trained(model.name, n, args.seed, args.threads)
        for method in args.methods.split(","):
            r = measure_digits(model, params, digits(model, args.seed), method, "int8", threads=args.threads)
            exact = {None: "not checked", True: "bit-exact", False: "DIFFERS"}[
                interpreter_matches(model, params, method) if args.check_interpreter else None]
            bar = BARS[model.name]
            ok &= r["drop"] <= bar
            lines.append(f"| {model.name} | {method} | {r['fp32_top1']:.2f} | {r['top1']:.2f} | "
                         f"{r['drop']:+.2f} | <= {bar} {'ok' if r['drop'] <= bar else 'FAIL'} | "
                         f"{r['agree']:.1f} | {r['logit_err']:.2f} | {r['ms']:.3f} | {r['fp32_ms']:.3f} | "
                         f"{exact} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    total = time.perf_counter() - t0
    print(text)
    print(f"total {total:.0f} s")
    if not args.quick:
        RESULTS.write_text(
            "# Post-training int8 quantization on scikit-learn digits\n\n"
            f"Command: `PYTHONPATH=$PWD python experiments/quantize_digits.py --epochs {args.epochs}"
            f"{' --check-interpreter' if args.check_interpreter else ''}` "
            f"(seed {args.seed}, {total:.0f} s on this machine).\n\n"
            "Every conv2d / dense layer int8; calibration on 256 training images; accuracy on the held-out\n"
            "test images; 'agree': share of test images where int8 and fp32 predict the same class; 'logit\n"
            "err': mean |int8 - fp32| logit as a share of the fp32 logits' range; ms: a batch of 32, timed\n"
            "alternating with fp32. `autorelay reproduce quantization` adds the other bit plans.\n\n"
            + text + "\n")
        print(f"wrote {RESULTS}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
