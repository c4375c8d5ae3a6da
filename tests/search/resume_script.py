"""`python resume_script.py DB_URL TRIALS`: tune a tiny dense kernel into the log (run by the
kill -9 / resume test as a separate process, exactly as a user would rerun a command)."""

from __future__ import annotations

import sys

from search_helpers import dense_task

import tuning_db
from search.measure import Measurer, TimingSettings
from search.tune import tune_task
from search.tuners import make_tuner

if __name__ == "__main__":
    url, trials = sys.argv[1], int(sys.argv[2])
    task = dense_task(16, 24, 32)
    db = tuning_db.open(url)
    settings = TimingSettings(number=1, repeat=2, min_repeat_ms=10.0, warmup=1, timeout=10.0)
    with Measurer(build_workers=1, settings=settings) as m:
        res = tune_task(task, make_tuner("random", task, seed=3), trials, db, m, batch=2, top_k=1, rounds=2)
    print(f"new={res.trials} resumed={res.resumed}", flush=True)
