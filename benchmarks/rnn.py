"""Per-step latency of the recurrent zoo models through the VM, the AoT compiler and PyTorch eager.

    python benchmarks/rnn.py [--quick] [--threads 1 2] [--models lstm gru rnn char-rnn tree-lstm]

A thin caller of the `rnns` experiment (`reproduce/experiments/rnns.py`, where the method is
described): the same measurement for each thread count, printed, and not stored in a tuning log.
`autorelay reproduce rnns` runs it with the log, the stored rows and the figure.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reproduce.experiment import Context, Row, Unit
from reproduce.experiments import rnns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short sequences and few rounds")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=list(rnns.MODELS), choices=rnns.MODELS)
    args = ap.parse_args()
    for threads in args.threads:
        ctx = Context(quick=args.quick, threads=threads, db_url="", db=None, out_dir=Path("."))
        rows = [Row(m, rnns.measure(ctx, Unit(m, {"model": m})), "", "", None) for m in args.models]
        print(f"\n{threads} thread(s)")
        print(rnns.report(ctx, rows).markdown)


if __name__ == "__main__":
    main()
