"""How fast is the tuning log at the sizes the issue names?

    python benchmarks/tuning_db_bench.py [--db URL] [-n 100000]

Writes N measurements as JSON lines (two layouts: spread over 100 workloads, and all on one workload,
the worst case for `best()`), times `import_jsonl` of each into a fresh log, then times `db.best()`
(median of repeated calls, k=1 and k=10), `db.record()` and `export_jsonl`. One run, figures printed.
Default database: a temporary SQLite file; `--db` takes a PostgreSQL URL (its tables are dropped first).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tuning_db
from tuning_db import schema

TARGET = "llvm -mcpu=skylake-avx512"


def write_log(path: Path, n: int, workloads: int, seed: int) -> None:
    rng = random.Random(seed)
    per_config = 5
    with path.open("w") as f:
        for i in range(n):
            w = i % workloads
            cfg = (i // workloads) // per_config
            shapes = [[1, 64, 8 + w, 8 + w], [64, 64, 3, 3]]
            wl = {"family": "conv2d", "shapes": shapes, "dtypes": ["float32"] * 2}
            costs = [rng.uniform(1e-4, 1e-2) for _ in range(3)]
            row = {"uid": uuid.UUID(int=rng.getrandbits(128)).hex, "workload_key": f"wl{w}", "target": TARGET,
                   "config": {"tile": [cfg % 64, cfg // 64], "unroll": cfg % 3}, "costs": costs,
                   "workload": wl, "recorded_at": 1.7e9 + i}
            f.write(json.dumps(row) + "\n")


class Timing:
    """Median wall time and mean process CPU time of repeated calls: on a shared machine the wall
    time includes waiting for a core, the CPU time does not."""

    def __init__(self, fn, repeat: int) -> None:  # type: ignore[no-untyped-def]
        walls = []
        c0 = time.process_time()
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - t0)
        self.wall = statistics.median(walls)
        self.cpu = (time.process_time() - c0) / repeat

    def __str__(self) -> str:
        return f"{self.wall * 1e3:.2f} ms (CPU {self.cpu * 1e3:.2f} ms)"


def fresh(url: str | None, tmp: Path, name: str) -> tuning_db.TuningDB:
    if url is None:
        return tuning_db.open(tmp / f"{name}.sqlite")
    db = tuning_db.open(url)
    schema.METADATA.drop_all(db.engine)
    db.close()
    return tuning_db.open(url)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="PostgreSQL URL (default: a temporary SQLite file)")
    ap.add_argument("-n", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"backend: {args.db or 'SQLite file'}; process CPU time is printed beside wall time")
        for label, workloads in (("100 workloads", 100), ("1 workload", 1)):
            log = tmp / f"{workloads}.jsonl"
            write_log(log, args.n, workloads, seed=workloads)
            db = fresh(args.db, tmp, f"w{workloads}")
            t0, c0 = time.perf_counter(), time.process_time()
            report = db.import_jsonl(log)
            t_import, c_import = time.perf_counter() - t0, time.process_time() - c0
            assert report.imported == args.n, report.summary()
            key = "wl0"
            b1 = Timing(lambda db=db, key=key: db.best(key, TARGET, k=1), 200)
            b10 = Timing(lambda db=db, key=key: db.best(key, TARGET, k=10), 200)
            print(f"[{label}] import {args.n} lines: {t_import:.2f} s (CPU {c_import:.2f} s); "
                  f"best k=1: {b1}, k=10: {b10} "
                  f"({db.stats()['measurements']} measurements in the log)")
            if workloads == 100:
                src = db.schedule_source(TARGET)
                shapes = [[1, 64, 300, 300], [64, 64, 3, 3]]
                wl = {"family": "conv2d", "shapes": shapes, "dtypes": ["float32"] * 2}
                t_tr = Timing(lambda src=src, wl=wl: src.lookup("unseen", TARGET, workload=wl), 20)
                assert src.last_result.kind == "transferred"
                i = iter(range(10**9))
                t_rec = Timing(lambda db=db, i=i: db.record("wl0", TARGET, {"new": next(i)}, [1e-3]), 200)
                t0, c0 = time.perf_counter(), time.process_time()
                n = db.export_jsonl(tmp / "export.jsonl")
                t_exp, c_exp = time.perf_counter() - t0, time.process_time() - c0
                print(f"[{label}] transferred lookup: {t_tr}; record(): {t_rec}; "
                      f"export {n} lines: {t_exp:.2f} s (CPU {c_exp:.2f} s)")
            db.close()


if __name__ == "__main__":
    main()
