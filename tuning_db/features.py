"""Feature vectors of configs in the log: what the model-based tuner learns from, kept so that a
resumed tune does not lower every logged config again.

A model-based tuner describes each config by its lowered loop IR (`search.features`), about 10 ms
of lowering per config. Resuming a tune feeds it every logged measurement of its workload and, to
warm its cost model, up to a few hundred measurements of each of its nearest workloads (lowered on
the resumed workload's shape): tens of seconds per model, before any new trial. The rows here key a
vector by (workload, target, features version, config hash). The version names the feature
definition that made it (the caller's string; a new definition misses the old rows, it never reads
them). A vector of `None` records a config whose schedule is illegal on the workload.

The rows are a cache of a deterministic function of their key: JSONL export and merging leave them
out, and pruning measurements leaves them in place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, select

from . import schema
from .engine import insert_ignore
from .errors import TuningDBError

t = schema.config_features
Vector = tuple[float, ...] | None


def config_key(config: Mapping[str, object]) -> str:
    """The hash a config's vector is stored under: that of its canonical JSON, as `configs` rows."""
    return schema.config_hash(schema.canonical_json(config))


def load_features(conn: Connection, workload_key: str, target: str, version: str) -> dict[str, Vector]:
    """config hash -> feature vector (None: an illegal schedule) of one workload on one target."""
    rows = conn.execute(select(t.c.config_hash, t.c.features).where(
        t.c.workload_key == workload_key, t.c.target == schema.canonical_target(target),
        t.c.version == version))
    out: dict[str, Vector] = {}
    for config_hash, raw in rows:
        value = json.loads(raw)
        out[config_hash] = None if value is None else tuple(float(x) for x in value)
    return out


def insert_features(conn: Connection, workload_key: str, target: str, version: str,
                    vectors: Mapping[str, Sequence[float] | None]) -> int:
    """Store vectors by config hash (a key already stored keeps its row); returns how many were given."""
    if not workload_key or len(workload_key) > schema.MAX_KEY_LEN:
        raise TuningDBError(f"config features: bad workload key {workload_key!r}")
    if not version or len(version) > 64:
        raise TuningDBError(f"config features: bad version {version!r}")
    now = time.time()
    rows = []
    for config_hash, vector in vectors.items():
        rows.append({"workload_key": workload_key, "target": schema.canonical_target(target),
                     "version": version, "config_hash": config_hash, "recorded_at": now,
                     "features": json.dumps(None if vector is None else [float(x) for x in vector])})
    if rows:
        conn.execute(insert_ignore(conn, t), rows)
    return len(rows)
