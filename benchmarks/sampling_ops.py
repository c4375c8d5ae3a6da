"""ONNX ops that sample at learned positions, compiled, against ONNX Runtime: DeformConv (a
torchvision-style deformable 3x3 layer with its mask) and GridSample (a flow warp), batch 1.

    python benchmarks/sampling_ops.py [--threads 2] [--rounds 10] [--channels 64] [--size 56]

Each side runs in its own process, alternating blocks of 250 ms (`reproduce.peers.time_isolated`);
the figures are median ms [p10-p90 of the block medians] and AutoRelay over ONNX Runtime within
each round. The outputs are compared before timing.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reproduce.peers import paired_ratio, time_isolated


def _model(op: str, channels: int, size: int) -> tuple[bytes, dict[str, np.ndarray]]:
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, size, size)).astype("float32")
    if op == "DeformConv":
        feeds = {"X": x, "W": (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype("float32"),
                 "offset": rng.uniform(-2, 2, (1, 18, size, size)).astype("float32"),
                 "B": rng.standard_normal(channels).astype("float32"),
                 "mask": rng.uniform(0, 1, (1, 9, size, size)).astype("float32")}
        node = helper.make_node("DeformConv", list(feeds), ["Y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
        opset = 22
    else:
        grid = np.stack(np.meshgrid(np.linspace(-1, 1, size), np.linspace(-1, 1, size)), axis=-1)[None]
        feeds = {"X": x, "grid": (grid + rng.uniform(-0.05, 0.05, grid.shape)).astype("float32")}
        node = helper.make_node("GridSample", ["X", "grid"], ["Y"], align_corners=1)
        opset = 20
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    output = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], op, inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString(), feeds


def ours(op: str, channels: int, size: int, threads: int):
    import autorelay
    from autorelay.frontend.onnx import from_onnx

    model, feeds = _model(op, channels, size)
    mod, params = from_onnx(model)
    exe = autorelay.build(mod, params=params, threads=threads)
    if exe.report.fallbacks:
        raise RuntimeError(f"{op} fell back to NumPy: {exe.report.fallbacks}")
    args = list(feeds.values())
    return (lambda: exe(*args)), np.asarray(exe(*args))


def onnxruntime(op: str, channels: int, size: int, threads: int):
    import onnxruntime as ort

    model, feeds = _model(op, channels, size)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return (lambda: session.run(None, feeds)), session.run(None, feeds)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--size", type=int, default=56)
    args = ap.parse_args()
    print(f"batch 1, {args.channels} channels, {args.size} px, {args.threads} threads; median ms [p10-p90]")
    for op in ("DeformConv", "GridSample"):
        spec = (op, args.channels, args.size, args.threads)
        peers = {"autorelay": (ours, spec), "onnxruntime": (onnxruntime, spec)}
        got = time_isolated(peers, rounds=args.rounds)
        a, o = got["autorelay"], got["onnxruntime"]
        if a.error or o.error:
            print(f"{op}: {a.error or o.error}")
            continue
        diff = float(np.abs(a.output - o.output).max())
        ratio, lo, hi = paired_ratio(o, a)
        print(f"{op:10s} autorelay {a.median_ms:7.3f} [{a.spread_ms[0]:.3f}-{a.spread_ms[1]:.3f}]  "
              f"onnxruntime {o.median_ms:7.3f} [{o.spread_ms[0]:.3f}-{o.spread_ms[1]:.3f}]  "
              f"speedup {ratio:.2f}x [{lo:.2f}-{hi:.2f}]  max |diff| {diff:.2g}")


if __name__ == "__main__":
    main()
