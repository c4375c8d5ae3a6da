"""The comparison baselines of a zoo model, one implementation for `benchmarks/models.py` and the
`reproduce` experiments: AutoRelay (default or logged schedules), PyTorch eager, ONNX Runtime and,
when installed, Apache TVM.

Why the PyTorch baseline is built from our own IR: it must run the *same* network with the same
weights, so the Relay graph is walked once and every op is mapped to its `torch.nn.functional`
counterpart (eager mode, no compilation). ONNX Runtime runs the ONNX export of that PyTorch module,
and TVM imports the same ONNX file. Each `make_*` factory is a module-level function returning
(a callable running one inference, its output as a NumPy array), so `reproduce.peers.time_isolated`
can build it inside its own worker process.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

import autorelay
from autorelay.frontend import zoo
from autorelay.ir.expr import Call, Constant, Op, Tuple, TupleGetItem, Var
from autorelay.ir.visitor import post_order
from reproduce.peers import paired_ratio

Arrays = dict[str, np.ndarray]
Runner = tuple[Callable[[], Any], np.ndarray]
INSTALL_HINT = "pip install -e '.[onnx-test]' adds it"
TVM_HINT = "pip install apache-tvm adds it"
BASELINE_MODULES = {"torch": "torch", "onnxruntime": "onnxruntime", "tvm": "tvm"}


def missing(baseline: str) -> str | None:
    """Why `baseline` cannot run here (one line with the install command), or None."""
    try:
        __import__(BASELINE_MODULES[baseline])
        if baseline in ("onnxruntime", "tvm"):
            __import__("torch")  # both run the ONNX export of the PyTorch module
    except ImportError as e:
        hint = TVM_HINT if baseline == "tvm" and e.name == "tvm" else INSTALL_HINT
        return f"{baseline} skipped: {e.name} is not installed ({hint})"
    return None


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


def torch_module(mod: Any, params: Arrays) -> tuple[Any, list[str]]:
    """A torch.nn.Module computing `@main` op by op with torch.nn.functional (eager), and the
    names of its inputs in the order `forward` takes them."""
    import torch

    mod = autorelay.infer_types(mod)
    fn = mod["main"]
    ops = _torch_ops()
    order = list(post_order(fn.body))
    inputs = [p.name_hint for p in fn.params if p.name_hint not in params]

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


# ---- factories: each builds one backend (inside its own worker process) ------------------------


def zoo_model(name: str, options: dict[str, Any]) -> tuple[Any, Arrays, Arrays]:
    """(module, weights, seeded random inputs) of a zoo model; `options` as `zoo.get` takes them."""
    mod, params = zoo.get(name, **options)
    return mod, params, zoo.random_inputs(mod, params)


def make_autorelay(name: str, options: dict[str, Any], threads: int, pipeline: str,
                   db_url: str | None, plan_json: str | None = None, target: str = "llvm") -> Runner:
    """AutoRelay built with the log's schedules (`db_url`) or the heuristic defaults (None); with
    `plan_json`, the per-layer layout plan the log chose (`tune --pipeline plan`). `target`: the host
    by default, or a named CPU (`llvm -mcpu=znver3`: the AVX2 kernels, run here)."""
    from search.models import Model, schedule_source

    mod, params, inputs = zoo_model(name, options)
    source = None
    built_with: Any = pipeline
    if plan_json is not None:
        from autorelay.codegen import resolve_target
        from autorelay.transform.layout_plan import LayoutPlan, plan_pipeline

        built_with = plan_pipeline(LayoutPlan.from_json(plan_json))
        if db_url is not None:
            import tuning_db

            source = tuning_db.open(db_url).schedule_source(str(resolve_target(target, threads)))
    elif db_url is not None:
        import tuning_db

        source = schedule_source(tuning_db.open(db_url), Model(name, mod, params, inputs), target,
                                 threads=threads, pipeline=pipeline)
    exe = autorelay.build(mod, target=target, params=params, threads=threads, schedules=source,
                          pipeline=built_with)
    args = [inputs[n] for n in exe.input_names]
    return (lambda: exe(*args)), np.asarray(exe(*args))


def _torch_net(name: str, options: dict[str, Any]) -> tuple[Any, list[Any], list[str]]:
    import torch

    mod, params, inputs = zoo_model(name, options)
    net, in_names = torch_module(mod, params)
    return net, [torch.from_numpy(inputs[n]) for n in in_names], in_names


def make_torch(name: str, options: dict[str, Any], threads: int) -> Runner:
    """PyTorch eager on `threads` threads, no autograd."""
    import torch

    torch.set_num_threads(threads)
    net, targs, _ = _torch_net(name, options)

    def run() -> Any:
        with torch.no_grad():
            return net(*targs)

    out = run()
    return run, (out[0] if isinstance(out, tuple) else out).numpy()


def export_onnx(net: Any, targs: list, in_names: list[str], log: TextIO | None = sys.stderr) -> str | None:
    """The path of `net` exported to ONNX (opset 17, the TorchScript exporter), or None (said on `log`)."""
    import torch

    path = os.path.join(tempfile.mkdtemp(prefix="autorelay-bench-"), "model.onnx")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, tuple(targs), path, input_names=in_names, dynamo=False, opset_version=17)
    except Exception as e:  # an op the exporter lacks: this baseline is skipped, the others run
        if log is not None:
            print(f"  (onnx export failed: {type(e).__name__}: {str(e)[:120]})", file=log)
        return None
    return path


def onnxruntime_runner(net: Any, targs: list, in_names: list[str], threads: int) -> Callable[[], Any] | None:
    """ONNX Runtime (CPU, `threads` intra-op threads, spinning off) running `net`'s ONNX export;
    None when ONNX Runtime is missing or the export fails."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    path = export_onnx(net, targs, in_names)
    if path is None:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {n: t.numpy() for n, t in zip(in_names, targs)}
    return lambda: sess.run(None, feed)


