"""Tuners that share one log cooperate: claim before measuring, count each other's results.

Two `tune` runs of one model on one log used to measure the same configs twice. Now each task's
tuning loop holds a `SharedLog`: before a batch is measured its configs are claimed in the log
(`TuningDB.claim`, a lease with an expiry); a config another run has measured or is measuring is
left out of the batch and marked visited in the tuner, so it is not proposed again; and before
each batch the loop reads the others' new results and feeds them to its tuner, so the budget is
one budget for all runs together. A claimer killed mid-batch leaves leases that expire (or, on
this host, are reclaimed as soon as its process is gone); then its configs become proposable again.
"""

from __future__ import annotations

import time
from typing import Any

from search.measure.result import ErrorKind, MeasureInput, MeasureResult
from search.task import Task
from search.tuners.base import Tuner
from tuning_db.leases import config_key, holder_name

POLL_S = 0.25  # how often a run whose remaining budget others are measuring looks for their results


def lease_seconds(measurer: Any, batch: int) -> float:
    """How long a claim lives: far longer than measuring one batch can take (each candidate may
    run into its timeout), so a live claimer never loses a lease it is using."""
    settings = getattr(measurer, "settings", None)
    timeout = float(getattr(settings, "timeout", 10.0))
    return 120.0 + batch * (3 * timeout + 60.0)


class SharedLog:
    """One task's view of the log it shares with other tuners (see the module docstring)."""

    def __init__(self, db: Any, task: Task, ttl_s: float, holder: str | None = None) -> None:
        self.db, self.task, self.ttl_s = db, task, ttl_s
        self.holder = holder or holder_name()
        self.seen: set[int] = set()  # measurement ids already fed to the tuner (or our own)
        self.borrowed: dict[int, str] = {}  # index -> config hash: visited only because another claims it
        self.others_pending = 0
        self.others_new = 0  # configs measured by other runs since this view was opened

    def sync(self, tuner: Tuner) -> int:
        """Feed the tuner every result logged since the last sync (by anyone); returns how many
        configs it had not counted yet (they count toward the shared budget)."""
        fresh_idx, fresh_res, counted = [], [], set()
        for rec in self.db.history(self.task.key, str(self.task.target)):
            if rec.id in self.seen:
                continue
            self.seen.add(rec.id)
            if rec.runner_version is not None:  # a re-timing (interleaved): not a trial
                continue
            try:
                i = self.task.index(self.task.config_from_json(rec.config))
            except (KeyError, TypeError, AttributeError, IndexError):
                continue
            if i < 0:
                continue
            if i not in tuner.visited or i in self.borrowed:
                counted.add(i)
            self.borrowed.pop(i, None)
            fresh_idx.append(i)
            ok = rec.error_kind is None and rec.costs
            why = rec.error or "logged failure"
            fresh_res.append(MeasureResult(tuple(rec.costs)) if ok
                             else MeasureResult.failed(ErrorKind.RUNTIME_CRASH, why))
        if fresh_idx:
            tuner.update(fresh_idx, fresh_res)
        self.others_new += len(counted)
        return len(counted)

    def mine(self, ids: list[int]) -> None:
        """Our own rows: never to be fed back or counted again."""
        self.seen.update(ids)

    def claim(self, tuner: Tuner, inputs: list[MeasureInput]) -> list[MeasureInput]:
        """The inputs this run may measure now; the rest are marked visited (borrowed) in the tuner."""
        answer = self.db.claim(self.task.key, str(self.task.target), [i.config.to_json() for i in inputs],
                               self.holder, self.ttl_s)
        self._note(tuner, answer.others)
        mine = []
        for inp, ok in zip(inputs, answer.granted):
            if ok:
                mine.append(inp)
            elif inp.index not in tuner.visited:
                tuner.visited.add(inp.index)
                self.borrowed[inp.index] = config_key(inp.config.to_json())
        return mine

    def wait(self, tuner: Tuner) -> int:
        """Others are measuring what is left of the budget: wait a moment, then sync; returns the
        configs newly counted."""
        time.sleep(POLL_S)
        answer = self.db.claim(self.task.key, str(self.task.target), [], self.holder, self.ttl_s)
        self._note(tuner, answer.others)
        return self.sync(tuner)

    def _note(self, tuner: Tuner, others: frozenset[str]) -> None:
        """Refresh the count of others' live claims; a borrowed config whose claim is gone without
        a result (its claimer died) becomes proposable again."""
        self.others_pending = len(others)
        for i, h in list(self.borrowed.items()):
            if h not in others:
                del self.borrowed[i]
                tuner.visited.discard(i)

    def release(self, inputs: list[MeasureInput] | None = None) -> None:
        configs = None if inputs is None else [i.config.to_json() for i in inputs]
        self.db.release(self.task.key, str(self.task.target), self.holder, configs)
