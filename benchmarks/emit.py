"""Compile-time benchmark: how fast kernels are scheduled and emitted as LLVM IR, and compiled.

    python benchmarks/emit.py [--random 2] [--digests before.json]

Every tuning candidate and every kernel of a model build goes through `autorelay.kernel.emit_kernel`
(schedule, lower, simplify, emit LLVM IR: Python) and then LLVM (`load_kernel`). This times both over
a fixed set of kernels: each of ResNet-18's tasks under the `nchwc16` and `default` pipelines and
under a plan of blocked Winograd F(4x4) layers, and AutoTVM's C1-C12 convolutions (`conv2d_nchw`),
each at its template default and `--random` configs drawn with a fixed seed (AVX-512 and AVX2
targets both, so either vector width's code is timed). A kernel two groups share is emitted once,
in the first; each group's times are printed.

It also prints one digest of all the emitted IR: a change meant to speed emission up without
changing the code it emits must leave the digest as it was. `--digests FILE` keeps every kernel's
digest in FILE (written on the first run, compared on later ones: the kernels that differ are named).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorelay.codegen import resolve_target
from autorelay.kernel import emit_kernel, load_kernel
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from reproduce.conv_workloads import WORKLOADS, conv_task
from search.models import load_model, prepare_model
from search.pipeline_choice import prepare_plan


def kernel_set(randoms: int) -> list[tuple[str, str, object, object]]:
    """(group, name, task, config) for every kernel the benchmark emits, in a fixed order, each
    (task, config) once."""
    out: list[tuple[str, str, object, object]] = []
    seen: set[tuple] = set()

    def add(group: str, name: str, task, seed: int) -> None:
        rng = random.Random(seed)
        configs = [task.default, *(task.config(rng.randrange(len(task.space))) for _ in range(randoms))]
        for config in configs:
            key = (task.key, task.template, str(task.target), json.dumps(config.as_dict(), sort_keys=True))
            if key not in seen:
                seen.add(key)
                out.append((group, name, task, config))

    for cpu in ("skylake-avx512", "znver3"):
        target = resolve_target(f"llvm -mcpu={cpu}", 2)
        for w in WORKLOADS:
            add("C1-C12", f"{w.name} {cpu}", conv_task(w, target), int(w.name[1:]))
    target = resolve_target("llvm", 2)
    model = load_model("resnet-18", image_size=56)
    for pipeline in ("nchwc16", "default"):
        for task in prepare_model(model, target, threads=2, pipeline=pipeline).extraction.tasks:
            add(f"resnet-18 {pipeline}", f"{pipeline} {task.name}", task, 7)
    winograd = LayoutPlan.uniform(conv_layers(model.mod), 8, winograd=4)
    for task in prepare_plan(model, target, 2, winograd).extraction.tasks:
        add("resnet-18 winograd F(4x4)", f"winograd {task.name}", task, 7)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random", type=int, default=2, help="random configs per task besides the default")
    ap.add_argument("--digests", type=Path, default=None, help="per-kernel IR digests: write, or compare")
    args = ap.parse_args()
    kernels = kernel_set(args.random)
    digests: dict[str, str] = {}
    groups: dict[str, list[float]] = {}  # per group: kernels, emit s, LLVM s
    with tempfile.TemporaryDirectory() as cache:
        for group, name, task, config in kernels:
            row = groups.setdefault(group, [0, 0.0, 0.0])
            row[0] += 1
            key = f"{name} {task.template} {config.as_dict()}"
            t0 = time.perf_counter()
            try:
                code = emit_kernel(task.cdef, config, task.target)
            except Exception as e:  # an illegal random config: its error is part of the digest
                digests[key] = f"error {type(e).__name__}"
                row[1] += time.perf_counter() - t0
                continue
            t1 = time.perf_counter()
            load_kernel(code, cache)
            row[1] += t1 - t0
            row[2] += time.perf_counter() - t1
            digests[key] = hashlib.sha256(code.code.text.encode()).hexdigest()
    for group, (n, e, llvm) in groups.items():
        print(f"  {group:28s} {n:4d} kernels: emit {e:6.1f} s, LLVM {llvm:6.1f} s")
    total = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16]
    n, emit_s, llvm_s = len(kernels), sum(r[1] for r in groups.values()), sum(r[2] for r in groups.values())
    print(f"{n} kernels: emit {emit_s:.1f} s ({n / emit_s:.1f} kernels/s), LLVM {llvm_s:.1f} s; "
          f"IR digest {total}")
    if args.digests is None:
        return
    if not args.digests.exists():
        args.digests.write_text(json.dumps(digests, indent=0, sort_keys=True))
        print(f"wrote {len(digests)} digests to {args.digests}")
        return
    before = json.loads(args.digests.read_text())
    differ = sorted(k for k in digests if before.get(k) != digests[k])
    print(f"{len(differ)} of {len(digests)} kernels emit other IR than {args.digests}")
    for k in differ[:20]:
        print("  ", k)


if __name__ == "__main__":
    main()
