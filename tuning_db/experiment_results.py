"""The rows of `autorelay reproduce` experiments: what each measured piece ("unit") of an experiment
found, tagged with the experiment, its mode, the measuring machine and the code version.

A unit's figures are one JSON object, never interpreted here. Several rows may exist for one
(experiment, mode, machine, unit): a re-measurement appends, and the latest row is the one that
counts, so history is kept and nothing is overwritten. Rows carry a uid, so logs from two machines
merge without duplicates (`copy_missing_results`), and a report can set the machines side by side.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select

from . import schema
from .errors import TuningDBError
from .records import _json

t = schema.experiment_results


@dataclass(frozen=True, slots=True)
class ExperimentResult:
    uid: str
    experiment: str
    mode: str
    unit: str
    machine: str
    machine_info: dict[str, Any]
    code_version: str | None
    result: dict[str, Any]
    recorded_at: float


def _check_json_numbers(value: Any, where: str) -> None:
    """NaN and infinities are not JSON: a unit that found nothing says so with None or a string."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TuningDBError(f"experiment result: {where} is {value}; store None for 'not measured'")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_json_numbers(v, f"{where}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_json_numbers(v, f"{where}[{i}]")


def insert_result(conn: Connection, *, experiment: str, mode: str, unit: str, machine: str,
                  result: Mapping[str, Any], machine_info: Mapping[str, Any] | None = None,
                  code_version: str | None = None, uid: str | None = None,
                  recorded_at: float | None = None) -> str:
    """Check one unit's row and insert it; returns its uid."""
    for name, value, limit in (("experiment", experiment, 128), ("mode", mode, 64),
                               ("unit", unit, schema.MAX_KEY_LEN), ("machine", machine, 64)):
        if not isinstance(value, str) or not value or len(value) > limit:
            raise TuningDBError(f"experiment result: bad {name} {value!r}")
    if not isinstance(result, Mapping):
        raise TuningDBError(f"experiment result: the result must be a JSON object, "
                            f"got {type(result).__name__}")
    _check_json_numbers(dict(result), "result")
    row = {
        "uid": uid or uuid.uuid4().hex, "experiment": experiment, "mode": mode, "unit": unit,
        "machine": machine, "machine_info": _json("machine_info", dict(machine_info or {})),
        "code_version": code_version, "result": _json("result", dict(result)),
        "recorded_at": time.time() if recorded_at is None else float(recorded_at),
    }
    conn.execute(t.insert().values(**row))
    return row["uid"]


def _record(row: Row[Any]) -> ExperimentResult:
    d = row._mapping
    return ExperimentResult(
        uid=d["uid"], experiment=d["experiment"], mode=d["mode"], unit=d["unit"], machine=d["machine"],
        machine_info=json.loads(d["machine_info"]) if d["machine_info"] else {},
        code_version=d["code_version"], result=json.loads(d["result"]), recorded_at=d["recorded_at"],
    )


def latest_results(conn: Connection, experiment: str, mode: str,
                   machine: str | None = None) -> list[ExperimentResult]:
    """The latest row of every unit of the experiment in that mode (of one machine, or of each
    machine that measured it), oldest unit first."""
    query = select(t).where(t.c.experiment == experiment, t.c.mode == mode)
    if machine is not None:
        query = query.where(t.c.machine == machine)
    latest: dict[tuple[str, str], ExperimentResult] = {}
    for row in conn.execute(query.order_by(t.c.recorded_at, t.c.id)):
        rec = _record(row)
        latest.pop((rec.machine, rec.unit), None)  # re-inserted: the order follows the newest row
        latest[(rec.machine, rec.unit)] = rec
    return list(latest.values())


def all_results(conn: Connection) -> list[ExperimentResult]:
    return [_record(r) for r in conn.execute(select(t).order_by(t.c.id))]


def copy_missing_results(conn: Connection, rows: Iterable[ExperimentResult],
                         on_error: Callable[[int, TuningDBError], None] | None = None) -> int:
    """Insert the rows whose uid this log lacks (a merge; a uid repeated in `rows` is inserted
    once); returns how many were new. A row `insert_result` refuses raises, unless `on_error` takes
    it (with the row's index in `rows`), and the others are still inserted."""
    have = set(conn.execute(select(t.c.uid)).scalars())
    added = 0
    for i, r in enumerate(rows):
        if r.uid in have:
            continue
        try:
            insert_result(conn, experiment=r.experiment, mode=r.mode, unit=r.unit, machine=r.machine,
                          result=r.result, machine_info=r.machine_info, code_version=r.code_version,
                          uid=r.uid, recorded_at=r.recorded_at)
        except TuningDBError as e:
            if on_error is None:
                raise
            on_error(i, e)
            continue
        have.add(r.uid)
        added += 1
    return added


__all__ = ["ExperimentResult", "all_results", "copy_missing_results", "insert_result", "latest_results"]
