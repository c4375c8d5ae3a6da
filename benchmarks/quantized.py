"""Int8 end to end: AutoRelay int8 vs AutoRelay fp32 vs ONNX Runtime fp32 and ONNX Runtime int8.

    python benchmarks/quantized.py [--models resnet-18] [--threads 2] [--rounds 10] [--db URL]
                                   [--calibration 16] [--method percentile] [--target 'llvm -mcpu=znver3']
                                   [--precision-plan [--max-drop X]]

The same zoo network and weights four ways, each in its own worker process, timed in alternating
blocks (`benchmarks/peers.py`):

* `fp32`      AutoRelay's float build (logged schedules with `--db`, else the heuristic defaults);
* `int8`      AutoRelay's all-int8 plan, quantized exactly as `autorelay tune|compile --precision int8
              --calibration-random N` does it (so `--db` holds its tuned int8 kernels);
              each with the pipeline `--pipeline auto` picks (the log's, else the measured fastest);
* `plan`      with `--precision-plan`: the precision plan `autorelay quantize` stored in `--db`, as
              `autorelay run --precision plan` builds it (on the fp32 layout plan, where it was);
* `ort_fp32`  ONNX Runtime on the ONNX export of the network (see `benchmarks/models.py`);
* `ort_int8`  ONNX Runtime on that export quantized by its own `quantize_static` (QDQ format,
              per-channel int8 weights, uint8 activations) calibrated on the same inputs.

Random calibration data says nothing about accuracy (the accuracy experiments do that:
`experiments/quantize_digits.py`); it gives both int8 builds realistic scales for timing. The
table shows each median, the 10th-90th percentile of block medians, and the ratios the issue
asks for: int8 / fp32 speed-up and AutoRelay int8 vs ONNX Runtime int8.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reproduce.baselines import make_autorelay, make_onnxruntime, torch_module
from reproduce.baselines import zoo_model as _zoo_model


def _calibration(name: str, mod: Any, params: dict, inputs: dict, count: int) -> list[dict[str, np.ndarray]]:
    """The batches `autorelay tune|compile --precision int8 --calibration-random COUNT` use."""
    from search.models import Model
    from search.quant_data import random_batches

    return random_batches(Model(name, mod, params, inputs), count, seed=0).batches


def pick_pipeline(name: str, mod: Any, params: dict, inputs: dict, threads: int, db_url: str | None,
                  target: str = "llvm") -> tuple[str, str | None]:
    """As `autorelay compile --pipeline auto` picks: the log's choice, else the measured fastest; with
    the layout plan's JSON when that is a per-layer plan."""
    from search.models import Model
    from search.pipeline_choice import choose_pipeline

    db = None
    if db_url is not None:
        import tuning_db

        db = tuning_db.open(db_url)
    choice = choose_pipeline("auto", Model(name, mod, params, inputs), db, target, threads)
    return choice.pipeline, choice.plan.to_json() if choice.plan is not None else None


def make_fp32(name: str, options: dict[str, Any], threads: int, db_url: str | None, target: str = "llvm"
              ) -> tuple[Callable[[], Any], np.ndarray]:
    mod, params, inputs = _zoo_model(name, options)
    pipeline, plan_json = pick_pipeline(name, mod, params, inputs, threads, db_url, target)
    return make_autorelay(name, options, threads, pipeline, db_url, plan_json, target=target)


def make_int8(name: str, options: dict[str, Any], threads: int, db_url: str | None, count: int,
              method: str, target: str = "llvm") -> tuple[Callable[[], Any], np.ndarray]:
    """AutoRelay's all-int8 build of the zoo model, as `autorelay compile --precision int8` builds it."""
    from autorelay.codegen import resolve_target
    from autorelay.transform.quantize import QuantizePlan, calibrate, quantize_model
    from autorelay.transform.quantize.scheme import scheme_for_target
    from search.models import Model, compile_model

    mod, params, inputs = _zoo_model(name, options)
    calib = calibrate(mod, params, _calibration(name, mod, params, inputs, count), method=method,
                      progress=False)
    # the integer scheme whose kernels are fastest on this host (7-bit weights on AVX2 without VNNI)
    scheme = scheme_for_target(resolve_target(target))
    qmod, qparams = quantize_model(mod, params, calib, QuantizePlan(), scheme)
    qmodel = Model(f"{name}[quantized]", qmod, qparams, inputs)
    exe = compile_model(qmodel, db_url, target, threads=threads, pipeline="auto").exe
    if exe.report.fallbacks:
        print(f"  int8 build of {name}: {len(exe.report.fallbacks)} kernels fell back to NumPy",
              file=sys.stderr)
    args = [inputs[n] for n in exe.input_names]
    return (lambda: exe(*args)), np.asarray(exe(*args))


def make_precision_plan(name: str, options: dict[str, Any], threads: int, db_url: str, target: str = "llvm",
                        max_drop: float | None = None) -> tuple[Callable[[], Any], np.ndarray]:
    """The precision plan `autorelay quantize` picked in the log (with `max_drop`: the fastest
    stored one within it), built as `autorelay run --precision plan [--max-drop X]` builds it: its
    stored calibration, on the layout plan it was measured on where it was."""
    import tuning_db
    from search.models import Model, compile_model
    from search.quantize_cli import apply_precision

    mod, params, inputs = _zoo_model(name, options)
    how = argparse.Namespace(precision="plan", max_drop=max_drop, calibration=None, calibration_random=None,
                             method="max", pipeline="auto", target=target)
    with tuning_db.open(db_url) as db:
        qmodel, pipeline, note = apply_precision(how, Model(name, mod, params, inputs), db, threads)
        exe = compile_model(qmodel, db, target, threads=threads, pipeline=pipeline).exe
    print(f"  {name}: {note}", file=sys.stderr)
    args = [inputs[n] for n in exe.input_names]
    return (lambda: exe(*args)), np.asarray(exe(*args))


