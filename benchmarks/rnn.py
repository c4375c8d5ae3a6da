"""Per-step latency of the recurrent zoo models through the VM, the AoT compiler and PyTorch eager.

    python benchmarks/rnn.py [--steps 100] [--repeats 21] [--threads 1 2]

LSTM / GRU / vanilla RNN (input 128, hidden 128, batch 1, as in the Relay evaluation) over a
`--steps`-long sequence, and char-rnn generating `--steps` characters. PyTorch runs
`nn.LSTMCell` / `nn.GRUCell` / `nn.RNNCell` (char-rnn: the same matmuls, argmax and one-hot) in a
Python loop under `torch.no_grad()`, with the zoo model's weights, and its result is checked
against AutoRelay's before timing. Runs are interleaved (one run of each implementation per round)
and the median per-step time is reported, with PyTorch's time divided by each of ours (a ratio
above 1 means AutoRelay is faster). AoT code runs its kernels single-threaded.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from autorelay.frontend import zoo
from autorelay.runtime import aot, vm
from autorelay.runtime.values import to_list


def torch_runner(name: str, params: dict[str, np.ndarray], steps: int) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    if name == "char-rnn":
        def run(start: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                x, h, out = torch.from_numpy(start), torch.zeros(1, t["w_hh"].shape[0]), []
                for _ in range(steps):
                    h = torch.tanh(torch.addmm(t["b_h"], x, t["w_xh"].T) + h @ t["w_hh"].T)
                    nxt = torch.argmax(torch.addmm(t["b_y"], h, t["w_hy"].T), dim=1)
                    out.append(nxt)
                    x = torch.nn.functional.one_hot(nxt, t["w_xh"].shape[1]).float()
                return torch.cat(out).numpy()
        return run
    cls = {"lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell, "rnn": torch.nn.RNNCell}[name]
    hidden = params["w_hh"].shape[1]
    cell = cls(params["w_ih"].shape[1], hidden)
    with torch.no_grad():
        cell.weight_ih.copy_(t["w_ih"])
        cell.weight_hh.copy_(t["w_hh"])
        cell.bias_ih.copy_(t["b_ih"] if name == "gru" else t["bias"])
        cell.bias_hh.copy_(t["b_hh"] if name == "gru" else torch.zeros_like(cell.bias_hh))

    def run(xs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.from_numpy(xs)
            h = torch.zeros(xs.shape[1], hidden)
            c = torch.zeros_like(h)
            for i in range(xs.shape[0]):
                if name == "lstm":
                    h, c = cell(x[i], (h, c))
                else:
                    h = cell(x[i], h)
            return h.numpy()
    return run


def _chars(value: object) -> np.ndarray:
    return np.concatenate([np.asarray(c).reshape(-1) for c in to_list(value)])  # type: ignore[arg-type]


def bench(name: str, steps: int, repeats: int, threads: list[int]) -> list[tuple]:
    import torch

    kw = {"steps": steps} if name == "char-rnn" else {"seq_len": steps}
    mod, params = zoo.get(name, **kw)
    if name == "char-rnn":
        inp = np.eye(64, dtype="float32")[[5]]
    else:
        inp = np.random.default_rng(0).standard_normal((steps, 1, 128)).astype("float32")
    v = vm.compile(mod, params=params)
    a = aot.compile(mod, params=params)
    t = torch_runner(name, params, steps)
    norm = _chars if name == "char-rnn" else np.asarray
    want = norm(a(inp))
    for label, f in (("vm", v), ("torch", t)):
        got = norm(f(inp)) if label != "torch" else f(inp)
        if name == "char-rnn":
            assert np.array_equal(got, want), f"{name}: {label} generated a different sequence"
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name}: {label} differs")
    rows = []
    for th in threads:
        torch.set_num_threads(th)
        v.set_threads(th)
        times: dict[str, list[float]] = {"vm": [], "aot": [], "torch": []}
        runners = {"vm": v, "aot": a, "torch": t}
        for _ in range(repeats):
            for label, f in runners.items():
                t0 = time.perf_counter()
                f(inp)
                times[label].append((time.perf_counter() - t0) / steps)
        med = {k: statistics.median(x) * 1e6 for k, x in times.items()}
        rows.append((name, th, med["vm"], med["aot"], med["torch"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["lstm", "gru", "rnn", "char-rnn"])
    args = ap.parse_args()
    print(f"per-step latency, median of {args.repeats} interleaved runs of {args.steps} steps (microseconds)")
    print(f"{'model':<9} {'thr':>3} {'VM':>9} {'AoT':>9} {'PyTorch':>9} {'PT/VM':>7} {'PT/AoT':>7}")
    for m in args.models:
        for name, th, tv, ta, tt in bench(m, args.steps, args.repeats, args.threads):
            print(f"{name:<9} {th:>3} {tv:9.2f} {ta:9.2f} {tt:9.2f} {tt / tv:7.2f} {tt / ta:7.2f}")


if __name__ == "__main__":
    main()
