"""ResNet-18 (int8, batch 1) split between this CPU and the simulated accelerator, end to end.

`reproduce.vta_measure.measure_resnet18`: quantizes the zoo's ResNet-18 for the accelerator, builds
it for the CPU alone and for `vta`, checks that both give identical outputs on `--inputs` random
images, and sets the offloaded layers' simulated time at the clock beside the CPU's time in the same
layers. With `--db` the log's tuned schedules (CPU and `--target vta`) are used, and the run is
repeated with the default knobs for comparison. `autorelay reproduce vta` stores the same
measurement in the tuning log and writes the report.

    python experiments/vta_resnet.py [--db LOG] [--image 224] [--inputs 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reproduce.vta_measure import measure_resnet18


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="tuning log with `--target vta` results (and CPU schedules)")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--inputs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import tuning_db

    runs = {"default": None}
    if args.db:
        runs["log"] = tuning_db.open(args.db)
    for name, db in runs.items():
        r = measure_resnet18(image=args.image, inputs=args.inputs, threads=args.threads, db=db)
        print(f"{name} knobs ({', '.join(r['knob_sources'])}): bit-exact on {r['exact']} of {r['inputs']} "
              f"inputs; {r['offloaded']} of {r['int8_layers']} int8 layers offloaded")
        for layer in r["layers"]:
            print(f"  {layer['name']:<32} {layer['cycles']:>9} cycles  util {layer['util']:.2f}  "
                  f"{layer['knobs']}")
        print(f"  accelerator {r['acc_ms']:.3f} ms at {r['clock_mhz']:g} MHz (GEMM utilisation "
              f"{r['acc_util']:.2f}); CPU on the same layers {r['cpu_offloaded_ms']:.3f} ms "
              f"({r['cpu_offloaded_ms'] / r['acc_ms']:.2f}x); CPU left in the vta build "
              f"{r['vta_cpu_rest_ms']:.3f} ms; CPU-only build {r['cpu_total_ms']:.3f} ms; simulator "
              f"{r['sim_s_per_inference']:.2f} s per inference")
        if db is not None:
            db.close()


if __name__ == "__main__":
    main()
