"""`rnns`: the Relay paper's NLP evaluation: recurrent models through the VM and the AoT compiler
against PyTorch eager.

LSTM / GRU / vanilla RNN (input 128, hidden 128, batch 1) are timed per step over a sequence,
char-rnn per generated sequence, the child-sum Tree-LSTM per tree (a complete binary tree; the AoT
compiler takes static tensors only, so the tree runs on the VM alone). Every executor runs in its own
process and they are timed in alternating blocks (`reproduce.peers`), after their outputs were
checked against each other: a wrong answer is never timed. The bars of issue 20: the best AutoRelay
executor at least 3x PyTorch per step (LSTM/GRU/RNN) and per generated sequence (char-rnn), and 2x
per tree (Tree-LSTM).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reproduce.experiment import Context, Experiment, Report, Row, Unit
from reproduce.output import md_table

MODELS = ("lstm", "gru", "rnn", "char-rnn", "tree-lstm")
BARS = {"lstm": 3.0, "gru": 3.0, "rnn": 3.0, "char-rnn": 3.0, "tree-lstm": 2.0}
PER = {"char-rnn": "sequence", "tree-lstm": "tree"}
# (steps or tree levels, timing rounds, seconds per block): quick, full
SCALE = {True: {"steps": 20, "levels": 4, "rounds": 4, "block_s": 0.15},
         False: {"steps": 100, "levels": 5, "rounds": 12, "block_s": 0.3}}


def _model(name: str, steps: int) -> tuple[Any, dict[str, np.ndarray]]:
    from autorelay.frontend import zoo

    kw = {"char-rnn": {"steps": steps}, "tree-lstm": {}}.get(name, {"seq_len": steps})
    return zoo.get(name, **kw)


def _as_array(name: str, value: Any) -> np.ndarray:
    if name == "char-rnn":  # a List of one-element index tensors
        from autorelay.runtime.values import to_list

        return np.concatenate([np.asarray(c).reshape(-1) for c in to_list(value)])
    return np.asarray(value)


def _vm_tree(mod: Any, tree: Any) -> Any:
    from autorelay.runtime.values import ConstructorValue, from_list

    rose = mod.get_constructor("Rose")
    return ConstructorValue(rose, (tree[0], from_list(mod, [_vm_tree(mod, k) for k in tree[1]])))


def make_executor(backend: str, name: str, steps: int, threads: int,
                  seed: int) -> tuple[Callable[[], Any], np.ndarray]:
    """A peer of `reproduce.peers.time_isolated`: one executor built in its own process."""
    from reproduce.rnn_baselines import model_inputs, to_torch, torch_runner

    mod, params = _model(name, steps)
    inp = model_inputs(name, steps, params, seed)
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        run, arg = torch_runner(name, params, steps), to_torch(inp)
        return (lambda: run(arg)), run(arg)
    from autorelay.runtime import aot, vm

    if backend == "vm":
        exe = vm.compile(mod, params=params)
        exe.set_threads(threads)
    else:
        exe = aot.compile(mod, params=params)
    arg = _vm_tree(mod, inp) if name == "tree-lstm" else inp
    return (lambda: exe(arg)), _as_array(name, exe(arg))


def units(ctx: Context) -> list[Unit]:
    return [Unit(name, {"model": name}, expected_s=12.0 if ctx.quick else 30.0) for name in MODELS]


def measure(ctx: Context, unit: Unit) -> dict[str, Any]:
    from reproduce.baselines import missing
    from reproduce.peers import time_isolated

    name, scale = unit.params["model"], SCALE[ctx.quick]
    steps = scale["levels"] if name == "tree-lstm" else scale["steps"]
    backends = ["vm", "torch"] if name == "tree-lstm" else ["vm", "aot", "torch"]
    why = missing("torch")
    if why:
        ctx.note(why)
        backends.remove("torch")
    peers = {b: (make_executor, (b, name, steps, ctx.threads, ctx.seed)) for b in backends}
    timed = time_isolated(peers, rounds=scale["rounds"], block_s=scale["block_s"])
    if timed["vm"].error:
        raise RuntimeError(f"the VM failed on {name}: {timed['vm'].error}")
    want = timed["vm"].output
    result: dict[str, Any] = {"steps": steps, "per": PER.get(name, "step")}
    if name == "tree-lstm":
        result["nodes"] = 2 ** steps - 1
    for b, t in timed.items():
        if t.error:
            ctx.note(f"{b} skipped on {name}: {t.error[:160]}")
            continue
        if name == "char-rnn":
            ok = np.array_equal(t.output, want)
        else:
            ok = np.allclose(t.output, want, rtol=1e-4, atol=1e-4)
        if not ok:
            raise AssertionError(f"{name}: {b} computes a different result from the VM; not timed")
        result[f"{b}_ms"] = t.median_ms
        result[f"{b}_spread_ms"] = list(t.spread_ms)
    return result


def _per_unit_us(result: dict[str, Any], backend: str) -> float | None:
    """Microseconds per step (LSTM/GRU/RNN) or per sequence / tree."""
    ms = result.get(f"{backend}_ms")
    if ms is None:
        return None
    return ms * 1e3 / (result["steps"] if result["per"] == "step" else 1)


def report(ctx: Context, rows: Sequence[Row]) -> Report:
    table, csv_rows, speedups = [], [], {}
    for r in rows:
        res = dict(r.result)
        us = {b: _per_unit_us(res, b) for b in ("vm", "aot", "torch")}
        ours = [v for b, v in us.items() if b != "torch" and v is not None]
        best = min(ours) if ours else None
        ratio = us["torch"] / best if us["torch"] and best else None
        bar = BARS.get(r.unit)
        verdict = "-" if ratio is None or bar is None else ("yes" if ratio >= bar else "NO")
        table.append([r.unit, res["per"], us["vm"], us["aot"], us["torch"], ratio, f">= {bar:g}x", verdict])
        csv_rows.append({"model": r.unit, "per": res["per"], "steps": res["steps"], "vm_us": us["vm"],
                         "aot_us": us["aot"], "torch_us": us["torch"], "torch_over_best": ratio,
                         "machine": r.machine, "code_version": r.code_version})
        speedups[r.unit] = {b: us["torch"] / v for b, v in us.items()
                            if b != "torch" and v and us["torch"]}
    md = ("Median time per step (LSTM/GRU/RNN), per generated sequence (char-rnn) and per tree "
          "(Tree-LSTM), in microseconds; each executor in its own process, timed in alternating "
          "blocks; outputs checked equal before timing.\n\n")
    md += md_table(["model", "per", "VM us", "AoT us", "PyTorch us", "PyTorch / best", "bar", "met"], table)
    return Report(csv_rows, md, {"rnns": lambda fig: _plot(fig, speedups)})


def _plot(fig: Any, speedups: dict[str, dict[str, float]]) -> None:
    ax = fig.add_subplot()
    names = list(speedups)
    for k, backend in enumerate(("vm", "aot")):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(names))]
        ax.bar(xs, [speedups[n].get(backend, 0.0) for n in names], width=0.38,
               label={"vm": "VM", "aot": "AoT"}[backend])
    for i, n in enumerate(names):
        ax.hlines(BARS[n], i - 0.45, i + 0.45, colors="k", linestyles="dashed")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("speedup over PyTorch eager")
    ax.set_title("Recurrent models: AutoRelay vs PyTorch (dashed: the bar)")
    ax.legend()


EXPERIMENT = Experiment(
    name="rnns", title="Recurrent models: VM and AoT vs PyTorch eager",
    reference="Relay (Roesch et al., arXiv:1904.08368v2), Sec. 5.2 NLP evaluation, Fig. 6",
    quick_minutes=1.5, full_minutes=4.0, units=units, measure=measure, report=report,
)
