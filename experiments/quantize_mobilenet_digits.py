"""The per-layer precision search on a *trained* MobileNet-v2, scored by top-1 on held-out labels.

The zoo's MobileNet-v2 has random weights, so a precision plan for it can only be judged by its
output error against fp32. Issue #16 asks for a 0.5-point top-1 bound. No ImageNet is available
offline, so this experiment trains the MobileNet-v2 architecture (the zoo's inverted-residual
stages, width 1.0, batch norm, ReLU6) on scikit-learn's digits, upsampled to 3x64x64. It trains in
PyTorch, where batch norm trains with batch statistics. It then exports the network to ONNX, as a
user would bring it, and runs the same command line a user runs:

    autorelay quantize --model mnv2_digits.onnx --calibration cal/ --validation val/ \
        --max-drop 0.005 --db LOG --plot front.png

The held-out set is 360 digits with `labels.npy`, so the search scores top-1. The experiment also
reports the all-int8 model per calibration method, and writes the front (table and plot).

    PYTHONPATH=$PWD python experiments/quantize_mobilenet_digits.py [--epochs 12] [--trials 16]
    PYTHONPATH=$PWD python experiments/quantize_mobilenet_digits.py --quick   # 2 epochs, 4 trials

Needs PyTorch and onnx (the `onnx-test` extra). The results go to
`experiments/results/quantize_mobilenet_digits.md` and `..._front.png` (not with `--quick`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first

from reproduce.digits import load_digits_split, top1

RESULTS = Path(__file__).resolve().parent / "results"
IMAGE = 64  # the 8x8 digits upsampled 8x: the last stages still see 2x2 maps
# (expansion, channels, blocks, stride) per stage: the zoo's MobileNet-v2 (autorelay/frontend/zoo/cnn.py)
STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
          (6, 320, 1, 1))


def images(x: np.ndarray) -> np.ndarray:
    """[N, 1, 8, 8] digits in [0, 1] -> [N, 3, IMAGE, IMAGE], nearest-neighbour, centred at zero."""
    f = IMAGE // x.shape[-1]
    up = np.repeat(np.repeat(x, f, axis=2), f, axis=3)
    return np.ascontiguousarray(np.repeat(up, 3, axis=1) - 0.5, dtype=np.float32)


def mobilenet_v2(classes: int = 10):
    """The MobileNet-v2 of the zoo, as a PyTorch module."""
    import torch.nn as nn

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1, act: bool = True) -> list:
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + [nn.ReLU6()] if act else layers

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
            super().__init__()
            hidden = cin * t
            layers = conv_bn(cin, hidden, 1, 1) if t != 1 else []
            layers += conv_bn(hidden, hidden, 3, stride, groups=hidden)
            layers += conv_bn(hidden, cout, 1, 1, act=False)
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    layers, cin = conv_bn(3, 32, 3, 2), 32
    for t, c, n, s in STAGES:
        for i in range(n):
            layers.append(Block(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += conv_bn(cin, 1280, 1, 1) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes)]
    return nn.Sequential(*layers)


def train(x: np.ndarray, y: np.ndarray, epochs: int, seed: int, log) -> object:
    """Adam with a cosine schedule, batch 32, batch norm on batch statistics; returns the net in
    eval mode."""
    import torch

    torch.manual_seed(seed)
    net = mobilenet_v2()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3, weight_decay=1e-4)
    steps = epochs * (len(x) // 32)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=max(steps, 1))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for epoch in range(epochs):
        net.train()
        order, losses = rng.permutation(len(x)), []
        for start in range(0, len(x) - 31, 32):
            idx = torch.from_numpy(order[start:start + 32])
            loss = torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
        log(f"epoch {epoch + 1}/{epochs}: loss {np.mean(losses):.4f} ({time.perf_counter() - t0:.0f} s)")
    return net.eval()


def export(net, path: Path) -> None:
    import torch

    dummy = torch.zeros(1, 3, IMAGE, IMAGE)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(net, (dummy,), str(path), input_names=["data"], output_names=["logits"],
                          opset_version=17, dynamo=False)


def torch_top1(net, x: np.ndarray, y: np.ndarray) -> float:
    import torch

    with torch.no_grad():
        return top1(net(torch.from_numpy(x)).numpy(), y)


class _Tee(io.TextIOBase):
    """Writes to stderr and keeps a copy: the search's progress lines go into the results file."""

    def __init__(self) -> None:
        self.kept = io.StringIO()

    def write(self, text: str) -> int:
        sys.__stderr__.write(text)
        return self.kept.write(text)


