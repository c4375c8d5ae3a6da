"""How checked measurements get into the tables.

`ingest()` writes a batch in the caller's transaction, creating targets, workloads and configs on the
way with `INSERT ... ON CONFLICT DO NOTHING` so concurrent writers never duplicate them; a
measurement's `uid` is unique, which is what makes import and merge idempotent. `insert_one()` is the
few-round-trip path `db.record()` takes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from . import schema
from .engine import insert_ignore
from .records import Measurement


@dataclass(slots=True)
class IdCache:
    """Ids of targets and workloads this process has already resolved. Both are never deleted (prune
    removes only measurements and configs), so a cached id stays valid; `described` holds those whose
    row already has its fingerprint / JSON, which later records then need not fill in."""

    targets: dict[str, int] = field(default_factory=dict)
    workloads: dict[str, int] = field(default_factory=dict)
    described: set[str] = field(default_factory=set)

    def known_target(self, x: Measurement) -> bool:
        return x.target in self.targets and (x.fingerprint_json is None or "t:" + x.target in self.described)

    def known_workload(self, x: Measurement) -> bool:
        return x.workload_key in self.workloads and (
            x.workload_json is None or "w:" + x.workload_key in self.described
        )


def insert_one(conn: Connection, x: Measurement, cache: IdCache) -> int:
    """Write one fresh measurement (its uid was just generated) in few round trips; returns its id."""
    if not (cache.known_target(x) and cache.known_workload(x)):
        _resolve(conn, [x], cache)
    wid = cache.workloads[x.workload_key]
    c = schema.configs
    h = schema.config_hash(x.config_json)
    cid = conn.execute(
        insert_ignore(conn, c)
        .values(workload_id=wid, config_hash=h, config=x.config_json, space_index=x.space_index)
        .returning(c.c.id)
    ).scalar()
    if cid is None:  # measured before: the row exists
        cid = conn.execute(select(c.c.id).where(c.c.workload_id == wid, c.c.config_hash == h)).scalar_one()
    tid = cache.targets[x.target]
    return int(
        conn.execute(
            schema.measurements.insert().values(_row(x, tid, wid, cid)).returning(schema.measurements.c.id)
        ).scalar_one()
    )


def ingest(conn: Connection, batch: Sequence[Measurement], cache: IdCache | None = None) -> int:
    """Write `batch` in the caller's transaction; skip measurements whose uid is already present.
    Returns how many were new."""
    if not batch:
        return 0
    m = schema.measurements
    present = set(conn.scalars(select(m.c.uid).where(m.c.uid.in_([x.uid for x in batch]))))
    fresh: dict[str, Measurement] = {}
    for x in batch:
        if x.uid not in present:
            fresh.setdefault(x.uid, x)
    if not fresh:
        return 0
    todo = list(fresh.values())
    ids = _resolve(conn, todo, cache or IdCache())
    _insert_rows(conn, [tuple(_row(x, *i).values()) for x, i in zip(todo, ids)], list(_row(todo[0], *ids[0])))
    return len(todo)


def _insert_rows(conn: Connection, rows: list[tuple[Any, ...]], cols: list[str]) -> None:
    """Bulk insert measurements straight through the driver: SQLAlchemy's per-row parameter handling
    would double an import's time. SQLite: executemany (in-process, cheap per row). PostgreSQL: COPY
    into a session-private staging table, then one INSERT ... SELECT, several times faster than
    binding rows one statement at a time; ON CONFLICT keeps it idempotent either way."""
    names = ", ".join(cols)
    tail = " ON CONFLICT (uid) DO NOTHING"
    if conn.dialect.name == "sqlite":
        marks = ", ".join(["?"] * len(cols))
        conn.exec_driver_sql(f"INSERT INTO {schema.measurements.name} ({names}) VALUES ({marks}){tail}", rows)
        return
    raw = conn.connection.dbapi_connection
    assert raw is not None
    with raw.cursor() as cur:
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGING} ON COMMIT DELETE ROWS AS "
            f"SELECT {names} FROM {schema.measurements.name} WITH NO DATA"
        )
        cur.execute(f"TRUNCATE {_STAGING}")
        with cur.copy(f"COPY {_STAGING} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cur.execute(f"INSERT INTO {schema.measurements.name} ({names}) SELECT {names} FROM {_STAGING}{tail}")


_STAGING = "tuning_db_staging"


def _row(x: Measurement, tid: int, wid: int, cid: int) -> dict[str, Any]:
    return {
        "uid": x.uid,
        "workload_id": wid,
        "target_id": tid,
        "config_id": cid,
        "run_id": x.run_id,
        "costs": json.dumps(list(x.costs)),
        "mean_cost": x.mean_cost,
        "std_cost": x.std_cost,
        "error_kind": x.error_kind,
        "error_msg": x.error,
        "builder_version": x.builder_version,
        "runner_version": x.runner_version,
        "compiler_version": x.compiler_version,
        "recorded_at": x.recorded_at,
    }


def _resolve(conn: Connection, batch: Sequence[Measurement], cache: IdCache) -> list[tuple[int, int, int]]:
    """(target id, workload id, config id) per measurement, creating rows that are missing."""
    new_t = [x for x in batch if not cache.known_target(x)]
    if new_t:
        cache.targets.update(_get_or_create_targets(conn, new_t))
        cache.described.update("t:" + x.target for x in new_t if x.fingerprint_json is not None)
    new_w = [x for x in batch if not cache.known_workload(x)]
    if new_w:
        cache.workloads.update(get_or_create_workloads(conn, new_w))
        cache.described.update("w:" + x.workload_key for x in new_w if x.workload_json is not None)
    cids = _get_or_create_configs(conn, batch, cache.workloads)
    out = []
    for x in batch:
        wid = cache.workloads[x.workload_key]
        out.append((cache.targets[x.target], wid, cids[(wid, schema.config_hash(x.config_json))]))
    return out


def _get_or_create_targets(conn: Connection, batch: Sequence[Measurement]) -> dict[str, int]:
    t = schema.targets
    wanted: dict[str, str | None] = {}
    for x in batch:
        if wanted.get(x.target) is None:
            wanted[x.target] = x.fingerprint_json
    ids, missing = _lookup(conn, t.c.name, t.c.id, list(wanted))
    if missing:
        now = time.time()
        conn.execute(
            insert_ignore(conn, t),
            [
                {"name": n, "kind": schema.target_kind(n), "fingerprint": wanted[n], "created_at": now}
                for n in missing
            ],
        )
        ids.update(_lookup(conn, t.c.name, t.c.id, missing)[0])
    for name, fp in wanted.items():  # record a fingerprint the first time one is known
        if fp is not None and name not in missing:
            conn.execute(
                t.update().where(t.c.id == ids[name], t.c.fingerprint.is_(None)).values(fingerprint=fp)
            )
    return ids


def get_or_create_workloads(conn: Connection, batch: Sequence[Measurement]) -> dict[str, int]:
    w = schema.workloads
    wanted: dict[str, tuple[str | None, str | None]] = {}
    for x in batch:
        if wanted.get(x.workload_key, (None,))[0] is None:
            wanted[x.workload_key] = (x.workload_json, x.family)
    ids, missing = _lookup(conn, w.c.key, w.c.id, list(wanted))
    now = time.time()
    if missing:
        conn.execute(
            insert_ignore(conn, w),
            [
                {"key": k, "workload": wanted[k][0], "family": wanted[k][1], "created_at": now}
                for k in missing
            ],
        )
        ids.update(_lookup(conn, w.c.key, w.c.id, missing)[0])
    described = [k for k in wanted if k not in missing and wanted[k][0] is not None]
    for key in described:  # a workload first logged without its description gets one now
        wl_json, family = wanted[key]
        conn.execute(
            w.update()
            .where(w.c.id == ids[key], w.c.workload.is_(None))
            .values(workload=wl_json, family=family)
        )
    return ids


def _get_or_create_configs(
    conn: Connection, batch: Sequence[Measurement], wids: dict[str, int]
) -> dict[tuple[int, str], int]:
    c = schema.configs
    wanted: dict[tuple[int, str], Measurement] = {}
    for x in batch:
        wanted.setdefault((wids[x.workload_key], schema.config_hash(x.config_json)), x)
    ids = _config_ids(conn, list(wanted))
    missing = [k for k in wanted if k not in ids]
    if missing:
        conn.execute(
            insert_ignore(conn, c),
            [
                {
                    "workload_id": k[0],
                    "config_hash": k[1],
                    "config": wanted[k].config_json,
                    "space_index": wanted[k].space_index,
                }
                for k in missing
            ],
        )
        ids.update(_config_ids(conn, missing))
    return ids


def _config_ids(conn: Connection, keys: list[tuple[int, str]]) -> dict[tuple[int, str], int]:
    c = schema.configs
    out: dict[tuple[int, str], int] = {}
    wanted = set(keys)
    for chunk in _chunks(sorted({h for _, h in keys}), 2000):
        for cid, wid, h in conn.execute(
            select(c.c.id, c.c.workload_id, c.c.config_hash).where(c.c.config_hash.in_(chunk))
        ):
            if (wid, h) in wanted:
                out[(wid, h)] = cid
    return out


def _lookup(conn: Connection, key_col, id_col, keys: list[str]) -> tuple[dict[str, int], list[str]]:  # type: ignore[no-untyped-def]
    found: dict[str, int] = {}
    for chunk in _chunks(keys, 2000):
        found.update({k: i for k, i in conn.execute(select(key_col, id_col).where(key_col.in_(chunk)))})
    return found, [k for k in keys if k not in found]


def _chunks(seq: Sequence[Any], n: int):  # type: ignore[no-untyped-def]
    for i in range(0, len(seq), n):
        yield seq[i : i + n]
