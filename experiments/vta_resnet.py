"""ResNet-18 (int8, batch 1) split between this CPU and the simulated accelerator, end to end.

1. Quantizes the zoo's ResNet-18 for the accelerator (`scheme="vta"`), builds it for the CPU alone
   (`llvm`) and for `vta` (offloadable layers simulated, the rest on the CPU), and checks that the
   two give identical outputs on `--inputs` random images.
2. Per offloaded layer: the CPU int8 kernel's time (profiled), the accelerator's simulated cycles
   and GEMM utilisation with default knobs and with the log's tuned knobs (`--db`, from
   `autorelay tune --model resnet-18 --target vta --db LOG`).
3. Totals: the offloaded part on the accelerator at the clock vs the same layers on the CPU, and
   the CPU-side remainder (stem, pooling, residual adds, head, the host's re-layouts), to show where
   the CPU becomes the bottleneck; the simulator's speed.

    python experiments/vta_resnet.py [--db LOG] [--inputs 20] [--threads 2] [--out experiments/results]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cycle_model_speed(layers: list) -> float:
    """Instructions per second of `simulate(..., functional=False)` over every offloaded layer."""
    from autorelay.vta import simulate

    t0, n = time.perf_counter(), 0
    for layer in layers:
        n += simulate(layer.program.insns, layer.program.dram, layer.config, functional=False).instructions
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="tuning log with `--target vta` results (and CPU schedules)")
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="folder for vta_resnet18.md and vta_resnet18.png")
    ap.add_argument("--pipeline", default=None,
                    help="pass pipeline of the CPU parts (default: nchwc16 where a vector holds 16 floats, "
                         "else nchwc: int8 convolutions blocked for the dot-product instructions)")
    args = ap.parse_args()

    import autorelay
    import tuning_db
    from autorelay.codegen import resolve_target
    from autorelay.transform.quantize import calibrate, quantize_model
    from autorelay.vta import VTAConfig
    from autorelay.vta.tasks import vta_target
    from search.models import load_model
    from search.quant_data import random_batches

    model = load_model("resnet-18")
    data = random_batches(model, 4, seed=0)
    cal = calibrate(model.mod, model.params, data.batches, method="max", progress=False)
    qmod, qparams = quantize_model(model.mod, model.params, cal, scheme="vta")
    hw = VTAConfig()
    host = resolve_target("llvm", args.threads)
    cpu_src = dev_src = None
    db = None
    if args.db:
        db = tuning_db.open(args.db)
        cpu_src, dev_src = db.schedule_source(str(host)), db.schedule_source(str(vta_target(hw)))
    pipe = args.pipeline or ("nchwc16" if host.vector_lanes() >= 16 else "nchwc")
    common = {"params": qparams, "schedules": cpu_src, "threads": args.threads, "pipeline": pipe}
    cpu = autorelay.build(qmod, "llvm", **common)
    vta_default = autorelay.build(qmod, "vta", **common)
    builds = {"default": vta_default}
    if dev_src is not None:
        builds["tuned"] = autorelay.build(qmod, "vta", device_schedules=dev_src, **common)

    rng = np.random.default_rng(1)
    shape = model.inputs[next(iter(model.inputs))].shape
    exact, t_sim, insns = 0, 0.0, 0
    for _ in range(args.inputs):
        x = rng.standard_normal(shape).astype("float32")
        want = cpu(x)
        t0 = time.perf_counter()
        got = builds["default"](x)
        t_sim += time.perf_counter() - t0
        insns += sum(layer.last.instructions for layer in builds["default"].vta_layers)
        exact += int(np.array_equal(got, want))
    print(vta_default.partition)
    print(f"outputs identical to the CPU int8 path: {exact} of {args.inputs} inputs")

    x = rng.standard_normal(shape).astype("float32")
    cpu_report = cpu.profile(x, repeat=20)
    cpu_total = cpu_report.total_seconds
    sims = {}
    for name, exe in builds.items():
        exe(x)
        sims[name] = [(layer.name, layer.last) for layer in exe.vta_layers]
    vta_default.profile(x, repeat=3)
    rest = sum(r.seconds for r in vta_default.report.rows if r.kind != "external" and r.seconds)
    # the offloaded convolutions' kernels in the CPU-only build: its conv kernels whose workload the
    # vta build does not also run on the CPU (the stem and the last conv stay there)
    kept = {r.workload_key for r in vta_default.report.rows if r.kind == "kernel"}
    offloaded_cpu = sum(r.seconds or 0.0 for r in cpu_report.rows
                        if r.kind == "kernel" and "conv2d" in r.name and r.workload_key not in kept)
    clock = hw.clock_mhz * 1e6
    tuned = "tuned" in sims
    lines = [f"ResNet-18 int8 (vta scheme), batch 1, CPU {host.cpu} {args.threads} threads (pipeline "
             f"{pipe}), accelerator "
             f"at {hw.clock_mhz:g} MHz; outputs identical to the CPU int8 path on {exact} of {args.inputs} "
             "inputs", "",
             "| # | layer | default cycles | util | " + ("tuned cycles | util | speedup |" if tuned else ""),
             "|---|---|---:|---:|" + ("---:|---:|---:|" if tuned else "")]
    tot = {"default": 0, "tuned": 0}
    for j, (name, d) in enumerate(sims["default"]):
        tot["default"] += d.cycles
        row = f"| {j} | {name} | {d.cycles} | {d.utilization:.2f} |"
        if tuned:
            t = sims["tuned"][j][1]
            tot["tuned"] += t.cycles
            row += f" {t.cycles} | {t.utilization:.2f} | {d.cycles / t.cycles:.2f}x |"
        lines.append(row)
    util = {k: sum(r.gemm_cycles for _, r in rows) / max(1, tot[k]) for k, rows in sims.items()}
    acc = {k: tot[k] / clock for k in ("default", "tuned") if tot[k]}
    lines += ["", f"- CPU-only int8 build: {cpu_total * 1e3:.3f} ms per inference (profiled, default "
              "schedules unless the log has tuned ones)",
              "- vta build, CPU side (stem, last conv, pools, residual adds, head, quantize, layout "
              f"transforms around the offloaded layers): {rest * 1e3:.3f} ms",
              f"- the offloaded convolutions' kernels in the CPU-only build: {offloaded_cpu * 1e3:.3f} ms",
              *[f"- the offloaded layers on the accelerator, {k} knobs: {v * 1e3:.3f} ms simulated, GEMM "
                f"utilisation {util[k]:.2f} ({offloaded_cpu / v:.2f}x the CPU's speed on them)"
                for k, v in acc.items()],
              f"- bottleneck of a pipelined stream (CPU part and accelerator overlapping): "
              f"{'the CPU part' if rest > min(acc.values()) else 'the accelerator'}",
              f"- simulator speed, functional + cycle model: {insns / t_sim:.0f} instructions/s "
              f"({t_sim / args.inputs:.2f} s per inference, host re-layouts included)",
              f"- simulator speed, cycle model alone: {_cycle_model_speed(vta_default.vta_layers):.0f} "
              "instructions/s"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "vta_resnet18.md"), "w") as f:
            f.write(f"`python experiments/vta_resnet.py {' '.join(sys.argv[1:])}`\n\n{text}\n")
        _plot(sims, os.path.join(args.out, "vta_resnet18.png"))
    if db is not None:
        db.close()


def _plot(sims: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: plot skipped)")
        return
    fig, ax = plt.subplots(figsize=(8, 3.6))
    n = len(sims["default"])
    for k, (name, rows) in enumerate(sims.items()):
        ax.bar(np.arange(n) + 0.4 * k, [r.utilization for _, r in rows], width=0.4, label=f"{name} knobs")
    ax.set_xlabel("offloaded layer")
    ax.set_ylabel("GEMM-core utilisation")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
