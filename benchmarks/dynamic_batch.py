"""A model with a symbolic batch runs at the speed of static builds, and correctly, at every batch.

A zoo model (ResNet-18 by default) is run op by op in PyTorch (`reproduce.baselines.torch_module`)
and exported to ONNX with `dynamic_axes={"data": {0: "batch"}}`. AutoRelay imports it and builds
it once without shapes: a `SpecializingExecutable`, which compiles per concrete shape on first
sight. For each batch size that build, already called once at that size, is timed against a
static build of the same file (`shapes={"data": (batch, ...)}`) and ONNX Runtime, each in its own
process, alternating blocks (`reproduce.peers`). Outputs are compared with ONNX Runtime's.

    python benchmarks/dynamic_batch.py [--model resnet-18] [--batches 1,4,8] [--threads 2] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INPUT = "data"


def export(model: str, folder: str) -> tuple[str, tuple[int, ...]]:
    """The zoo model as an ONNX file with a symbolic batch, and its batch-1 input shape."""
    import torch

    from autorelay.frontend import zoo
    from reproduce.baselines import torch_module

    mod, params = zoo.get(model)
    net, inputs = torch_module(mod, params)
    if inputs != [INPUT]:
        raise SystemExit(f"{model}: expected one input {INPUT!r}, got {inputs}")
    shape = tuple(int(d) for d in mod["main"].params[0].type_annotation.shape)
    path = os.path.join(folder, f"{model}-dynamic.onnx")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(shape),), path, input_names=[INPUT], dynamo=False,
                          opset_version=17, dynamic_axes={INPUT: {0: "batch"}})
    return path, shape


def _input(shape: tuple[int, ...], batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, *shape[1:])).astype("float32")


def make_autorelay(path: str, shape: tuple[int, ...], batch: int, threads: int,
                   static: bool) -> tuple[Callable[[], Any], np.ndarray]:
    import autorelay

    mod, params = autorelay.frontend.from_onnx(path)
    x = _input(shape, batch)
    shapes = {INPUT: x.shape} if static else None
    exe = autorelay.build(mod, params=params, threads=threads, shapes=shapes)
    if not static and type(exe).__name__ != "SpecializingExecutable":
        raise SystemExit(f"expected a shape-specialising executable for the dynamic build, got {type(exe)}")
    out = np.asarray(exe(x))  # the dynamic build compiles for this batch here
    return (lambda: exe(x)), out


def make_onnxruntime(path: str, shape: tuple[int, ...], batch: int,
                     threads: int) -> tuple[Callable[[], Any], np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {INPUT: _input(shape, batch)}
    return (lambda: sess.run(None, feed)), np.asarray(sess.run(None, feed)[0])


def main() -> None:
    from reproduce.peers import time_isolated

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet-18")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    path, shape = export(args.model, tempfile.mkdtemp(prefix="autorelay-dynamic-"))
    print(f"{args.model} with a symbolic batch, {args.threads} threads; each build in its own process, "
          "alternating blocks; median [p10-p90 of block medians] ms")
    for batch in (int(b) for b in args.batches.split(",")):
        peers = {"dynamic": (make_autorelay, (path, shape, batch, args.threads, False)),
                 "static": (make_autorelay, (path, shape, batch, args.threads, True)),
                 "onnxruntime": (make_onnxruntime, (path, shape, batch, args.threads))}
        timed = time_isolated(peers, rounds=args.rounds)
        for t in timed.values():
            if t.error:
                print(f"  {t.name}: {t.error}", file=sys.stderr)
        dyn, sta, ort_ = timed["dynamic"], timed["static"], timed["onnxruntime"]
        diff = float(np.abs(dyn.output - ort_.output).max()) if dyn.output is not None else float("nan")
        cells = "  ".join(f"{t.name} {t.median_ms:8.3f} [{t.spread_ms[0]:.3f}-{t.spread_ms[1]:.3f}]"
                          for t in (dyn, sta, ort_))
        print(f"batch {batch}:  {cells}  dynamic/static {dyn.median_ms / sta.median_ms:5.3f}  "
              f"max |dynamic - ORT| {diff:.2e}")


if __name__ == "__main__":
    main()
