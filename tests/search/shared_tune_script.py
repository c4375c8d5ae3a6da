"""`python shared_tune_script.py DB_URL MAX_TRIALS SEED`: one of several tuners sharing a log, with
a budget of min(MAX_TRIALS, half the space). Prints "ready" and a JSON line (task key, target,
budget), waits for a line on stdin (so all start together), tunes a tiny dense kernel with a
synthetic measurer (each candidate takes a few ms, so the runs interleave), prints its figures."""

from __future__ import annotations

import json
import sys
import time

from search_helpers import SyntheticMeasurer, dense_task

import tuning_db
from search.tune import tune_task
from search.tuners import make_tuner


class SlowSynthetic(SyntheticMeasurer):
    def measure(self, task, inputs):  # type: ignore[no-untyped-def]
        time.sleep(0.005 * len(inputs))  # a measurement takes time: the runs overlap
        return super().measure(task, inputs)


if __name__ == "__main__":
    url, most, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    task = dense_task(16, 24, 32)
    trials = min(most, len(task.space) // 2)
    db = tuning_db.open(url)
    print("ready", json.dumps({"key": task.key, "target": str(task.target), "trials": trials}), flush=True)
    sys.stdin.readline()
    m = SlowSynthetic()
    res = tune_task(task, make_tuner("random", task, seed=seed), trials, db, m, batch=2, top_k=1, rounds=2)
    print(f"measured={len(m.measured)} new={res.trials}", flush=True)