def prepare(work: Path, epochs: int, seed: int, log) -> float:
    """Train, export `work/mnv2_digits.onnx`, write the calibration and validation folders; returns
    PyTorch's fp32 top-1 (also kept in `work/trained.json`, so `--reuse` skips all of this)."""
    x_train, x_test, y_train, y_test = load_digits_split(seed)
    x_train, x_test = images(x_train), images(x_test)
    net = train(x_train, y_train, epochs, seed, log)
    export(net, work / "mnv2_digits.onnx")
    for d in ("cal", "val"):
        (work / d).mkdir(exist_ok=True)
    pick = np.random.default_rng(seed).permutation(len(x_train))[:256]
    np.save(work / "cal" / "images.npy", x_train[pick])
    np.save(work / "val" / "images.npy", x_test)
    np.save(work / "val" / "labels.npy", y_test.astype(np.int64))
    acc = torch_top1(net, x_test, y_test)
    (work / "trained.json").write_text(json.dumps({"epochs": epochs, "seed": seed, "top1": acc}))
    return acc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--trials", type=int, default=16, help="NSGA-II plans after the sensitivity pass")
    ap.add_argument("--max-drop", type=float, default=0.5, help="top-1 points the plan may lose")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="keep the ONNX file, data folders and log here")
    ap.add_argument("--reuse", action="store_true",
                    help="search again with the network --workdir already holds (no training)")
    ap.add_argument("--quick", action="store_true", help="2 epochs, 4 trials, no results file")
    args = ap.parse_args(argv)
    if args.quick:
        args.epochs, args.trials = 2, 4

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mnv2-digits-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        trained = json.loads((work / "trained.json").read_text())
        args.epochs, torch_acc = trained["epochs"], trained["top1"]
    else:
        torch_acc = prepare(work, args.epochs, args.seed, log)
    log(f"PyTorch fp32 top-1 {torch_acc:.2f}% on the held-out digits; ONNX at {work / 'mnv2_digits.onnx'}")

    from search.cli import main as autorelay_main

    log_file = work / f"log-{time.strftime('%Y%m%d-%H%M%S')}.sqlite"  # a fresh log: every plan measured
    cmd = ["quantize", "--model", "mnv2_digits.onnx", "--calibration", "cal", "--validation", "val",
           "--max-drop", f"{args.max_drop / 100:g}", "--trials", str(args.trials), "--threads",
           str(args.threads), "--db", f"sqlite:///{log_file.name}", "--seed", str(args.seed),
           "--plot", "front.png"]
    log(f"(in {work}) autorelay " + " ".join(cmd))
    out, tee = io.StringIO(), _Tee()
    here = Path.cwd()
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(tee):
            rc = autorelay_main(cmd)
    finally:
        os.chdir(here)
    front = out.getvalue()
    print(front)
    minutes = (time.perf_counter() - t0) / 60
    if args.quick:
        return rc
    seeds = [line for line in tee.kept.getvalue().splitlines()
             if "seed: int8 all" in line or "seed: fp32 all" in line]
    how = "--workdir DIR --reuse" if args.reuse else f"--epochs {args.epochs}"
    lines = [f"`PYTHONPATH=$PWD python experiments/quantize_mobilenet_digits.py {how} --trials {args.trials} "
             f"--threads {args.threads}`, {minutes:.0f} min"
             + (" (the search again, on the network an earlier run trained and kept in DIR)." if args.reuse
                else "."), "",
             f"MobileNet-v2 (the zoo's stages, width 1.0) trained {args.epochs} epochs in PyTorch on "
             f"scikit-learn's digits upsampled to 3x{IMAGE}x{IMAGE}; PyTorch fp32 top-1 {torch_acc:.2f}% on "
             "360 held-out digits. Exported to ONNX and searched by `autorelay quantize` "
             f"(calibration: 256 training images, max; bound: {args.max_drop} points of top-1), in a folder "
             "holding the ONNX file, `cal/` and `val/` (with `labels.npy`):", "",
             "```", f"autorelay {' '.join(cmd)}", "", front.rstrip(), "```", "",
             "The two uniform plans the search measured first (latency; the fp32 model timed beside it):",
             "", "```", *seeds, "```", ""]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "quantize_mobilenet_digits.md").write_text("\n".join(lines))
    plot = work / "front.png"
    if plot.exists():
        (RESULTS / "quantize_mobilenet_digits_front.png").write_bytes(plot.read_bytes())
    return rc


if __name__ == "__main__":
    sys.exit(main())
