"""What 7-bit weights cost in accuracy: the `cpu-narrow` scheme against 8-bit weights.

On AVX2 hosts without VNNI, int8 kernels multiply bytes with `vpmaddubsw`, whose int16 pair sums
saturate unless each pair of weights sums to at most 128 in magnitude; so the scheme picked for
such targets (`scheme_for_target`) quantizes weights to |w| <= 63, as ONNX Runtime's
`reduce_range` does. This measures the price on held-out data: the two digit classifiers of
`reproduce.digits` (top-1 on their test images) and MobileNet-v2 from the zoo (random weights, no
labels: output error relative to fp32 on seeded random inputs), for each calibration method.
The 8-bit models run this host's kernels; the 7-bit ones are compiled for an AVX2 Zen 3
(`-mcpu=znver3`), so their numbers come from the `vpmaddubsw` kernels themselves.

    PYTHONPATH=$PWD python experiments/quantize_weight_bits.py [--quick] [--out FILE.md]
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
from autorelay.transform.quantize.scheme import CPU_NARROW_SCHEME, CPU_SCHEME
from reproduce.digits import CNN, RESNET, digits, top1, trained
from reproduce.quant_measure import quantize_digits_model

AVX2 = "llvm -mcpu=znver3"
SCHEMES = ((CPU_SCHEME, "llvm", "8-bit"), (CPU_NARROW_SCHEME, AVX2, "7-bit"))


def digits_rows(epochs: int, threads: int, seed: int) -> list[list[str]]:
    rows = []
    for model, n in ((CNN, epochs), (RESNET, max(epochs // 2, 2))):
        params = trained(model.name, n, seed, threads)
        data = digits(model, seed)
        fp32 = np.asarray(autorelay.build(model.inference(len(data.x_test)), params=params,
                                          threads=threads)(data.x_test))
        base = top1(fp32, data.y_test)
        for method in METHODS:
            cells = [model.name, method, f"{base:.2f}"]
            for scheme, target, _ in SCHEMES:
                qmod, qparams = quantize_digits_model(model, params, data, method, "int8", len(data.x_test),
                                                      scheme)
                logits = np.asarray(autorelay.build(qmod, target=target, params=qparams,
                                                    threads=threads)(data.x_test))
                agree = float(np.mean(np.argmax(logits, 1) == np.argmax(fp32, 1))) * 100
                cells += [f"{top1(logits, data.y_test):.2f}", f"{base - top1(logits, data.y_test):+.2f}",
                          f"{agree:.1f}"]
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    return rows


def mobilenet_rows(threads: int, seed: int, batches: int) -> list[list[str]]:
    from autorelay.transform.quantize import QuantizePlan, calibrate, quantize_model
    from search.models import build_model, load_model
    from search.quant_data import random_batches
    from search.quantize_search import relative_error

    model = load_model("mobilenet-v2")
    cal_data, valid = random_batches(model, batches, seed=seed), random_batches(model, batches, seed=seed + 1)
    f_exe = build_model(model, None, threads=threads)
    ref = [np.array(f_exe(*b.values()), np.float64) for b in valid.batches]
    rows = []
    for method in METHODS:
        cal = calibrate(model.mod, model.params, cal_data.batches, method=method, progress=False)
        cells = ["mobilenet-v2", method]
        for scheme, target, _ in SCHEMES:
            qmod, qparams = quantize_model(model.mod, model.params, cal, QuantizePlan.uniform("int8"), scheme)
            exe = autorelay.build(qmod, target=target, params=qparams, threads=threads, pipeline="nchwc")
            got = [np.array(exe(*b.values()), np.float64) for b in valid.batches]
            cells.append(f"{relative_error(got, ref):.4f}")
        rows.append(cells)
        print(" | ".join(cells), flush=True)
    return rows


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20, help="CNN epochs (the ResNet trains half as many)")
    ap.add_argument("--quick", action="store_true", help="3 epochs, 1 MobileNet batch")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the tables (Markdown) here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    epochs = 3 if args.quick else args.epochs
    bits = [f"{label} {what}" for _, _, label in SCHEMES for what in ("top-1 %", "drop", "agree %")]
    digit_rows = digits_rows(epochs, args.threads, args.seed)
    text = table(["model", "calibration", "fp32 top-1 %", *bits], digit_rows)
    errors = [f"{label} output error vs fp32" for _, _, label in SCHEMES]
    text += "\n\n" + table(["model", "calibration", *errors],
                           mobilenet_rows(args.threads, args.seed, 1 if args.quick else 4))
    cmd = "PYTHONPATH=$PWD python experiments/quantize_weight_bits.py" + (" --quick" if args.quick else "")
    text = f"`{cmd}` (seed {args.seed}, {time.perf_counter() - t0:.0f} s)\n\n" + text + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
