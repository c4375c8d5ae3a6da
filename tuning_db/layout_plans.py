"""Layout plans in the log: which channel block each conv layer of a model runs in on a target, as
the graph-level layout search chose it, with the latency its build measured.

`search.layout_search` stores one row per search: the plan (the compiler's `LayoutPlan` JSON, never
interpreted here beyond its "blocks" map for display), its end-to-end latency, and in `info` the
per-layer costs it was chosen from and the per-model pipelines timed in the same rounds. `chosen`
is 1 when the plan beat them; `autorelay compile` on the log then rebuilds exactly that plan, else
the per-model winner named in `info["winner"]`. The latest row of a model and target is the one
that counts (a newer search supersedes the older).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, or_, select

from . import schema
from .errors import TuningDBError

t = schema.layout_plans


@dataclass(frozen=True, slots=True)
class LayoutPlanRecord:
    id: int
    uid: str
    model_key: str
    model: str | None
    target: str
    plan: dict[str, Any]
    latency_ms: float
    chosen: bool
    compiler_version: str | None
    info: dict[str, Any]
    recorded_at: float

    @property
    def winner(self) -> str:
        """"plan" when the plan won its search, else the per-model pipeline that did."""
        return "plan" if self.chosen else str(self.info.get("winner", "default"))


def insert_layout_plan(conn: Connection, *, model_key: str, target: str, plan: Mapping[str, Any],
                       latency_ms: float, model: str | None = None, chosen: bool = False,
                       compiler_version: str | None = None, info: Mapping[str, Any] | None = None) -> int:
    """Check one layout plan row and insert it; returns its id."""
    if not model_key or len(model_key) > schema.MAX_KEY_LEN:
        raise TuningDBError(f"layout plan: bad model key {model_key!r}")
    if not isinstance(plan, Mapping) or not isinstance(plan.get("blocks"), Mapping):
        raise TuningDBError("layout plan: the plan must be a JSON object with a 'blocks' map")
    try:
        lat = float(latency_ms)
    except (TypeError, ValueError):
        raise TuningDBError(f"layout plan: latency_ms must be a number, got {latency_ms!r}") from None
    if not math.isfinite(lat) or lat <= 0:
        raise TuningDBError(f"layout plan: latency_ms must be positive and finite, got {latency_ms}")
    values = {
        "uid": uuid.uuid4().hex, "model_key": model_key, "model": model,
        "target": schema.canonical_target(target), "plan": schema.canonical_json(dict(plan)),
        "latency_ms": lat, "chosen": 1 if chosen else 0, "compiler_version": compiler_version,
        "info": schema.canonical_json(dict(info or {})), "recorded_at": time.time(),
    }
    return int(conn.execute(t.insert().values(**values).returning(t.c.id)).scalar_one())


def _record(row: Row[Any]) -> LayoutPlanRecord:
    d = row._mapping
    return LayoutPlanRecord(
        id=d["id"], uid=d["uid"], model_key=d["model_key"], model=d["model"], target=d["target"],
        plan=json.loads(d["plan"]), latency_ms=d["latency_ms"], chosen=bool(d["chosen"]),
        compiler_version=d["compiler_version"], info=json.loads(d["info"]) if d["info"] else {},
        recorded_at=d["recorded_at"],
    )


def latest_layout_plan(conn: Connection, model_key: str, target: str) -> LayoutPlanRecord | None:
    """The latest search's row for the model on the target, or None."""
    query = (select(t).where(t.c.model_key == model_key, t.c.target == schema.canonical_target(target))
             .order_by(t.c.recorded_at.desc(), t.c.id.desc()).limit(1))
    row = conn.execute(query).first()
    return _record(row) if row is not None else None


def list_layout_plans(conn: Connection, model: str | None = None,
                      target: str | None = None) -> list[LayoutPlanRecord]:
    """Stored layout plans, newest first; `model` matches the model's name or its key."""
    query = select(t)
    if model is not None:
        query = query.where(or_(t.c.model == model, t.c.model_key == model))
    if target is not None:
        query = query.where(t.c.target == schema.canonical_target(target))
    return [_record(r) for r in conn.execute(query.order_by(t.c.recorded_at.desc(), t.c.id.desc()))]


__all__ = ["LayoutPlanRecord", "insert_layout_plan", "latest_layout_plan", "list_layout_plans"]
