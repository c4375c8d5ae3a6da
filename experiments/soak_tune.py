"""Soak: tune a model while randomly killing the tuner and its measurement workers, restarting it.

It keeps `--tuners` runs of `python -m search.cli tune` going on one SQLite log; at random
moments it picks one and does one of: SIGKILL / SIGTERM / SIGINT the tuner (then SIGKILLs what is
left of its process group, and restarts it), or SIGKILL one of its workers and lets it go on. A
run that finishes raises the budget for the next. Before every kill the ids of all logged
measurements are noted. At the end one uninterrupted run settles the picks, and the script checks:

* the log passes SQLite's integrity and foreign-key checks;
* nothing finished was lost: every id noted before a kill is still in the log;
* nothing was measured twice: no (workload, target, config) has two search measurements;
* no stale `autorelay-measure-*` scratch folder of a dead owner is left in the temp folder;
* compile uses the best configs: building the model consults the log and gets, for every tuned
  kernel, the log's pick (the winner of its latest interleaved re-measurement).

    python experiments/soak_tune.py --minutes 5 [--tuners 2] [--model nature-dqn] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _group(pgid: int) -> list[int]:
    """Live processes of a process group (the tuner, its forkserver and workers)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getpgid(int(d)) == pgid:
                    out.append(int(d))
            except ProcessLookupError:
                pass
    return out


def _ids(log: Path) -> set[int]:
    con = sqlite3.connect(f"file:{log}?mode=ro", uri=True, timeout=30)
    try:
        return {r[0] for r in con.execute("SELECT id FROM measurements")}
    except sqlite3.OperationalError:  # not created yet
        return set()
    finally:
        con.close()


