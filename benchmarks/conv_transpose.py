"""What running a transposed convolution as per-phase convolutions gains (`ConvTransposePhases`), on
the zoo's DCGAN generator layers and on the whole model, against the gather compute it replaces
and against PyTorch.

    python benchmarks/conv_transpose.py [--threads 2] [--rounds 10] [--block-s 0.25]

Each build runs in its own process, timed in alternating blocks (`reproduce.peers.time_isolated`):
AutoRelay with the phases and with the gather compute (the pipeline without the pass), each in
`default` (NCHW) and in the blocked pipeline of the host's vector width, and PyTorch's
`conv_transpose2d` (layers) or the same generator in PyTorch (the model: the zoo's weights, eval
mode). Outputs are checked against the first build's first. Reported: median ms and the 10th-90th
percentile of the block medians; default schedules throughout (no tuning log).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (input NCHW, kernel IOHW) of the DCGAN generator's transposed convolutions: stride 2, padding 1
LAYERS = [((1, 512, 4, 4), (512, 256, 4, 4)), ((1, 256, 8, 8), (256, 128, 4, 4)),
          ((1, 128, 16, 16), (128, 64, 4, 4)), ((1, 64, 32, 32), (64, 3, 4, 4))]


def _pipeline(name: str, phases: bool) -> Any:
    from autorelay.transform import Pipeline, pipeline
    from autorelay.transform.conv_transpose_phases import ConvTransposePhases

    passes = pipeline(name).passes
    return Pipeline(passes if phases else [p for p in passes if not isinstance(p, ConvTransposePhases)])


def _layer(shapes: tuple) -> tuple[Any, dict, list[np.ndarray]]:
    import autorelay

    xs, ws = shapes
    rng = np.random.default_rng(0)
    mod = autorelay.parse(f"""#[version = "0.0.5"]
def @main(%x: Tensor[{xs}, float32], %w: Tensor[{ws}, float32]) {{
  nn.conv2d_transpose(%x, %w, strides=[2, 2], padding=[1, 1], channels={ws[1]}, kernel_size=[4, 4],
                      kernel_layout="IOHW")
}}""")
    weight = (rng.standard_normal(ws) / np.sqrt(ws[0] * 16)).astype("float32")
    return mod, {"w": weight}, [rng.standard_normal(xs).astype("float32")]


def autorelay_build(unit: str, pipeline: str, phases: bool, threads: int) -> tuple[Any, np.ndarray]:
    """One AutoRelay build, in its own process (a factory of `time_isolated`)."""
    import autorelay
    from reproduce.baselines import zoo_model

    if unit == "dcgan":
        mod, params, named = zoo_model("dcgan", {})
        inputs = [named[p.name_hint] for p in mod["main"].params if p.name_hint in named]
    else:
        mod, params, inputs = _layer(LAYERS[int(unit)])
    exe = autorelay.build(mod, params=params, threads=threads, pipeline=_pipeline(pipeline, phases))
    return (lambda: exe(*inputs)), np.asarray(exe(*inputs))


def torch_build(unit: str, threads: int) -> tuple[Any, np.ndarray]:
    """PyTorch eager on the same unit: the layer's `conv_transpose2d`, or the generator with the
    zoo's weights (`reproduce.baselines.make_torch`)."""
    import torch

    from reproduce.baselines import make_torch

    if unit == "dcgan":
        return make_torch("dcgan", {}, threads)
    torch.set_num_threads(threads)
    _, params, arrays = _layer(LAYERS[int(unit)])
    weight, x = torch.from_numpy(params["w"]), torch.from_numpy(arrays[0])

    def run() -> Any:
        with torch.no_grad():
            return torch.nn.functional.conv_transpose2d(x, weight, stride=2, padding=1)

    return run, run().numpy()


def main() -> None:
    from autorelay.codegen import resolve_target
    from reproduce.peers import time_isolated

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block-s", type=float, default=0.25)
    ap.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True,
                    help="time PyTorch too (default: yes)")
    args = ap.parse_args()
    blocked = "nchwc16" if resolve_target("llvm").vector_lanes() >= 16 else "nchwc"
    forms = [(p, ph) for p in ("default", blocked) for ph in (False, True)]
    heads = [f"{p} {'phases' if ph else 'gather'}" for p, ph in forms]
    print(f"{args.threads} threads, default schedules; median ms [p10-p90 of block medians]")
    print(f"| unit | {' | '.join(heads)} | torch | phases / gather ({blocked}) |")
    print("|---" * (len(forms) + 3) + "|")
    for unit in [*map(str, range(len(LAYERS))), "dcgan"]:
        peers = {f"{p} {ph}": (autorelay_build, (unit, p, ph, args.threads)) for p, ph in forms}
        if args.torch:
            peers["torch"] = (torch_build, (unit, args.threads))
        timed = time_isolated(peers, rounds=args.rounds, block_s=args.block_s)
        errors = {k: t.error for k, t in timed.items() if t.error}
        if errors:
            raise RuntimeError(f"{unit}: {errors}")
        want = timed[f"default {False}"].output
        scale = float(np.abs(want).max())
        for k, t in timed.items():
            if not np.allclose(t.output, want, rtol=1e-3, atol=1e-4 * scale):
                raise AssertionError(f"{unit}: {k} differs from the gather build")
        cells = [_cell(timed, f"{p} {ph}") for p, ph in forms]
        name = "DCGAN" if unit == "dcgan" else f"{LAYERS[int(unit)][0]} -> {LAYERS[int(unit)][1][1]} ch"
        gain = timed[f"{blocked} False"].median_ms / timed[f"{blocked} True"].median_ms
        print(f"| {name} | {' | '.join(cells)} | {_cell(timed, 'torch')} | {gain:.2f}x |")


def _cell(timed: dict[str, Any], key: str) -> str:
    if key not in timed:
        return "-"
    lo, hi = timed[key].spread_ms
    return f"{timed[key].median_ms:.3f} [{lo:.3f}-{hi:.3f}]"

if __name__ == "__main__":
    main()