def make_ort_int8(name: str, options: dict[str, Any], threads: int, count: int
                  ) -> tuple[Callable[[], Any], np.ndarray]:
    """ONNX Runtime on the export quantized by `onnxruntime.quantization.quantize_static`."""
    import logging

    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice to pre-process first
    mod, params, inputs = _zoo_model(name, options)
    net, in_names = torch_module(mod, params)
    folder = tempfile.mkdtemp(prefix="autorelay-qbench-")
    fp32, int8 = os.path.join(folder, "fp32.onnx"), os.path.join(folder, "int8.onnx")
    targs = tuple(torch.from_numpy(inputs[n]) for n in in_names)
    with torch.no_grad():
        torch.onnx.export(net, targs, fp32, input_names=in_names, dynamo=False, opset_version=17)
    batches = iter(_calibration(name, mod, params, inputs, count))

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(batches, None)
            return None if batch is None else {n: batch[n] for n in in_names}

    quantize_static(fp32, int8, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(int8, so, providers=["CPUExecutionProvider"])
    feed = {n: inputs[n] for n in in_names}
    return (lambda: sess.run(None, feed)), np.asarray(sess.run(None, feed)[0])


def bench(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from reproduce.peers import time_isolated

    opts = {"image_size": args.image_size} if args.image_size else {}
    peers: dict[str, Any] = {
        "fp32": (make_fp32, (name, opts, args.threads, args.db, args.target)),
        "int8": (make_int8, (name, opts, args.threads, args.db, args.calibration, args.method, args.target)),
    }
    if args.precision_plan:
        peers["plan"] = (make_precision_plan, (name, opts, args.threads, args.db, args.target, args.max_drop))
    try:
        import onnxruntime  # noqa: F401

        peers["ort_fp32"] = (make_onnxruntime, (name, opts, args.threads))
        peers["ort_int8"] = (make_ort_int8, (name, opts, args.threads, args.calibration))
    except ImportError:
        print("  (onnxruntime not installed: pip install -e '.[onnx-test]' adds it)", file=sys.stderr)
    timed = time_isolated(peers, rounds=args.rounds, block_s=args.block_ms / 1e3)
    row: dict[str, Any] = {"model": name}
    for peer, t in timed.items():
        if t.error:
            print(f"  ({peer} failed: {t.error[:300]})", file=sys.stderr)
            continue
        row[peer] = (t.median_ms, *t.spread_ms)
    ref = timed["fp32"].output
    for peer in ("int8", "plan", "ort_int8"):
        out = timed[peer].output if peer in timed else None
        if ref is not None and out is not None and not timed[peer].error:
            row[f"{peer}_rel_err"] = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-12))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet-18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block-ms", type=float, default=250.0)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--db", default=None, help="tuning log whose schedules both AutoRelay builds use")
    ap.add_argument("--target", default="llvm",
                    help="AutoRelay's target: the host (llvm), or a named CPU whose code runs here, e.g. "
                         "'llvm -mcpu=znver3' for the AVX2 kernels (int8 then uses 7-bit weights)")
    ap.add_argument("--calibration", type=int, default=8,
                    help="random calibration inputs (as `--calibration-random N`; the CLI's default 8)")
    ap.add_argument("--method", default="max", choices=("max", "percentile", "kl"),
                    help="range calibration (the CLI's default: max)")
    ap.add_argument("--precision-plan", action="store_true",
                    help="also time the precision plan `autorelay quantize` stored in --db (peer `plan`)")
    ap.add_argument("--max-drop", type=float, default=None,
                    help="with --precision-plan: the fastest stored plan within this drop, not the pick")
    args = ap.parse_args()
    if args.precision_plan and not args.db:
        ap.error("--precision-plan reads the plan from --db")
    print(f"target {args.target}, batch 1, {args.threads} threads, {args.rounds} rounds; each peer in its "
          f"own process, "
          f"alternating blocks of {args.block_ms:.0f} ms; median ms [p10-p90 of block medians]")
    cols = ("fp32", "int8", *(("plan",) if args.precision_plan else ()), "ort_fp32", "ort_int8")
    print(f"{'model':<14}" + "".join(f"{c:>22}" for c in cols) + f"{'fp32/int8':>11}{'ort_int8/int8':>15}"
          + (f"{'fp32/plan':>11}{'ort_fp32/plan':>15}" if args.precision_plan else ""))
    for name in args.models.split(","):
        r = bench(name, args)
        line = f"{name:<14}"
        for c in cols:
            line += f"{r[c][0]:>8.3f} [{r[c][1]:.2f}-{r[c][2]:.2f}]" if c in r else f"{'-':>22}"
        speed = r["fp32"][0] / r["int8"][0] if "fp32" in r and "int8" in r else float("nan")
        vs_ort = r["ort_int8"][0] / r["int8"][0] if "ort_int8" in r and "int8" in r else float("nan")
        if args.precision_plan:
            nan = (float("nan"),)
            plan = r.get("plan", nan)[0]
            line += f"{speed:>11.2f}{vs_ort:>15.2f}"
            speed, vs_ort = r.get("fp32", nan)[0] / plan, r.get("ort_fp32", nan)[0] / plan
        print(line + f"{speed:>11.2f}{vs_ort:>15.2f}")
        errs = ", ".join(f"{k[:-8]} {r[k]:.3f}" for k in r if k.endswith("_rel_err"))
        if errs:
            print(f"{'':<14}max |output - fp32| / max |fp32|: {errs}")


if __name__ == "__main__":
    main()
