"""Claims on configs (leases): tuners sharing a log never measure a config twice. Both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import tuning_db
from tuning_db.leases import holder_name

T = "llvm -mcpu=x"
SEARCH_TESTS = Path(__file__).resolve().parents[1] / "search"
ROOT = Path(__file__).resolve().parents[2]


def test_a_claim_is_granted_once_until_measured_released_or_expired(db: tuning_db.TuningDB) -> None:
    a, b = holder_name(), holder_name()
    cfgs = [{"tile": 1}, {"tile": 2}, {"tile": 3}]
    assert db.claim("wk", T, cfgs, a).granted == [True, True, True]
    other = db.claim("wk", T, cfgs + [{"tile": 4}], b)
    assert other.granted == [False, False, False, True] and other.others_pending == 3
    db.record("wk", T, {"tile": 1}, [1e-3])  # measured: nobody may claim it again, a included
    db.release("wk", T, a, [{"tile": 1}, {"tile": 2}])
    assert db.claim("wk", T, cfgs, b).granted == [False, True, False]  # 1 measured, 3 still a's
    assert db.claim("wk", T, [{"tile": 3}], a, ttl_s=-1).granted == [True]  # a's lease, now expired
    assert db.claim("wk", T, [{"tile": 3}], b).granted == [True]
    assert db.claim("wk", T, [{"tile": 5}, {"tile": 5}], a).granted == [True, False]  # listed twice


def test_a_dead_local_holder_is_reclaimed_at_once(db: tuning_db.TuningDB) -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = holder_name().replace(f":{os.getpid()}:", f":{p.pid}:")
    assert db.claim("wk", T, [{"tile": 1}], dead, ttl_s=3600).granted == [True]
    assert db.claim("wk", T, [{"tile": 1}], holder_name()).granted == [True]


def _tuner(url: str, trials: int, seed: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SEARCH_TESTS)])}
    return subprocess.Popen([sys.executable, str(SEARCH_TESTS / "shared_tune_script.py"), url, str(trials),
                             str(seed)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_three_tuners_on_one_log_measure_nothing_twice_and_reach_the_budget(url: str) -> None:
    """Same tuner, same seed: without claims all three would measure the same configs."""
    batch = 2
    tuning_db.open(url).close()
    procs = [_tuner(url, 24, seed=7) for _ in range(3)]
    for p in procs:
        word, _, info = p.stdout.readline().partition(" ")
        assert word == "ready", info  # the event: every tuner has its log open
    task = json.loads(info)
    trials = task["trials"]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    with tuning_db.open(url) as db:
        rows = [r for r in db.history(task["key"], task["target"]) if r.runner_version is None]
    per_config = Counter(tuning_db.schema.canonical_json(r.config) for r in rows)
    measured = sum(int(o.split("measured=")[1].split()[0]) for o in outs)
    assert max(per_config.values()) == 1, per_config.most_common(3)  # 0 duplicate measurements
    assert measured == len(rows)  # every measurement taken was logged once
    assert trials <= len(per_config) <= trials + 3 * batch  # the union reaches the budget
