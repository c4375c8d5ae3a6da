"""Whole-model latency: AutoRelay (default schedules) vs PyTorch eager vs ONNX Runtime.

    python benchmarks/models.py [--models resnet-18,mobilenet-v2] [--threads 2] [--repeat 15] [--db URL]
                                [--pipeline auto|default|nchwc]

With `--db`, AutoRelay builds with the best schedules in that tuning log (what `autorelay tune`
wrote, looked up as `autorelay compile` does) and the heuristic-default build is timed too, as
the column `default ms`. The pass pipeline is chosen as `autorelay compile` chooses it (`auto`:
the one the log tuned the model with, else the faster of default and nchwc with default schedules).

Each zoo CNN runs at batch 1 on `--threads` threads. The PyTorch baseline executes the *same*
network with the same weights: the Relay graph is walked once and every op is mapped to its
`torch.nn.functional` counterpart (eager mode, no compilation); the ONNX Runtime baseline runs the
ONNX export of that PyTorch module. By default (`--isolation process`) every backend runs in its
own worker process and they are timed one at a time in alternating blocks of `--block-ms`, the
order rotating each round (`benchmarks/peers.py`): no peer's idle threads share the cores with the
one being timed. We print each backend's median latency, the 10th-90th percentile of its block
medians (the spread) and AutoRelay's ratio to each (> 1 means AutoRelay is slower).
`--isolation interleaved` times them call by call in one process instead (the older method, which
lets peers disturb each other). Columns for PyTorch / ONNX Runtime are skipped when not installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
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
from autorelay.frontend import zoo
from autorelay.ir.expr import Call, Constant, Op, Tuple, TupleGetItem, Var
from autorelay.ir.visitor import post_order

CNNS = ["resnet-18", "resnet-34", "resnet-50", "mobilenet-v2", "vgg-16", "squeezenet-1.1", "inception",
        "nature-dqn", "dcgan", "mlp", "transformer"]


# ---- the same network in PyTorch ---------------------------------------------------------------


def _torch_ops() -> dict[str, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    def pad_args(p: tuple) -> tuple[tuple[int, int] | None, Any]:
        t, left, b, r = p
        return ((t, left) if (t, left) == (b, r) else None), (left, r, t, b)

    def conv2d(a, x, w):
        assert a["data_layout"] == "NCHW" and a["kernel_layout"] == "OIHW"
        sym, asym = pad_args(tuple(a["padding"]))
        if sym is None:
            x, sym = F.pad(x, asym), (0, 0)
        return F.conv2d(x, w, None, tuple(a["strides"]), sym, tuple(a["dilation"]), a["groups"])

    def conv2d_transpose(a, x, w):
        t, left, b, r = a["padding"]
        assert (t, left) == (b, r)
        return F.conv_transpose2d(x, w, None, tuple(a["strides"]), (t, left), tuple(a["output_padding"]),
                                  a["groups"], tuple(a["dilation"]))

    def max_pool2d(a, x):
        sym, asym = pad_args(tuple(a["padding"]))
        if sym is None:
            x, sym = F.pad(x, asym, value=float("-inf")), (0, 0)
        return F.max_pool2d(x, tuple(a["pool_size"]), tuple(a["strides"]), sym, tuple(a["dilation"]),
                            ceil_mode=a["ceil_mode"])

    def bias_add(a, x, b):
        return x + b.reshape((-1,) + (1,) * (x.ndim - a["axis"] % x.ndim - 1))

    def batch_norm(a, x, g, b, m, v):
        return (F.batch_norm(x, m, v, g, b, False, 0.0, a["epsilon"]),)

    def bmm(a, x, y):
        x = x.transpose(1, 2) if a["transpose_a"] else x
        return torch.matmul(x, y.transpose(1, 2) if a["transpose_b"] else y)

    return {
        "add": lambda a, x, y: x + y, "multiply": lambda a, x, y: x * y, "subtract": lambda a, x, y: x - y,
        "divide": lambda a, x, y: x / y, "tanh": lambda a, x: torch.tanh(x), "exp": lambda a, x: torch.exp(x),
        "sqrt": lambda a, x: torch.sqrt(x), "nn.relu": lambda a, x: F.relu(x),
        "clip": lambda a, x: torch.clamp(x, a["a_min"], a["a_max"]),
        "nn.conv2d": conv2d, "nn.conv2d_transpose": conv2d_transpose, "nn.max_pool2d": max_pool2d,
        "nn.global_avg_pool2d": lambda a, x: F.adaptive_avg_pool2d(x, 1), "nn.bias_add": bias_add,
        "nn.batch_norm": batch_norm, "nn.batch_flatten": lambda a, x: torch.flatten(x, 1),
        "nn.dense": lambda a, x, w: F.linear(x, w), "nn.softmax": lambda a, x: F.softmax(x, a["axis"]),
        "nn.dropout": lambda a, x: (x, torch.ones_like(x)),
        "concatenate": lambda a, *xs: torch.cat(xs, a["axis"]), "nn.batch_matmul": bmm,
        "transpose": lambda a, x: x.permute(*(a["axes"] or range(x.ndim - 1, -1, -1))),
        "nn.layer_norm": lambda a, x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, a["epsilon"]),
        "mean": lambda a, x: x.mean(dim=tuple(a["axis"]), keepdim=a["keepdims"]),
    }


def torch_module(mod: Any, params: dict[str, np.ndarray]) -> Any:
    """A torch.nn.Module computing `@main` op by op with torch.nn.functional (eager)."""
    import torch

    mod = autorelay.infer_types(mod)
    fn = mod["main"]
    ops = _torch_ops()
    order = [n for n in post_order(fn.body)]
    names = [p.name_hint for p in fn.params]
    inputs = [n for n in names if n not in params]

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weights = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}

        def forward(self, *xs: Any) -> Any:
            env: dict[int, Any] = {}
            given = dict(zip(inputs, xs))
            for p in fn.params:
                env[id(p)] = given[p.name_hint] if p.name_hint in given else self.weights[p.name_hint]
            for n in order:
                if isinstance(n, Var | Op):
                    continue
                if isinstance(n, Constant):
                    env[id(n)] = torch.from_numpy(np.array(n.data))
                elif isinstance(n, Tuple):
                    env[id(n)] = tuple(env[id(f)] for f in n.fields)
                elif isinstance(n, TupleGetItem):
                    env[id(n)] = env[id(n.tuple_value)][n.index]
                elif isinstance(n, Call) and n.op.name == "reshape":
                    env[id(n)] = env[id(n.args[0])].reshape(tuple(n.checked_type.concrete_shape))
                elif isinstance(n, Call):
                    args = [a for x in n.args
                            for a in (env[id(x)] if isinstance(x, Tuple) else (env[id(x)],))]
                    env[id(n)] = ops[n.op.name](n.attrs, *args)
            return env[id(fn.body)]

    return Net().eval(), inputs


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


# ---- peers built inside their own worker process (see benchmarks/peers.py) ---------------------


Arrays = dict[str, np.ndarray]


def _zoo_model(name: str, options: dict[str, Any]) -> tuple[Any, Arrays, Arrays]:
    mod, params = zoo.get(name, **options)
    return mod, params, zoo.random_inputs(mod, params)


def make_autorelay(name: str, options: dict[str, Any], threads: int, pipeline: str,
                   db_url: str | None, plan_json: str | None = None) -> tuple[Callable[[], Any], np.ndarray]:
    """AutoRelay built with the log's schedules (`db_url`) or the heuristic defaults (None); with
    `plan_json`, the per-layer layout plan the log chose (`tune --pipeline plan`)."""
    from search.models import Model, schedule_source

    mod, params, inputs = _zoo_model(name, options)
    source = None
    built_with: Any = pipeline
    if plan_json is not None:
        from autorelay.codegen import resolve_target
        from autorelay.transform.layout_plan import LayoutPlan, plan_pipeline

        built_with = plan_pipeline(LayoutPlan.from_json(plan_json))
        if db_url is not None:
            import tuning_db

            source = tuning_db.open(db_url).schedule_source(str(resolve_target("llvm", threads)))
    elif db_url is not None:
        import tuning_db

        source = schedule_source(tuning_db.open(db_url), Model(name, mod, params, inputs), threads=threads,
                                 pipeline=pipeline)
    exe = autorelay.build(mod, params=params, threads=threads, schedules=source, pipeline=built_with)
    args = [inputs[n] for n in exe.input_names]
    return (lambda: exe(*args)), np.asarray(exe(*args))


def make_torch(name: str, options: dict[str, Any], threads: int) -> tuple[Callable[[], Any], np.ndarray]:
    import torch

    torch.set_num_threads(threads)
    mod, params, inputs = _zoo_model(name, options)
    net, in_names = torch_module(mod, params)
    targs = [torch.from_numpy(inputs[n]) for n in in_names]

    def run() -> Any:
        with torch.no_grad():
            return net(*targs)

    out = run()
    return run, (out[0] if isinstance(out, tuple) else out).numpy()


def make_onnxruntime(name: str, options: dict[str, Any], threads: int
                     ) -> tuple[Callable[[], Any], np.ndarray]:
    import torch

    mod, params, inputs = _zoo_model(name, options)
    net, in_names = torch_module(mod, params)
    targs = [torch.from_numpy(inputs[n]) for n in in_names]
    run = _onnxruntime(net, targs, in_names, threads)
    if run is None:
        raise RuntimeError("the ONNX export failed")
    return run, np.asarray(run()[0])


def bench_isolated(name: str, threads: int, rounds: int, options: dict[str, Any], db_url: str | None,
                   pipeline: str, block_s: float) -> dict[str, Any]:
    """One model, each backend in its own process (see the module docstring)."""
    from reproduce.peers import time_isolated
    from search.models import Model
    from search.pipeline_choice import choose_pipeline

    mod, params, inputs = _zoo_model(name, options)
    db = None
    if db_url is not None:
        import tuning_db

        db = tuning_db.open(db_url)
    choice = choose_pipeline(pipeline, Model(name, mod, params, inputs), db, "llvm", threads)
    pipeline = choice.pipeline
    plan_json = choice.plan.to_json() if choice.plan is not None else None
    peers: dict[str, Any] = {
        "autorelay": (make_autorelay, (name, options, threads, pipeline, db_url, plan_json))}
    if db_url is not None:
        peers["default"] = (make_autorelay, (name, options, threads, pipeline, None, plan_json))
    for peer, factory in (("torch", make_torch), ("onnxruntime", make_onnxruntime)):
        try:
            __import__("torch" if peer == "torch" else "onnxruntime")
        except ImportError:
            print(f"  ({peer} not installed: pip install -e '.[onnx-test]' adds it)", file=sys.stderr)
            continue
        peers[peer] = (factory, (name, options, threads))
    timed = time_isolated(peers, rounds=rounds, block_s=block_s)
    row: dict[str, Any] = {"model": name, "pipeline": pipeline}
    ours = timed["autorelay"].output
    for peer, t in timed.items():
        if t.error:
            print(f"  ({peer} skipped: {t.error[:160]})", file=sys.stderr)
            continue
        row[f"{peer}_ms"] = t.median_ms
        row[f"{peer}_spread"] = t.spread_ms
        if peer in ("torch", "onnxruntime") and ours is not None and t.output is not None:
            row[f"max_abs_diff_{peer}"] = float(np.abs(ours - t.output).max())
    return row


def bench_model(name: str, threads: int, repeat: int, options: dict[str, Any],
                db: Any = None, pipeline: str = "auto") -> dict[str, Any]:
    from search.models import Model, schedule_source
    from search.pipeline_choice import choose_pipeline

    mod, params = zoo.get(name, **options)
    inputs = zoo.random_inputs(mod, params)
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
        ort_runner = _onnxruntime(net, targs, in_names, threads)
        if ort_runner is not None:
            runners["onnxruntime"] = ort_runner
    except ImportError:
        pass
    row.update({f"{k}_ms": v * 1e3 for k, v in interleaved(runners, repeat).items()})
    return row


def _onnxruntime(net: Any, targs: list, in_names: list[str], threads: int) -> Callable[[], Any] | None:
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        return None
    path = os.path.join(tempfile.mkdtemp(prefix="autorelay-bench-"), "model.onnx")
    import warnings

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, tuple(targs), path, input_names=in_names, dynamo=False, opset_version=17)
    except Exception as e:
        print(f"  (onnx export failed: {type(e).__name__}: {str(e)[:120]})", file=sys.stderr)
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {n: t.numpy() for n, t in zip(in_names, targs)}
    return lambda: sess.run(None, feed)


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
    ap.add_argument("--db", default=None, help="tuning log whose best schedules AutoRelay builds with")
    ap.add_argument("--pipeline", default="auto",
                    help="AutoRelay's pass pipeline (auto: the one the log tuned the model with, "
                         "else measured)")
    args = ap.parse_args()
    db = None
    if args.db:
        import tuning_db

        db = tuning_db.open(args.db)
    rows = []
    for name in args.models.split(","):
        sized = name not in ("mlp", "transformer", "nature-dqn", "dcgan")
        opts = {"image_size": args.image_size} if args.image_size and sized else {}
        print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
        if args.isolation == "process":
            rows.append(bench_isolated(name, args.threads, args.repeat, opts, args.db, args.pipeline,
                                       args.block_ms / 1e3))
        else:
            rows.append(bench_model(name, args.threads, args.repeat, opts, db, args.pipeline))
    cols = ["autorelay_ms", "default_ms", "torch_ms", "onnxruntime_ms"]
    present = [c for c in cols if any(c in r for r in rows)]
    head = f"{'model':<16}{'pipeline':>9}" + "".join(f"{c[:-3] + ' ms':>16}" for c in present)
    head += f"{'AR/torch':>10}{'AR/ORT':>9}"
    how = ("each backend in its own process, alternating blocks of "
           f"{args.block_ms:.0f} ms; median of all calls, [p10-p90 of block medians]"
           if args.isolation == "process" else "interleaved call by call in one process; median")
    print(f"batch 1, {args.threads} threads, {args.repeat} rounds, {how}")
    print(head)
    for r in rows:
        line = f"{r['model']:<16}{r['pipeline']:>9}"
        line += "".join(f"{r.get(c, float('nan')):>16.3f}" for c in present)
        rt = r["autorelay_ms"] / r["torch_ms"] if "torch_ms" in r else float("nan")
        ro = r["autorelay_ms"] / r["onnxruntime_ms"] if "onnxruntime_ms" in r else float("nan")
        line += f"{rt:>10.2f}{ro:>9.2f}"
        if "build_s" in r:
            line += f"  build {r['build_s']:.1f} s, {r['fallbacks']} fallbacks, peak {r['peak_kib']:.0f} KiB"
        print(line)
        spreads = [f"{c[:-3]} [{r[c[:-3] + '_spread'][0]:.3f}-{r[c[:-3] + '_spread'][1]:.3f}]"
                   for c in present if c[:-3] + "_spread" in r]
        if spreads:
            print(f"{'':<25}spread: " + ", ".join(spreads))
        for peer in ("torch", "onnxruntime"):
            if r.get(f"max_abs_diff_{peer}", 0) > 1e-3:
                print(f"  warning: {r['model']} differs from {peer} by {r[f'max_abs_diff_{peer}']:.2e}")

if __name__ == "__main__":
    main()
