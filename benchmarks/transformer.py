"""Transformers people bring: a BERT-base-sized encoder and a GPT-2-small-sized decoder step with a KV
cache, defined in plain PyTorch here, exported to ONNX, and run by AutoRelay (imported from that
ONNX file, default schedules or a tuning log's), ONNX Runtime and PyTorch eager — each backend in
its own process, alternating blocks (`benchmarks/peers.py`), same thread count, batch 1.

    python benchmarks/transformer.py [--model bert|gpt2|both] [--layers 12] [--seq 128] [--threads 2]
                                     [--rounds 8] [--db URL]

It prints each backend's median latency, the p10-p90 spread of its block medians, AutoRelay's
ratio to each peer (< 1: AutoRelay is faster), whether any kernel ran through a NumPy fallback, and
the largest difference from ONNX Runtime's output.
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

HIDDEN, HEADS, FF = 768, 12, 3072


def _modules() -> tuple[Any, Any]:
    import torch

    class Block(torch.nn.Module):
        """Pre-computed-QKV attention + GELU MLP, post-LayerNorm (BERT) — or a causal step with a
        KV cache (GPT-2: `past` keys/values in, the extended cache out)."""

        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(HIDDEN, 3 * HIDDEN), torch.nn.Linear(HIDDEN, HIDDEN)
            self.ln1, self.ln2 = torch.nn.LayerNorm(HIDDEN), torch.nn.LayerNorm(HIDDEN)
            self.up, self.down = torch.nn.Linear(HIDDEN, FF), torch.nn.Linear(FF, HIDDEN)

        def heads(self, t: Any) -> Any:
            b, n, _ = t.shape
            return t.reshape(b, n, HEADS, HIDDEN // HEADS).transpose(1, 2)

        def attend(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
            scores = q @ k.transpose(-1, -2) / (HIDDEN // HEADS) ** 0.5 + mask
            y = torch.softmax(scores, dim=-1) @ v
            b, _, n, _ = y.shape
            return self.out(y.transpose(1, 2).reshape(b, n, HIDDEN))

        def mlp(self, x: Any) -> Any:
            return self.down(torch.nn.functional.gelu(self.up(x)))

    class Encoder(torch.nn.Module):
        def __init__(self, layers: int) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

        def forward(self, x: Any, mask: Any) -> Any:
            for blk in self.blocks:
                q, k, v = (blk.heads(t) for t in blk.qkv(x).split(HIDDEN, dim=-1))
                x = blk.ln1(x + blk.attend(q, k, v, mask))
                x = blk.ln2(x + blk.mlp(x))
            return x

    class DecoderStep(torch.nn.Module):
        def __init__(self, layers: int) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

        def forward(self, x: Any, past_k: Any, past_v: Any) -> Any:
            ks, vs = [], []
            for i, blk in enumerate(self.blocks):
                h = blk.ln1(x)
                q, k, v = (blk.heads(t) for t in blk.qkv(h).split(HIDDEN, dim=-1))
                k, v = torch.cat([past_k[i], k], dim=2), torch.cat([past_v[i], v], dim=2)
                ks.append(k)
                vs.append(v)
                x = x + blk.attend(q, k, v, 0.0)
                x = x + blk.mlp(blk.ln2(x))
            return x, torch.stack(ks), torch.stack(vs)

    return Encoder, DecoderStep


def export(model: str, layers: int, seq: int, folder: str) -> tuple[str, dict[str, np.ndarray]]:
    """The model as an ONNX file and its sample inputs."""
    import torch

    encoder, decoder = _modules()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if model == "bert":
        net = encoder(layers).eval()
        feeds = {"x": rng.standard_normal((1, seq, HIDDEN)).astype("float32"),
                 "mask": np.zeros((1, 1, 1, seq), "float32")}
    else:
        net = decoder(layers).eval()
        cache = (layers, 1, HEADS, seq, HIDDEN // HEADS)
        feeds = {"x": rng.standard_normal((1, 1, HIDDEN)).astype("float32"),
                 "past_k": rng.standard_normal(cache).astype("float32"),
                 "past_v": rng.standard_normal(cache).astype("float32")}
    path = os.path.join(folder, f"{model}{layers}.onnx")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, tuple(torch.from_numpy(v) for v in feeds.values()), path,
                          input_names=list(feeds), dynamo=False, opset_version=17)
    return path, feeds


def make_autorelay(path: str, feeds: dict[str, np.ndarray], threads: int,
                   db_url: str | None) -> tuple[Callable[[], Any], np.ndarray]:
    import autorelay
    import tuning_db

    mod, params = autorelay.frontend.from_onnx(path)
    source = tuning_db.open(db_url).schedule_source("llvm") if db_url else None
    exe = autorelay.build(mod, params=params, threads=threads, schedules=source)
    if exe.report.fallbacks:
        print(f"  AutoRelay: {len(exe.report.fallbacks)} kernel(s) through the NumPy fallback",
              file=sys.stderr)
    args = [feeds[n] for n in exe.input_names]
    out = exe(*args)
    return (lambda: exe(*args)), np.asarray(out[0] if isinstance(out, tuple | list) else out)


def make_onnxruntime(path: str, feeds: dict[str, np.ndarray],
                     threads: int) -> tuple[Callable[[], Any], np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return (lambda: sess.run(None, feeds)), np.asarray(sess.run(None, feeds)[0])


def make_torch(model: str, layers: int, feeds: dict[str, np.ndarray],
               threads: int) -> tuple[Callable[[], Any], np.ndarray]:
    """The same module in eager PyTorch (same seed, so the same weights as the export)."""
    import torch

    torch.set_num_threads(threads)
    encoder, decoder = _modules()
    torch.manual_seed(0)
    net = (encoder if model == "bert" else decoder)(layers).eval()
    args = [torch.from_numpy(v) for v in feeds.values()]

    def run() -> Any:
        with torch.no_grad():
            return net(*args)

    out = run()
    return run, (out[0] if isinstance(out, tuple) else out).numpy()


def main() -> None:
    from reproduce.peers import time_isolated

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("bert", "gpt2", "both"), default="both")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128, help="BERT's sequence length / GPT-2's cache length")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--db", default=None,
                    help="tuning log to build AutoRelay with (default: heuristic defaults)")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="autorelay-transformer-")
    print(f"batch 1, {args.threads} threads, {args.layers} layers, hidden {HIDDEN}, seq/cache {args.seq}; "
          f"each backend in its own process, alternating blocks; median [p10-p90 of block medians] ms")
    for model in (("bert", "gpt2") if args.model == "both" else (args.model,)):
        path, feeds = export(model, args.layers, args.seq, folder)
        peers = {"autorelay": (make_autorelay, (path, feeds, args.threads, args.db)),
                 "onnxruntime": (make_onnxruntime, (path, feeds, args.threads)),
                 "torch": (make_torch, (model, args.layers, feeds, args.threads))}
        timed = time_isolated(peers, rounds=args.rounds)
        ar, ort_, pt = timed["autorelay"], timed["onnxruntime"], timed["torch"]
        for t in timed.values():
            if t.error:
                print(f"  {t.name}: {t.error}", file=sys.stderr)
        both = ar.output is not None and ort_.output is not None
        diff = float(np.abs(ar.output - ort_.output).max()) if both else float("nan")
        lo, hi = ar.spread_ms
        olo, ohi = ort_.spread_ms
        plo, phi = pt.spread_ms
        print(f"{model:<5} AutoRelay {ar.median_ms:8.3f} [{lo:.3f}-{hi:.3f}]  "
              f"ONNX Runtime {ort_.median_ms:8.3f} [{olo:.3f}-{ohi:.3f}]  "
              f"PyTorch {pt.median_ms:8.3f} [{plo:.3f}-{phi:.3f}]  "
              f"AR/ORT {ar.median_ms / ort_.median_ms:5.2f}  AR/PyTorch {ar.median_ms / pt.median_ms:5.2f}  "
              f"max |AR - ORT| {diff:.2e}")


if __name__ == "__main__":
    main()
