"""Whole-model latency: AutoRelay (default schedules) vs PyTorch eager vs ONNX Runtime.

    python benchmarks/models.py [--models resnet-18,mobilenet-v2] [--threads 2] [--repeat 15] [--db URL]
                                [--pipeline auto|default|nchwc] [--rival-db URL] [--batch 8]

With `--db`, AutoRelay builds with the best schedules in that tuning log (what `autorelay tune`
wrote, looked up as `autorelay compile` does) and the heuristic-default build is timed too, as
the column `default ms`. The pass pipeline is chosen as `autorelay compile` chooses it (`auto`:
the one the log tuned the model with, else the fastest candidate pipeline with default schedules).
`--rival-db` adds a second AutoRelay build, from another tuning log with the pipeline or layout
plan that log holds, timed in the same alternation as the column `rival ms` (two tuning runs of
one model — a per-layer plan against the per-model pick — compared in one run).

Each zoo CNN runs at batch 1 (or `--batch`) on `--threads` threads. The PyTorch baseline executes the *same*
network with the same weights: the Relay graph is walked once and every op is mapped to its
`torch.nn.functional` counterpart (eager mode, no compilation); the ONNX Runtime baseline runs the
ONNX export of that PyTorch module. By default (`--isolation process`) every backend runs in its
own worker process and they are timed one at a time in alternating blocks of `--block-ms`, the
order rotating each round (`reproduce/peers.py`): no peer's idle threads share the cores with the
one being timed. We print each backend's median latency, the 10th-90th percentile of its block
medians (the spread) and AutoRelay's ratio to each (> 1 means AutoRelay is slower); then the ratio
of AutoRelay's block median to each peer's in the same round, whose median and spread the host's
drift over minutes does not widen (`reproduce.peers.paired_ratio`).
`--isolation interleaved` times them call by call in one process instead (the older method, which
lets peers disturb each other). Columns for PyTorch / ONNX Runtime are skipped when not installed.
The baselines themselves live in `reproduce/baselines.py` (shared with `autorelay reproduce cnn_comp`);
this script only times and prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# Baselines must not burn the shared cores between their own calls (OpenMP / ORT spin-waiting would
# slow whichever backend runs next in the interleaved loop).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autorelay
from autorelay.codegen.llvm.threads import park_all
from reproduce.baselines import (
    baseline_peers,
    make_autorelay,
    onnxruntime_runner,
    peer_figures,
    torch_module,
    zoo_model,
)

CNNS = ["resnet-18", "resnet-34", "resnet-50", "mobilenet-v2", "vgg-16", "squeezenet-1.1", "inception",
        "nature-dqn", "dcgan", "mlp", "transformer"]


# ---- timing ----------------------------------------------------------------------------------


def interleaved(runners: dict[str, Callable[[], Any]], repeat: int, warmup: int = 2) -> dict[str, float]:
    for _ in range(warmup):
        for r in runners.values():
            r()
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(repeat):
        for k, r in runners.items():
            t0 = time.perf_counter()
            r()
            times[k].append(time.perf_counter() - t0)
            park_all()  # AutoRelay's idle workers must not spin through the next backend's run
    return {k: statistics.median(v) for k, v in times.items()}


# ---- peers built inside their own worker process (see reproduce/peers.py) ----------------------


def _autorelay_peer(name: str, options: dict[str, Any], threads: int, db_url: str | None,
                    pipeline: str) -> tuple[str, tuple[Any, ...]]:
    """(the pipeline chosen as `autorelay compile` chooses it, make_autorelay's arguments)."""
    from search.models import Model
    from search.pipeline_choice import choose_pipeline

    mod, params, inputs = zoo_model(name, options)
    db = None
    if db_url is not None:
        import tuning_db

        db = tuning_db.open(db_url)
    choice = choose_pipeline(pipeline, Model(name, mod, params, inputs), db, "llvm", threads)
    plan_json = choice.plan.to_json() if choice.plan is not None else None
    return choice.pipeline, (name, options, threads, choice.pipeline, db_url, plan_json)


def bench_isolated(name: str, threads: int, rounds: int, options: dict[str, Any], db_url: str | None,
                   pipeline: str, block_s: float, rival_db: str | None = None) -> dict[str, Any]:
    """One model, each backend in its own process (see the module docstring)."""
    from reproduce.peers import time_isolated

    pipeline, ours = _autorelay_peer(name, options, threads, db_url, pipeline)
    peers: dict[str, Any] = {"autorelay": (make_autorelay, ours)}
    if db_url is not None:
        peers["default"] = (make_autorelay, (*ours[:4], None, ours[5]))
    if rival_db is not None:
        peers["rival"] = (make_autorelay, _autorelay_peer(name, options, threads, rival_db, "auto")[1])
    peers.update(baseline_peers(name, options, threads))
    timed = time_isolated(peers, rounds=rounds, block_s=block_s)
    return {"model": name, "pipeline": pipeline, **peer_figures(timed)}


def bench_model(name: str, threads: int, repeat: int, options: dict[str, Any],
                db: Any = None, pipeline: str = "auto") -> dict[str, Any]:
    from search.models import Model, schedule_source
    from search.pipeline_choice import choose_pipeline

    mod, params, inputs = zoo_model(name, options)
    model = Model(name, mod, params, inputs)
    pipeline = choose_pipeline(pipeline, model, db, "llvm", threads).pipeline  # rebuilt below: timed
    source = None if db is None else schedule_source(db, model, threads=threads, pipeline=pipeline)
    t0 = time.perf_counter()
    exe = autorelay.build(mod, params=params, threads=threads, schedules=source, pipeline=pipeline)
    build_s = time.perf_counter() - t0
    args = [inputs[n] for n in exe.input_names]
    ours = np.asarray(exe(*args))
    runners: dict[str, Callable[[], Any]] = {"autorelay": lambda: exe(*args)}
    if db is not None:
        plain = autorelay.build(mod, params=params, threads=threads, pipeline=pipeline)
        runners["default"] = lambda: plain(*args)
    row: dict[str, Any] = {"model": name, "pipeline": pipeline, "build_s": build_s,
                           "kernels": len(exe.report.rows), "fallbacks": len(exe.report.fallbacks),
                           "peak_kib": exe.peak_memory_bytes / 1024}
    try:
        import torch

        torch.set_num_threads(threads)
        net, in_names = torch_module(mod, params)
        targs = [torch.from_numpy(inputs[n]) for n in in_names]
        with torch.no_grad():
            theirs = net(*targs)
            theirs = theirs[0] if isinstance(theirs, tuple) else theirs
            row["max_abs_diff_torch"] = float(np.abs(ours - theirs.numpy()).max())

        def run_torch() -> Any:
            with torch.no_grad():
                return net(*targs)

        runners["torch"] = run_torch
        ort_runner = onnxruntime_runner(net, targs, in_names, threads)
        if ort_runner is not None:
            runners["onnxruntime"] = ort_runner
    except ImportError:
        pass
    row.update({f"{k}_ms": v * 1e3 for k, v in interleaved(runners, repeat).items()})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(CNNS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15,
                    help="rounds (blocks per backend, or calls interleaved)")
    ap.add_argument("--isolation", choices=("process", "interleaved"), default="process",
                    help="process: each backend in its own process, alternating blocks (default)")
    ap.add_argument("--block-ms", type=float, default=250.0, help="length of one timed block (process)")
    ap.add_argument("--image-size", type=int, default=None, help="override the CNNs' input size")
    ap.add_argument("--batch", type=int, default=1, help="batch size (every backend)")
    ap.add_argument("--db", default=None, help="tuning log whose best schedules AutoRelay builds with")
    ap.add_argument("--pipeline", default="auto",
                    help="AutoRelay's pass pipeline (auto: the one the log tuned the model with, "
                         "else measured)")
    ap.add_argument("--rival-db", default=None,
                    help="a second tuning log: its build is timed too, as `rival` (process isolation)")
    args = ap.parse_args()
    db = None
    if args.db:
        import tuning_db

        db = tuning_db.open(args.db)
    rows = []
    for name in args.models.split(","):
        sized = name not in ("mlp", "transformer", "nature-dqn", "dcgan")
        opts = {"image_size": args.image_size} if args.image_size and sized else {}
        if args.batch != 1:
            opts["batch_size"] = args.batch
        print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
        if args.isolation == "process":
            rows.append(bench_isolated(name, args.threads, args.repeat, opts, args.db, args.pipeline,
                                       args.block_ms / 1e3, args.rival_db))
        else:
            rows.append(bench_model(name, args.threads, args.repeat, opts, db, args.pipeline))
    cols = ["autorelay_ms", "default_ms", "rival_ms", "torch_ms", "onnxruntime_ms"]
    present = [c for c in cols if any(c in r for r in rows)]
    head = f"{'model':<16}{'pipeline':>9}" + "".join(f"{c[:-3] + ' ms':>16}" for c in present)
    head += f"{'AR/torch':>10}{'AR/ORT':>9}" + (f"{'AR/rival':>10}" if "rival_ms" in present else "")
    how = ("each backend in its own process, alternating blocks of "
           f"{args.block_ms:.0f} ms; median of all calls, [p10-p90 of block medians]"
           if args.isolation == "process" else "interleaved call by call in one process; median")
    print(f"batch {args.batch}, {args.threads} threads, {args.repeat} rounds, {how}")
    print(head)
    for r in rows:
        line = f"{r['model']:<16}{r['pipeline']:>9}"
        line += "".join(f"{r.get(c, float('nan')):>16.3f}" for c in present)
        rt = r["autorelay_ms"] / r["torch_ms"] if "torch_ms" in r else float("nan")
        ro = r["autorelay_ms"] / r["onnxruntime_ms"] if "onnxruntime_ms" in r else float("nan")
        line += f"{rt:>10.2f}{ro:>9.2f}"
        if "rival_ms" in present:
            line += f"{r['autorelay_ms'] / r.get('rival_ms', float('nan')):>10.2f}"
        if "build_s" in r:
            line += f"  build {r['build_s']:.1f} s, {r['fallbacks']} fallbacks, peak {r['peak_kib']:.0f} KiB"
        print(line)
        spreads = [f"{c[:-3]} [{r[c[:-3] + '_spread'][0]:.3f}-{r[c[:-3] + '_spread'][1]:.3f}]"
                   for c in present if c[:-3] + "_spread" in r]
        if spreads:
            print(f"{'':<25}spread: " + ", ".join(spreads))
        pairs = {c[:-3]: r[c[:-3] + "_paired"] for c in present if c[:-3] + "_paired" in r}
        paired = [f"{peer} {med:.3f} [{lo:.3f}-{hi:.3f}]" for peer, (med, lo, hi) in pairs.items()]
        if paired:
            print(f"{'':<25}AR / peer within each round, median [p10-p90]: " + ", ".join(paired))
        for peer in ("torch", "onnxruntime"):
            if r.get(f"max_abs_diff_{peer}", 0) > 1e-3:
                print(f"  warning: {r['model']} differs from {peer} by {r[f'max_abs_diff_{peer}']:.2e}")

if __name__ == "__main__":
    main()
