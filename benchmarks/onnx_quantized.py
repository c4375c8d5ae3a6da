"""A zoo CNN quantized by ONNX Runtime's own `quantize_static`, run by AutoRelay (imported from the
quantized ONNX file) and by ONNX Runtime: agreement and latency, next to AutoRelay's fp32 build.

    python benchmarks/onnx_quantized.py [--model resnet-18] [--image-size 224] [--format QDQ|QOperator]
                                        [--per-channel] [--threads 2] [--pipeline default|nchwc]
                                        [--repeat 10] [--calibration 8] [--reduce-range]

The float network is the zoo model exported through PyTorch (`reproduce/baselines.torch_module`);
calibration uses seeded random inputs (enough for a latency and agreement check, not for accuracy).
Agreement is measured on fresh inputs: the largest output difference in quantisation steps of the
output, and the share of inputs whose arg-max class matches ONNX Runtime's. Latencies are medians
of calls interleaved between the backends (`benchmarks/models.interleaved`). Kernels that fell back
to NumPy are counted (each is a missing compiled kernel, and slow).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autorelay
from autorelay.frontend import from_onnx, zoo
from benchmarks.models import interleaved
from reproduce.baselines import torch_module


def export_float(mod: Any, params: dict[str, np.ndarray], inputs: dict[str, np.ndarray],
                 path: str) -> list[str]:
    import torch

    net, in_names = torch_module(mod, params)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, tuple(torch.from_numpy(inputs[n]) for n in in_names), path,
                          input_names=in_names, dynamo=False, opset_version=17)
    return in_names


def quantize(src: str, dst: str, batches: list[dict[str, np.ndarray]], fmt: str, per_channel: bool,
             reduce_range: bool = False) -> None:
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q.quantize_static(src, dst, Reader(), quant_format=getattr(q.QuantFormat, fmt),
                          per_channel=per_channel, activation_type=q.QuantType.QUInt8,
                          weight_type=q.QuantType.QInt8, reduce_range=reduce_range)


def output_step(path: str) -> float:
    """The quantisation step of the model's first output (the scale of the DequantizeLinear making it)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    n = producer.get(m.graph.output[0].name)
    return float(inits[n.input[1]]) if n is not None and n.op_type == "DequantizeLinear" else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet-18")
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--format", choices=["QDQ", "QOperator"], default="QDQ")
    ap.add_argument("--per-channel", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pipeline", default="default", help="AutoRelay's pass pipeline (default, nchwc, …)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--calibration", type=int, default=8, help="random calibration batches")
    ap.add_argument("--validation", type=int, default=8, help="fresh inputs for the agreement check")
    ap.add_argument("--reduce-range", action="store_true",
                    help="7-bit weights: on x86 without VNNI, ONNX Runtime's u8 x s8 products saturate "
                         "in 16 bits with full-range weights (its documented advice), which shows as "
                         "disagreement")
    args = ap.parse_args()
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # not one warning per unused initializer of the export
    options = {"image_size": args.image_size} if args.image_size else {}
    mod, params = zoo.get(args.model, **options)
    inputs = zoo.random_inputs(mod, params, 0)
    folder = tempfile.mkdtemp(prefix="autorelay-qonnx-")
    fpath, qpath = os.path.join(folder, "float.onnx"), os.path.join(folder, "quant.onnx")
    in_names = export_float(mod, params, inputs, fpath)
    t0 = time.perf_counter()
    quantize(fpath, qpath, [zoo.random_inputs(mod, params, 100 + k) for k in range(args.calibration)],
             args.format, args.per_channel, args.reduce_range)
    print(f"{args.model}: quantized by ONNX Runtime ({args.format}, per-channel {args.per_channel}, "
          f"reduce_range {args.reduce_range}) "
          f"in {time.perf_counter() - t0:.1f} s")

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    qmod, qparams = from_onnx(qpath)
    int8 = autorelay.build(qmod, params=qparams, threads=args.threads, pipeline=args.pipeline)
    fp32 = autorelay.build(mod, params=params, threads=args.threads, pipeline=args.pipeline)
    print(f"AutoRelay builds: {time.perf_counter() - t0:.1f} s; int8 kernels {len(int8.report.rows)}, "
          f"NumPy fallbacks {len(int8.report.fallbacks)} "
          f"({', '.join(sorted({r.name for r in int8.report.fallbacks})) or 'none'})")

    step, worst, same, err_ours, err_ort = output_step(qpath), 0.0, 0, 0.0, 0.0
    for k in range(args.validation):
        every = zoo.random_inputs(mod, params, 1000 + k)
        feed = {n: v for n, v in every.items() if n in in_names}
        ours, theirs = np.asarray(int8(*[feed[n] for n in int8.input_names])), sess.run(None, feed)[0]
        exact = np.asarray(fp32(*[every[n] for n in fp32.input_names]))
        worst = max(worst, float(np.abs(ours - theirs).max()) / step)
        same += int(np.argmax(ours) == np.argmax(theirs))
        err_ours = max(err_ours, float(np.abs(ours - exact).max()) / step)
        err_ort = max(err_ort, float(np.abs(theirs - exact).max()) / step)
    print(f"agreement with ONNX Runtime on {args.validation} inputs: max |diff| {worst:.2f} output steps, "
          f"top-1 equal {same}/{args.validation}; error against fp32: AutoRelay int8 {err_ours:.2f}, "
          f"ONNX Runtime int8 {err_ort:.2f} output steps")

    feed = {n: inputs[n] for n in in_names}
    i8_args = [feed[n] for n in int8.input_names]
    f32_args = [inputs[n] for n in fp32.input_names]
    runners = {"autorelay int8": lambda: int8(*i8_args), "onnxruntime int8": lambda: sess.run(None, feed),
               "autorelay fp32": lambda: fp32(*f32_args)}
    times = interleaved(runners, args.repeat)
    for k, v in times.items():
        print(f"  {k:18s} {v * 1e3:9.2f} ms")
    print(f"  int8 speed-up over fp32 {times['autorelay fp32'] / times['autorelay int8']:.2f}x; "
          f"AutoRelay / ONNX Runtime int8 {times['autorelay int8'] / times['onnxruntime int8']:.2f}")


if __name__ == "__main__":
    main()