def make_onnxruntime(name: str, options: dict[str, Any], threads: int) -> Runner:
    run = onnxruntime_runner(*_torch_net(name, options), threads)
    if run is None:
        raise RuntimeError("the ONNX export failed")
    return run, np.asarray(run()[0])


def make_tvm(name: str, options: dict[str, Any], threads: int) -> Runner:
    """Apache TVM importing the ONNX export, untuned: Relax's default CPU pipeline (TVM >= 0.20),
    else Relay at opt_level 3, for this host's CPU. TVM sizes its thread pool from TVM_NUM_THREADS
    when its runtime starts, so that is set first."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    import onnx
    import tvm
    from llvmlite import binding as llvm

    net, targs, in_names = _torch_net(name, options)
    path = export_onnx(net, targs, in_names)
    if path is None:
        raise RuntimeError("the ONNX export failed")
    shapes = {n: tuple(t.shape) for n, t in zip(in_names, targs)}
    feeds = [t.numpy() for t in targs]
    cpu = llvm.get_host_cpu_name()
    try:
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx
    except ImportError:  # TVM before 0.20: Relay
        return _tvm_relay(onnx.load(path), shapes, feeds, cpu)
    mod = from_onnx(onnx.load(path), shape_dict=shapes, keep_params_in_input=False)
    target = tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": threads})
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    args = [tvm.runtime.tensor(x, tvm.cpu()) for x in feeds]
    main = vm["main"]
    return (lambda: main(*args)), main(*args).numpy()


def _tvm_relay(model: Any, shapes: dict[str, tuple], feeds: list[np.ndarray], cpu: str) -> Runner:
    import tvm
    from tvm import relay
    from tvm.contrib import graph_executor

    mod, params = relay.frontend.from_onnx(model, shape=shapes, freeze_params=True)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=f"llvm -mcpu={cpu}", params=params)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    for n, x in zip(shapes, feeds):
        gm.set_input(n, x)

    def run() -> Any:
        gm.run()
        return gm.get_output(0)

    return run, run().numpy()


def baseline_peers(name: str, options: dict[str, Any], threads: int, log: TextIO = sys.stderr,
                   with_tvm: bool = False) -> dict[str, tuple[Callable[..., Runner], tuple]]:
    """The `time_isolated` peers of the installed baselines; each missing one is one line on `log`."""
    makers: dict[str, Callable[..., Runner]] = {"torch": make_torch, "onnxruntime": make_onnxruntime}
    if with_tvm:
        makers["tvm"] = make_tvm
    peers = {}
    for peer, factory in makers.items():
        why = missing(peer)
        if why:
            print(f"  ({why})", file=log)
            continue
        peers[peer] = (factory, (name, options, threads))
    return peers


def peer_figures(timed: dict[str, Any], reference: str = "autorelay", log: TextIO = sys.stderr
                 ) -> dict[str, Any]:
    """Per timed peer: `{peer}_ms` (median), `{peer}_spread` (p10, p90 of block medians) and, for the
    others, `max_abs_diff_{peer}` against `reference`'s output and `{peer}_paired`, the (median, p10,
    p90) of `reference`'s latency over the peer's round by round (`peers.paired_ratio`); a peer that
    failed to build is one line on `log` and `{peer}_error`."""
    row: dict[str, Any] = {}
    ours = timed[reference].output if reference in timed else None
    for peer, t in timed.items():
        if t.error:
            print(f"  ({peer} skipped: {t.error[:160]})", file=log)
            row[f"{peer}_error"] = t.error[:300]
            continue
        row[f"{peer}_ms"] = t.median_ms
        row[f"{peer}_spread"] = list(t.spread_ms)
        if peer != reference and ours is not None and t.output is not None:
            row[f"max_abs_diff_{peer}"] = float(np.abs(ours - t.output).max())
        if peer != reference and reference in timed and not timed[reference].error:
            row[f"{peer}_paired"] = list(paired_ratio(timed[reference], t))
    return row


__all__ = ["INSTALL_HINT", "baseline_peers", "export_onnx", "make_autorelay", "make_onnxruntime",
           "make_torch", "make_tvm", "missing", "onnxruntime_runner", "peer_figures", "torch_module",
           "zoo_model"]
