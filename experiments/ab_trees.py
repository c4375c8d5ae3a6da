"""Time one model built from one tuning log by two checkouts of AutoRelay (an A/B of a runtime or
code-generation change that leaves the log's schedules as they are).

    git worktree add /tmp/before <rev>
    python experiments/ab_trees.py --model mobilenet-v2 --db sqlite:///mb2.db \
        --tree before=/tmp/before --tree after=. --rounds 5 --calls 200

Each round starts one process per checkout, in turn (the order alternating each round): it builds
the model as `autorelay compile` does (`--pipeline`, default auto: the log's choice), warms it up,
and prints the median of `--calls` calls. No two builds ever share the cores. The summary gives,
per checkout, the median of its process medians and their range, and the ratio of the first
checkout's median to each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_CHILD = """
import statistics, sys, time
from search.models import compile_model, load_model, open_db, run_inputs
model_name, db_url, pipeline, calls, threads = sys.argv[1:6]
model = load_model(model_name)
db, _ = open_db(db_url)
exe = compile_model(model, db, "llvm", threads=int(threads), pipeline=pipeline).exe
args = run_inputs(exe, model)
for _ in range(20):
    exe(*args)
times = []
for _ in range(int(calls)):
    t0 = time.perf_counter()
    exe(*args)
    times.append(time.perf_counter() - t0)
print(statistics.median(times) * 1e3)
"""


def _tree(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"no such directory: {path}")
    return name, os.path.abspath(path)


def time_once(tree: str, args: argparse.Namespace) -> float:
    """One process of `tree`: the median milliseconds of its calls."""
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, "-c", _CHILD, args.model, args.db, args.pipeline, str(args.calls),
                          str(args.threads)], env=env, cwd=tree, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: the timing process failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--db", required=True, metavar="URL")
    p.add_argument("--tree", type=_tree, action="append", required=True, metavar="NAME=PATH")
    p.add_argument("--pipeline", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args(argv)
    if len(args.tree) < 2:
        p.error("give at least two --tree NAME=PATH")
    medians: dict[str, list[float]] = {name: [] for name, _ in args.tree}
    for r in range(args.rounds):
        order = args.tree if r % 2 == 0 else args.tree[::-1]
        for name, path in order:
            medians[name].append(time_once(path, args))
        line = ", ".join(f"{n} {medians[n][-1]:.3f} ms" for n, _ in args.tree)
        print(f"round {r + 1}: {line}", flush=True)
    first = statistics.median(medians[args.tree[0][0]])
    print(f"\n{args.model}, {args.threads} threads, {args.rounds} processes per checkout, "
          f"{args.calls} calls each (median of process medians [min-max]):")
    for name, _ in args.tree:
        m = statistics.median(medians[name])
        print(f"  {name:<12} {m:8.3f} ms [{min(medians[name]):.3f}-{max(medians[name]):.3f}]  "
              f"{args.tree[0][0]} / {name}: {first / m:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
