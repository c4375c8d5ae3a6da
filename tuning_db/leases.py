"""Claims ("leases") that let several tuners share one log without measuring a config twice.

Before a tuner measures a candidate it claims it: one row per (workload, target, config) with the
claimer's name and an expiry. A claim is refused when the config already has a measurement or a
live lease of another holder. A claim runs in one write transaction (SQLite: `BEGIN IMMEDIATE`;
PostgreSQL: an advisory lock per workload and target), so two tuners cannot both win it.

A claimer that dies leaves its leases behind; they are reclaimed when they expire, or at once
when the holder ran on this host and its process is gone (the holder name carries host and pid).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, select, text

from . import schema
from .processes import process_alive
from .queries import ids_of

le, m, c = schema.leases, schema.measurements, schema.configs


def holder_name() -> str:
    """A fresh claimer name: host, pid (so a dead local holder is recognised) and a random part."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: per config whether this holder may measure it now, and how many
    configs of the workload other holders are measuring (live leases without a result yet)."""

    granted: list[bool]
    others_pending: int
    others: frozenset[str] = frozenset()  # config hashes other holders are measuring now


def claim(conn: Connection, workload_key: str, target: str, configs: Sequence[dict[str, Any]],
          holder: str, ttl_s: float) -> Claim:
    """Claim `configs` for `holder` until now + `ttl_s` (in the caller's write transaction)."""
    target = schema.canonical_target(target)
    _lock(conn, workload_key, target)
    now = time.time()
    mine = (le.c.workload_key == workload_key) & (le.c.target == target)
    conn.execute(delete(le).where(mine, le.c.expires_at < now))
    held = {h: who for h, who in conn.execute(select(le.c.config_hash, le.c.holder).where(mine))}
    dead = {who for who in set(held.values()) if who != holder and _gone(who)}
    if dead:
        conn.execute(delete(le).where(mine, le.c.holder.in_(dead)))
        held = {h: who for h, who in held.items() if who not in dead}
    hashes = [config_key(cfg) for cfg in configs]
    done = _measured(conn, workload_key, target, set(hashes) | set(held))
    granted, seen = [], set()
    for h in hashes:
        ok = h not in done and h not in seen and held.get(h, holder) == holder
        granted.append(ok)
        seen.add(h)
        if not ok:
            continue
        if h in held:
            conn.execute(le.update().where(mine, le.c.config_hash == h).values(expires_at=now + ttl_s))
        else:
            conn.execute(le.insert().values(workload_key=workload_key, target=target, config_hash=h,
                                            holder=holder, expires_at=now + ttl_s))
            held[h] = holder
    others = frozenset(h for h, who in held.items() if who != holder and h not in done)
    return Claim(granted, len(others), others)


def config_key(config: dict[str, Any]) -> str:
    """The hash a lease names its config by (the log's config hash)."""
    return schema.config_hash(schema.canonical_json(dict(config)))


def release(conn: Connection, workload_key: str, target: str, holder: str,
            configs: Sequence[dict[str, Any]] | None = None) -> None:
    """Drop `holder`'s leases on `configs` of the workload (all of them when None)."""
    target = schema.canonical_target(target)
    q = delete(le).where(le.c.workload_key == workload_key, le.c.target == target, le.c.holder == holder)
    if configs is not None:
        q = q.where(le.c.config_hash.in_([config_key(x) for x in configs]))
    conn.execute(q)


def _measured(conn: Connection, workload_key: str, target: str, hashes: set[str]) -> set[str]:
    wid, tid = ids_of(conn, workload_key, target)
    if wid is None or tid is None or not hashes:
        return set()
    q = (select(c.c.config_hash).select_from(c.join(m, m.c.config_id == c.c.id))
         .where(c.c.workload_id == wid, m.c.target_id == tid, c.c.config_hash.in_(list(hashes))).distinct())
    return set(conn.scalars(q))


def _lock(conn: Connection, workload_key: str, target: str) -> None:
    """Serialise claims on one workload and target (SQLite's write transaction already does)."""
    if conn.dialect.name == "postgresql":
        digest = hashlib.sha256(f"{workload_key}|{target}".encode()).digest()
        key = int.from_bytes(digest[:8], "big", signed=True)
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def _gone(holder: str) -> bool:
    """Whether `holder` ran on this host in a process that no longer exists."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname()[:80] or not pid_text.isdigit():
        return False
    return not process_alive(int(pid_text))  # this process counts as alive: a holder of ours
