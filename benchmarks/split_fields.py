"""What slicing a split's fields into their readers gains (`FusionPlan.slice_fields`) on the recurrent
zoo models, whose cells split their gate pre-activations.

    python benchmarks/split_fields.py [--models lstm gru tree-lstm lstm-cell] [--threads 1] [--rounds 12]

Each model is built twice per executor (the VM, and the AoT compiler where the model is static;
`lstm-cell`, one LSTM cell, by the graph executor, where a split ran as one kernel per field):
with the default fusion plan, where each field of a split fuses into the chain that reads it, and
with `slice_fields=False`, where a kernel copies the fields to memory first. Every build runs in
its own process and they are timed in alternating blocks (`reproduce.peers.time_isolated`); their
outputs are checked equal first. Reported: the median per step (LSTM/GRU), per tree (Tree-LSTM)
or per cell, the 10th-90th percentile of the block medians, and the kernels each model compiles
(its primitive functions).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = {"lstm": 100, "gru": 100, "tree-lstm": 5, "lstm-cell": 1}  # time steps, tree levels, one cell

# one LSTM cell as a static graph (the graph executor, where a split ran as one kernel per field)
CELL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 128), float32], %h: Tensor[(1, 128), float32], %c: Tensor[(1, 128), float32],
          %wx: Tensor[(512, 128), float32], %wh: Tensor[(512, 128), float32], %b: Tensor[(512,), float32]) {
  %0 = add(add(nn.dense(%x, %wx, units=512), nn.dense(%h, %wh, units=512)), %b);
  %1 = split(%0, indices_or_sections=4, axis=1);
  %2 = add(multiply(sigmoid(%1.1), %c), multiply(sigmoid(%1.0), tanh(%1.2)));
  (multiply(sigmoid(%1.3), tanh(%2)), %2)
}"""


def _pipeline(sliced: bool) -> Any:
    from autorelay.transform import FuseOps, FusionPlan, Pipeline, pipeline

    base = pipeline("default")
    return Pipeline([*base.passes[:-1], FuseOps(plan=replace(FusionPlan.default(), slice_fields=sliced))])


def make_build(executor: str, sliced: bool, name: str, threads: int) -> tuple[Any, np.ndarray]:
    """One build, in its own process (a factory of `time_isolated`)."""
    from autorelay.runtime import aot, vm
    from reproduce.experiments.rnns import _as_array, _model, _vm_tree
    from reproduce.rnn_baselines import model_inputs

    if name == "lstm-cell":
        return _cell(sliced, threads)
    mod, params = _model(name, STEPS[name])
    inp = model_inputs(name, STEPS[name], params, 0)
    if executor == "vm":
        exe = vm.compile(mod, params=params, pipeline=_pipeline(sliced))
        exe.set_threads(threads)
    else:
        exe = aot.compile(mod, params=params, pipeline=_pipeline(sliced))
    arg = _vm_tree(mod, inp) if name == "tree-lstm" else inp
    return (lambda: exe(arg)), _as_array(name, exe(arg))


def _cell(sliced: bool, threads: int) -> tuple[Any, np.ndarray]:
    import autorelay

    mod = autorelay.parse(CELL)
    rng = np.random.default_rng(0)
    values = {p.name_hint: rng.standard_normal(p.type_annotation.concrete_shape).astype("float32") * 0.3
              for p in mod["main"].params}
    weights = {n: values[n] for n in ("wx", "wh", "b")}
    exe = autorelay.build(mod, params=weights, threads=threads, pipeline=_pipeline(sliced))
    args = [values[n] for n in ("x", "h", "c")]
    return (lambda: exe(*args)), np.concatenate([np.asarray(o) for o in exe(*args)], axis=-1)


def fused_functions(name: str, sliced: bool) -> int:
    """How many primitive functions (kernels) the prepared model holds."""
    import autorelay
    from autorelay.transform import primitive_functions
    from reproduce.experiments.rnns import _model

    mod = autorelay.parse(CELL) if name == "lstm-cell" else _model(name, STEPS[name])[0]
    return len(primitive_functions(_pipeline(sliced)(mod)))


def _us(t: Any, per: int) -> str:
    lo, hi = t.spread_ms
    return f"{t.median_ms * 1e3 / per:.2f} [{lo * 1e3 / per:.2f}-{hi * 1e3 / per:.2f}]"


def main() -> None:
    from reproduce.peers import time_isolated

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(STEPS), choices=list(STEPS),
                    help="the zoo's recurrent models; lstm-cell: one cell in the graph executor")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block-s", type=float, default=0.3)
    args = ap.parse_args()
    print("| model | executor | kernels sliced / split | sliced fields us [p10-p90] "
          "| split kernel us [p10-p90] | gain |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name in args.models:
        per = STEPS[name] if name != "tree-lstm" else 1
        executors = {"tree-lstm": ["vm"], "lstm-cell": ["graph"]}.get(name, ["vm", "aot"])
        peers = {f"{e} {s}": (make_build, (e, s == "sliced", name, args.threads))
                 for e in executors for s in ("sliced", "split")}
        timed = time_isolated(peers, rounds=args.rounds, block_s=args.block_s)
        errors = {k: t.error for k, t in timed.items() if t.error}
        if errors:
            raise RuntimeError(f"{name}: {errors}")
        want = timed[f"{executors[0]} split"].output
        for k, t in timed.items():
            if not np.allclose(t.output, want, rtol=1e-4, atol=1e-5):
                raise AssertionError(f"{name}: {k} differs from the build with a split kernel")
        kernels = f"{fused_functions(name, True)} / {fused_functions(name, False)}"
        for e in executors:
            a, b = timed[f"{e} sliced"], timed[f"{e} split"]
            print(f"| {name} | {e} | {kernels} | {_us(a, per)} | {_us(b, per)} "
                  f"| {b.median_ms / a.median_ms:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