def _tune(log: Path, model: str, trials: int, seed: int, out: Any) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "search.cli", "tune", "--model", model, "--trials", str(trials),
           "--tuner", "random", "--db", str(log), "--no-compare", "--threads", "1", "--timeout", "5",
           "--seed", str(seed), "--pipeline", "default"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _end(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the tuner, wait for it (SIGKILL after 30 s), then SIGKILL its group's rest."""
    os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in _group(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def soak(log: Path, model: str, minutes: float, seed: int, step: int, tuners: int,
         out: Any) -> dict[str, Any]:
    """Keep `tuners` tune runs going on the log, killing one of them (or one of its workers) at a
    random moment, restarting what ended, raising the budget whenever a run finishes."""
    rng = random.Random(seed)
    kills: Counter[str] = Counter()
    noted: set[int] = set()
    trials, runs, finished = step, 0, 0
    procs: dict[int, subprocess.Popen] = {}
    end = time.monotonic() + minutes * 60
    while time.monotonic() < end:
        for slot in range(tuners):
            if slot not in procs:
                procs[slot] = _tune(log, model, trials, runs, out)
                runs += 1
        time.sleep(rng.uniform(1.0, 12.0))  # a random moment in the runs' lives
        for slot, proc in list(procs.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del procs[slot]
            if rc == 0:
                finished += 1
                trials += step
            else:
                kills[f"exited with status {rc}"] += 1
        if not procs:
            continue
        noted |= _ids(log)
        slot = rng.choice(sorted(procs))
        proc = procs[slot]
        action = rng.choice(["tuner SIGKILL", "tuner SIGTERM", "tuner SIGINT", "worker SIGKILL"])
        if action == "worker SIGKILL":
            workers = [p for p in _group(proc.pid) if p != proc.pid]
            if workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rng.choice(workers), signal.SIGKILL)
                    kills[action] += 1
            continue
        _end(proc, {"tuner SIGKILL": signal.SIGKILL, "tuner SIGTERM": signal.SIGTERM,
                    "tuner SIGINT": signal.SIGINT}[action])
        kills[action] += 1
        del procs[slot]
    for proc in procs.values():  # time is up: the last runs are killed outright too
        noted |= _ids(log)
        _end(proc, signal.SIGKILL)
        kills["tuner SIGKILL"] += 1
    settle = _tune(log, model, trials, runs, out)
    settle_rc = settle.wait()
    return {"runs": runs + 1, "finished": finished, "kills": dict(kills), "noted": noted,
            "trials": trials, "settle_rc": settle_rc}


def check(log: Path, model_name: str, noted: set[int]) -> dict[str, Any]:
    import tuning_db
    from search.extract import BoundSource, extract_tasks
    from search.measure.scratch import PREFIX, _alive
    from search.models import build_model, load_model, tuning_target

    con = sqlite3.connect(log)
    integrity = con.execute("PRAGMA integrity_check").fetchall()
    fk = con.execute("PRAGMA foreign_key_check").fetchall()
    dup = con.execute(
        "SELECT workload_id, target_id, config_id, COUNT(*) FROM measurements WHERE runner_version IS NULL "
        "GROUP BY workload_id, target_id, config_id HAVING COUNT(*) > 1").fetchall()
    rows = con.execute("SELECT COUNT(*), COUNT(error_kind) FROM measurements WHERE runner_version IS NULL"
                       ).fetchone()
    errors = dict(con.execute("SELECT error_kind, COUNT(*) FROM measurements WHERE error_kind IS NOT NULL "
                              "GROUP BY error_kind").fetchall())
    remeasured = con.execute("SELECT COUNT(*) FROM measurements WHERE runner_version IS NOT NULL"
                             ).fetchone()[0]
    statuses = dict(con.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
    leases = con.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
    final_ids = {r[0] for r in con.execute("SELECT id FROM measurements")}
    con.close()
    tmp = tempfile.gettempdir()
    stale = [d for d in os.listdir(tmp) if d.startswith(PREFIX) and d[len(PREFIX):].split("-")[0].isdigit()
             and not _alive(int(d[len(PREFIX):].split("-")[0]))]

    model = load_model(model_name)
    target = tuning_target("llvm", 1)
    db = tuning_db.open(log)
    tasks = extract_tasks(model.mod, model.params, "llvm", pipeline="default", threads=1)
    asked: dict[str, Any] = {}

    class Recording(BoundSource):
        def lookup(self, workload_key, target=None, **kw):  # type: ignore[no-untyped-def]
            got = super().lookup(workload_key, target, **kw)
            asked[workload_key] = got
            return got

    build_model(model, Recording(db, target, tasks), "llvm", threads=1, pipeline="default")
    wrong = []
    for key, got in asked.items():
        pick = db.pick(key, target)
        if pick is not None and pick.config != got:
            wrong.append(key)
    tuned = sum(1 for key in asked if db.pick(key, target) is not None)
    db.close()
    return {"integrity": integrity, "foreign_key_violations": len(fk), "duplicates": len(dup),
            "search_rows": rows[0], "error_rows": rows[1], "errors": errors, "remeasured_rows": remeasured,
            "lost": len(noted - final_ids), "noted": len(noted), "runs": statuses, "leases_left": leases,
            "stale_scratch": len(stale), "kernels_looked_up": len(asked), "kernels_tuned": tuned,
            "kernels_not_using_pick": wrong}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--model", default="nature-dqn", help="a zoo model with large schedule spaces")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", type=int, default=12, help="trials added after each run that finishes")
    ap.add_argument("--tuners", type=int, default=1, help="tune runs sharing the log at once")
    ap.add_argument("--log", default=None, help="SQLite file (default: a fresh one in a temp folder)")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.step < 1 or args.tuners < 1:
        ap.error("--minutes must be > 0, --step and --tuners >= 1")
    folder = Path(tempfile.mkdtemp(prefix="autorelay-soak-"))
    log = Path(args.log) if args.log else folder / "soak.sqlite"
    t0 = time.monotonic()
    with open(folder / "tuner-output.txt", "w") as out:
        s = soak(log, args.model, args.minutes, args.seed, args.step, args.tuners, out)
    c = check(log, args.model, s["noted"])
    print(f"soak of {args.model}: {(time.monotonic() - t0) / 60:.1f} min, {args.tuners} tuner(s) at once, "
          f"{s['runs']} tuner runs "
          f"({s['finished']} finished before a kill), budget reached {s['trials']}; "
          f"settle run rc {s['settle_rc']}")
    print(f"kills: {s['kills']}")
    for k, v in c.items():
        print(f"{k}: {v}")
    print(f"log: {log}; tuner output: {folder / 'tuner-output.txt'}")
    ok = (c["integrity"] == [("ok",)] and not c["foreign_key_violations"] and not c["duplicates"]
          and not c["lost"] and not c["kernels_not_using_pick"] and s["settle_rc"] == 0
          and not c["stale_scratch"])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
