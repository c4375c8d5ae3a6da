"""Quantization plans in the log: which layers of a model run in int8 on a target, and what that
measured to cost and to lose.

`search.quantize_search` stores the points of its Pareto front here, each with the end-to-end
latency of its build, the accuracy it kept, and the fp32 baseline measured beside it (the drop is
only meaningful against a baseline taken on the same data and machine). The plan itself is the
`QuantizePlan` JSON; this package never interprets it (it imports nothing from `autorelay`).

Two questions are asked of the table: "the fastest stored plan of this model on this target that
loses at most X" (`best_plan(..., max_drop=X)`) and "the plan the last search picked"
(`best_plan(...)` with no bound), which `autorelay compile --precision plan` builds.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, func, select

from . import schema
from .errors import TuningDBError

METRICS = ("top1", "rel_error")  # top-1 accuracy on labels; relative output error against fp32
q = schema.quantization_plans


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """One stored plan with its measurements (latencies in milliseconds)."""

    id: int
    uid: str
    model_key: str
    model: str | None
    target: str
    plan: dict[str, Any]
    calibration: str
    latency_ms: float
    latency_spread_ms: tuple[float, float] | None  # (10th, 90th) percentile of the timing rounds
    metric: str
    accuracy: float
    accuracy_drop: float
    max_drop: float | None
    fp32_latency_ms: float | None
    fp32_accuracy: float | None
    chosen: bool
    compiler_version: str | None
    info: dict[str, Any] | None
    recorded_at: float

    @property
    def speedup(self) -> float | None:
        """fp32 latency over this plan's, both from the same timing rounds."""
        return self.fp32_latency_ms / self.latency_ms if self.fp32_latency_ms else None


def _finite(name: str, value: float | None, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TuningDBError(f"quantization plan: {name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise TuningDBError(f"quantization plan: {name} must be finite, got {v}")
    return v


def insert_plan(
    conn: Connection,
    *,
    model_key: str,
    target: str,
    plan: Mapping[str, Any],
    calibration: str,
    latency_ms: float,
    metric: str,
    accuracy: float,
    accuracy_drop: float,
    model: str | None = None,
    latency_spread_ms: tuple[float, float] | None = None,
    max_drop: float | None = None,
    fp32_latency_ms: float | None = None,
    fp32_accuracy: float | None = None,
    chosen: bool = False,
    compiler_version: str | None = None,
    info: Mapping[str, Any] | None = None,
) -> int:
    """Check one plan row and insert it; returns its id. A chosen row un-chooses the earlier rows
    of the same model and target (one pick per model and target: the latest search's)."""
    if not model_key or len(model_key) > schema.MAX_KEY_LEN:
        raise TuningDBError(f"quantization plan: bad model key {model_key!r}")
    if metric not in METRICS:
        raise TuningDBError(f"quantization plan: metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not isinstance(plan, Mapping):
        raise TuningDBError(f"quantization plan: the plan must be a JSON object, got {type(plan).__name__}")
    lat = _finite("latency_ms", latency_ms)
    if lat is None or lat <= 0:
        raise TuningDBError(f"quantization plan: latency_ms must be positive, got {latency_ms}")
    lo, hi = (None, None)
    if latency_spread_ms is not None:
        lo, hi = (_finite("latency_spread_ms", x) for x in latency_spread_ms)
    tgt = schema.canonical_target(target)
    values = {
        "uid": uuid.uuid4().hex,
        "model_key": model_key,
        "model": model,
        "target": tgt,
        "plan": schema.canonical_json(dict(plan)),
        "calibration": str(calibration),
        "latency_ms": lat,
        "latency_lo_ms": lo,
        "latency_hi_ms": hi,
        "metric": metric,
        "accuracy": _finite("accuracy", accuracy),
        "accuracy_drop": _finite("accuracy_drop", accuracy_drop),
        "max_drop": _finite("max_drop", max_drop, optional=True),
        "fp32_latency_ms": _finite("fp32_latency_ms", fp32_latency_ms, optional=True),
        "fp32_accuracy": _finite("fp32_accuracy", fp32_accuracy, optional=True),
        "chosen": 1 if chosen else 0,
        "compiler_version": compiler_version,
        "info": schema.canonical_json(dict(info)) if info else None,
        "recorded_at": time.time(),
    }
    if chosen:
        conn.execute(q.update().where(q.c.model_key == model_key, q.c.target == tgt).values(chosen=0))
    return int(conn.execute(q.insert().values(**values).returning(q.c.id)).scalar_one())


def _to_record(row: Row[Any]) -> PlanRecord:
    d = row._mapping
    spread = None if d["latency_lo_ms"] is None else (d["latency_lo_ms"], d["latency_hi_ms"])
    return PlanRecord(
        id=d["id"], uid=d["uid"], model_key=d["model_key"], model=d["model"], target=d["target"],
        plan=json.loads(d["plan"]), calibration=d["calibration"], latency_ms=d["latency_ms"],
        latency_spread_ms=spread, metric=d["metric"], accuracy=d["accuracy"],
        accuracy_drop=d["accuracy_drop"], max_drop=d["max_drop"], fp32_latency_ms=d["fp32_latency_ms"],
        fp32_accuracy=d["fp32_accuracy"], chosen=bool(d["chosen"]), compiler_version=d["compiler_version"],
        info=json.loads(d["info"]) if d["info"] else None, recorded_at=d["recorded_at"],
    )


def list_plans(conn: Connection, model_key: str | None = None, target: str | None = None) -> list[PlanRecord]:
    """Stored plans (of one model and/or target when given), fastest first."""
    query = select(q)
    if model_key is not None:
        query = query.where(q.c.model_key == model_key)
    if target is not None:
        query = query.where(q.c.target == schema.canonical_target(target))
    return [_to_record(r) for r in conn.execute(query.order_by(q.c.latency_ms, q.c.id))]


def best_plan(conn: Connection, model_key: str, target: str,
              max_drop: float | None = None) -> PlanRecord | None:
    """With `max_drop`: the fastest stored plan of the model on the target whose accuracy drop is at
    most `max_drop`, fastest against the fp32 build timed in its own rounds (a row without that
    figure counts as fp32's speed). Without: the plan the latest search of that model and target
    picked. None when no stored plan qualifies."""
    query = select(q).where(q.c.model_key == model_key, q.c.target == schema.canonical_target(target))
    if max_drop is None:
        query = query.where(q.c.chosen == 1).order_by(q.c.recorded_at.desc(), q.c.id.desc())
    else:
        bound = _finite("max_drop", max_drop)
        relative = q.c.latency_ms / func.coalesce(func.nullif(q.c.fp32_latency_ms, 0.0), q.c.latency_ms)
        query = query.where(q.c.accuracy_drop <= bound).order_by(relative, q.c.id)
    row = conn.execute(query.limit(1)).first()
    return _to_record(row) if row is not None else None


def plan_targets(conn: Connection, model_key: str) -> list[str]:
    """The targets that have stored plans for the model (for a helpful "none stored" error)."""
    rows = conn.execute(select(q.c.target).where(q.c.model_key == model_key).distinct().order_by(q.c.target))
    return [r[0] for r in rows]


__all__ = ["METRICS", "PlanRecord", "best_plan", "insert_plan", "list_plans", "plan_targets"]
