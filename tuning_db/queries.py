"""Read-side queries: best configs, history, resume checks, statistics, runs.

`best()` walks the `(workload_id, target_id, mean_cost)` index in cost order and stops as soon as it
has k distinct configs, so its cost depends on k, not on how many measurements the log holds.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Row, func, select

from . import schema
from .records import Record, RunInfo

m, c, w, t, r = schema.measurements, schema.configs, schema.workloads, schema.targets, schema.runs

RECORD_COLUMNS = (
    m.c.id,
    m.c.uid,
    w.c.key,
    t.c.name,
    c.c.config,
    m.c.costs,
    m.c.mean_cost,
    m.c.std_cost,
    m.c.error_kind,
    m.c.error_msg,
    m.c.run_id,
    c.c.space_index,
    m.c.builder_version,
    m.c.runner_version,
    m.c.compiler_version,
    m.c.recorded_at,
)
RECORD_FROM = (
    m.join(c, m.c.config_id == c.c.id).join(w, m.c.workload_id == w.c.id).join(t, m.c.target_id == t.c.id)
)


def to_record(row: Row[Any]) -> Record:
    return Record(
        id=row[0],
        uid=row[1],
        workload_key=row[2],
        target=row[3],
        config=json.loads(row[4]),
        costs=json.loads(row[5]),
        mean_cost=row[6],
        std_cost=row[7],
        error_kind=row[8],
        error=row[9],
        run=row[10],
        space_index=row[11],
        builder_version=row[12],
        runner_version=row[13],
        compiler_version=row[14],
        recorded_at=row[15],
    )


def ids_of(conn: Connection, workload_key: str, target: str) -> tuple[int | None, int | None]:
    wid = conn.scalar(select(w.c.id).where(w.c.key == workload_key))
    tid = conn.scalar(select(t.c.id).where(t.c.name == schema.canonical_target(target)))
    return wid, tid


def best(conn: Connection, workload_key: str, target: str, k: int = 1) -> list[Record]:
    """The k fastest distinct configs (each with its fastest successful measurement), fastest first."""
    if k < 1:
        return []
    wid, tid = ids_of(conn, workload_key, target)
    if wid is None or tid is None:
        return []
    chosen: dict[int, int] = {}  # config_id -> measurement id, in cost order
    limit = max(4 * k, 16)
    while True:
        rows = conn.execute(
            select(m.c.id, m.c.config_id)
            .where(m.c.workload_id == wid, m.c.target_id == tid, m.c.mean_cost.is_not(None))
            .order_by(m.c.mean_cost, m.c.id)
            .limit(limit)
        ).all()
        chosen.clear()
        for mid, cid in rows:
            if cid not in chosen:
                chosen[cid] = mid
                if len(chosen) == k:
                    break
        if len(chosen) == k or len(rows) < limit:
            break
        limit *= 4  # many repeats of the same few configs: look further down the index
    order = {mid: i for i, mid in enumerate(chosen.values())}
    rows = conn.execute(select(*RECORD_COLUMNS).select_from(RECORD_FROM).where(m.c.id.in_(list(order))))
    return sorted((to_record(row) for row in rows), key=lambda rec: order[rec.id])


def history(conn: Connection, workload_key: str, target: str) -> list[Record]:
    """Every measurement of a workload on a target (errors included), oldest first."""
    wid, tid = ids_of(conn, workload_key, target)
    if wid is None or tid is None:
        return []
    rows = conn.execute(
        select(*RECORD_COLUMNS)
        .select_from(RECORD_FROM)
        .where(m.c.workload_id == wid, m.c.target_id == tid)
        .order_by(m.c.recorded_at, m.c.id)
    )
    return [to_record(row) for row in rows]


INTERLEAVED = "interleaved-remeasure"  # runner_version of rows re-timed interleaved with their rivals
IN_PLACE = "in-place-remeasure"  # of rows timed in the model's build against the default (`search.in_place`)
RETIMED = (INTERLEAVED, IN_PLACE)  # re-timings of configs already measured: not search trials


def pick(conn: Connection, workload_key: str, target: str) -> Record | None:
    """The config to trust for a workload: the winner of its latest interleaved re-measurement,
    alone or in place (`latest_batch`: the fastest median among the configs timed in it), the fastest of those
    winners when alternative templates were re-measured separately; or — when it was never
    re-measured — its fastest measurement. A single fastest figure can be a lucky quiet moment
    on a shared machine; rivals timed in alternation under the same conditions cannot.

    An in-place batch (`search.in_place`) with no alone re-measurement after it is the verdict by
    itself: it timed the build's pick against its rivals in the model, and figures from another
    template's alone re-measurement, taken in another setting, must not overturn it (the build
    that was confirmed would then differ from the log's pick)."""
    wid, tid = ids_of(conn, workload_key, target)
    if wid is None or tid is None:
        return None
    rows = conn.execute(
        select(*RECORD_COLUMNS)
        .select_from(RECORD_FROM)
        .where(m.c.workload_id == wid, m.c.target_id == tid, m.c.runner_version.in_(RETIMED),
               m.c.mean_cost.is_not(None))
        .order_by(m.c.recorded_at, m.c.id)
    )
    retimed = [to_record(row) for row in rows]
    in_place = latest_batch([rec for rec in retimed if rec.runner_version == IN_PLACE])
    if in_place and retimed[-1].recorded_at <= in_place[-1].recorded_at:  # oldest first
        return min(in_place, key=_median)
    by_template: dict[Any, list[Record]] = {}
    for rec in retimed:
        by_template.setdefault(rec.config.get("template"), []).append(rec)
    if by_template:
        winners = [min(latest_batch(recs), key=_median) for recs in by_template.values()]
        return min(winners, key=_median)
    found = best(conn, workload_key, target, 1)
    return found[0] if found else None


