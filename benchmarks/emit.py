"""Compile-time benchmark: how fast kernels are scheduled and emitted as LLVM IR, and compiled.

    python benchmarks/emit.py [--random 2] [--digests before.json]

Every tuning candidate and every kernel of a model build goes through `autorelay.kernel.emit_kernel`
(schedule, lower, simplify, emit LLVM IR: Python) and then LLVM (`load_kernel`). This times both over
a fixed set of kernels: each of ResNet-18's tasks under the `nchwc16` and `default` pipelines and
AutoTVM's C1-C12 convolutions (`conv2d_nchw`), each at its template default and `--random` configs
drawn with a fixed seed (AVX-512 and AVX2 targets both, so either vector width's code is timed).

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
from reproduce.conv_workloads import WORKLOADS, conv_task
from search.models import load_model, prepare_model


def kernel_set(randoms: int) -> list[tuple[str, object, object]]:
    """(name, task, config) for every kernel the benchmark emits, in a fixed order."""
    out: list[tuple[str, object, object]] = []

    def add(name: str, task, seed: int) -> None:
        rng = random.Random(seed)
        out.append((name, task, task.default))
        out.extend((name, task, task.config(rng.randrange(len(task.space)))) for _ in range(randoms))

    for cpu in ("skylake-avx512", "znver3"):
        target = resolve_target(f"llvm -mcpu={cpu}", 2)
        for w in WORKLOADS:
            add(f"{w.name} {cpu}", conv_task(w, target), int(w.name[1:]))
    target = resolve_target("llvm", 2)
    model = load_model("resnet-18", image_size=56)
    for pipeline in ("nchwc16", "default"):
        for task in prepare_model(model, target, threads=2, pipeline=pipeline).extraction.tasks:
            add(f"{pipeline} {task.name}", task, 7)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random", type=int, default=2, help="random configs per task besides the default")
    ap.add_argument("--digests", type=Path, default=None, help="per-kernel IR digests: write, or compare")
    args = ap.parse_args()
    kernels = kernel_set(args.random)
    digests: dict[str, str] = {}
    emit_s = llvm_s = 0.0
    with tempfile.TemporaryDirectory() as cache:
        for name, task, config in kernels:
            key = f"{name} {task.template} {config.as_dict()}"
            t0 = time.perf_counter()
            try:
                code = emit_kernel(task.cdef, config, task.target)
            except Exception as e:  # an illegal random config: its error is part of the digest
                digests[key] = f"error {type(e).__name__}"
                emit_s += time.perf_counter() - t0
                continue
            t1 = time.perf_counter()
            load_kernel(code, cache)
            emit_s, llvm_s = emit_s + t1 - t0, llvm_s + time.perf_counter() - t1
            digests[key] = hashlib.sha256(code.code.text.encode()).hexdigest()
    total = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16]
    n = len(kernels)
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