# The rows of an interleaved re-measurement are logged with one recorded_at. Logs written before
# that was so hold them one after another, milliseconds apart, while the next re-measurement of
# the same workload comes after timing its candidates again, seconds later.
BATCH_GAP_S = 1.0


def latest_batch(rows: Sequence[Record]) -> list[Record]:
    """The rows of the latest re-measurement among `rows` (re-timed rows of one workload and
    template, oldest first): those sharing the last row's recorded_at; in an older log, where
    each row has its own, the last run of rows each logged within `BATCH_GAP_S` of the one
    before. Only configs timed together compare fairly: a config's figure from an earlier
    re-measurement, which it may have lost there, must not beat today's rivals timed in a slower
    moment of the machine."""
    if not rows:
        return []
    same = [r for r in rows if r.recorded_at == rows[-1].recorded_at]
    if len(same) > 1:
        return same
    start = len(rows) - 1
    while start > 0 and rows[start].recorded_at - rows[start - 1].recorded_at <= BATCH_GAP_S:
        start -= 1
    return list(rows[start:])


def _median(rec: Record) -> float:
    return statistics.median(rec.costs) if rec.costs else math.inf


def has_measured(conn: Connection, workload_key: str, target: str, config: dict[str, Any]) -> bool:
    """Whether this exact config was measured (successfully or not) for the workload on the target."""
    wid, tid = ids_of(conn, workload_key, target)
    if wid is None or tid is None:
        return False
    h = schema.config_hash(schema.canonical_json(dict(config)))
    cid = conn.scalar(select(c.c.id).where(c.c.workload_id == wid, c.c.config_hash == h))
    if cid is None:
        return False
    return conn.scalar(select(m.c.id).where(m.c.config_id == cid, m.c.target_id == tid).limit(1)) is not None


def stats(conn: Connection) -> dict[str, Any]:
    """Counts for the whole log plus one row per target."""

    def count(table) -> int:  # type: ignore[no-untyped-def]
        return int(conn.scalar(select(func.count()).select_from(table)) or 0)

    per_target = []
    q = (
        select(
            t.c.name,
            func.count(m.c.id),
            func.count(func.distinct(m.c.workload_id)),
            func.count(m.c.error_kind),
            func.min(m.c.recorded_at),
            func.max(m.c.recorded_at),
        )
        .select_from(t.outerjoin(m, m.c.target_id == t.c.id))
        .group_by(t.c.name)
        .order_by(t.c.name)
    )
    for name, n, nw, nerr, first, last in conn.execute(q):
        per_target.append(
            {
                "target": name,
                "measurements": int(n),
                "workloads": int(nw),
                "errors": int(nerr),
                "first": first,
                "last": last,
            }
        )
    return {
        "measurements": count(m),
        "workloads": count(w),
        "targets": count(t),
        "configs": count(c),
        "runs": count(r),
        "errors": int(conn.scalar(select(func.count()).where(m.c.error_kind.is_not(None))) or 0),
        "per_target": per_target,
    }


def runs(conn: Connection, status: str | None = None, ids: Iterable[int] | None = None) -> list[RunInfo]:
    counts = select(m.c.run_id, func.count().label("n")).group_by(m.c.run_id).subquery()
    q = select(r, func.coalesce(counts.c.n, 0)).select_from(r.outerjoin(counts, counts.c.run_id == r.c.id))
    if status is not None:
        q = q.where(r.c.status == status)
    if ids is not None:
        q = q.where(r.c.id.in_(list(ids)))
    out = []
    for row in conn.execute(q.order_by(r.c.id)):
        d = row._mapping
        out.append(
            RunInfo(
                id=d["id"],
                uid=d["uid"],
                model=d["model"],
                tuner=d["tuner"],
                trial_budget=d["trial_budget"],
                status=d["status"],
                host=d["host"],
                started_at=d["started_at"],
                finished_at=d["finished_at"],
                info=json.loads(d["info"]) if d["info"] else None,
                measurements=int(row[-1]),
            )
        )
    return out
