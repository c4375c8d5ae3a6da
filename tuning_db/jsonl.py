"""JSON-lines export and import: one self-contained measurement per line.

Each line carries everything needed to rebuild the measurement elsewhere (workload description,
target fingerprint, its tuning run), so a file can be split, concatenated, or partly corrupted and the
rest still imports. Re-importing is harmless: the measurement's `uid` makes it idempotent. Merging two
databases is this same pipeline, fed from the other database instead of a file.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from sqlalchemy import Connection, Engine, select

from . import schema
from .engine import insert_ignore, read_tx, write_tx
from .errors import JSONLImportError, TuningDBError
from .ingest import IdCache, ingest
from .records import Measurement, normalize

CHUNK = 5000
ANALYZE_AFTER = 10_000  # imported rows after which planner statistics are refreshed
m, c, w, t, r = schema.measurements, schema.configs, schema.workloads, schema.targets, schema.runs


@dataclass(slots=True)
class ImportReport:
    """What an import or merge did. `errors` holds (line number, message) for every rejected line."""

    source: str
    lines: int = 0
    imported: int = 0
    duplicates: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    strict: bool = False
    experiment_results: int = 0  # a merge's new `autorelay reproduce` rows

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        text = (
            f"{self.source}: {self.lines} lines, {self.imported} imported, "
            f"{self.duplicates} already present, {len(self.errors)} rejected"
        )
        if self.strict and self.errors:
            text += " (strict: nothing imported)"
        return text


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def parse_time(value: Any, field: str = "recorded_at") -> float:
    """Seconds since the epoch from an ISO 8601 time or a number; `field` names it in the error."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise TuningDBError(f"'{field}' is not an ISO 8601 time: {value!r}") from None
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TuningDBError(f"'{field}' must be an ISO 8601 time or seconds, got {value!r}")
    return float(value)


# ---- export ----------------------------------------------------------------------------------


def _export_query(conn: Connection):  # type: ignore[no-untyped-def]
    cols = (
        m.c.uid,
        w.c.id,
        w.c.key,
        w.c.workload,
        t.c.id,
        t.c.name,
        t.c.fingerprint,
        c.c.config,
        c.c.space_index,
        m.c.costs,
        m.c.mean_cost,
        m.c.std_cost,
        m.c.error_kind,
        m.c.error_msg,
        m.c.builder_version,
        m.c.runner_version,
        m.c.compiler_version,
        m.c.recorded_at,
        m.c.run_id,
    )
    joined = (
        m.join(c, m.c.config_id == c.c.id).join(w, m.c.workload_id == w.c.id).join(t, m.c.target_id == t.c.id)
    )
    q = select(*cols).select_from(joined).order_by(m.c.id)
    return conn.execution_options(yield_per=CHUNK).execute(q)


def export_rows(engine: Engine) -> Iterator[dict[str, Any]]:
    """Every measurement as a JSON-ready dict, in insertion order (streamed in chunks)."""
    with read_tx(engine) as conn:
        runs = {row.id: _run_dict(row) for row in conn.execute(select(r))}
        parsed: dict[tuple[str, int], Any] = {}

        def cached(kind: str, key: int, raw: str | None) -> Any:
            if raw is not None and (kind, key) not in parsed:
                parsed[(kind, key)] = json.loads(raw)
            return None if raw is None else parsed[(kind, key)]

        for row in _export_query(conn):
            yield dict(
                zip(
                    LINE_KEYS,
                    (
                        row[0],
                        row[2],
                        row[5],
                        json.loads(row[7]),
                        json.loads(row[9]),
                        row[10],
                        row[11],
                        row[12],
                        row[13],
                        row[8],
                        iso(row[17]),
                        runs.get(row[18]),
                        row[14],
                        row[15],
                        row[16],
                        cached("w", row[1], row[3]),
                        cached("t", row[4], row[6]),
                    ),
                )
            )


LINE_KEYS = (
    "uid",
    "workload_key",
    "target",
    "config",
    "costs",
    "mean_cost",
    "std_cost",
    "error_kind",
    "error",
    "space_index",
    "recorded_at",
    "run",
    "builder_version",
    "runner_version",
    "compiler_version",
    "workload",
    "target_fingerprint",
)
_LINE = "{" + ", ".join(f'"{k}": %s' for k in LINE_KEYS) + "}\n"


def _export_lines(engine: Engine) -> Iterator[str]:
    """The same as `export_rows`, as text lines; the stored JSON (already canonical) is copied
    verbatim instead of parsed and re-serialised, which makes exports several times faster."""
    d = json.dumps
    with read_tx(engine) as conn:
        runs = {row.id: d(_run_dict(row)) for row in conn.execute(select(r))}
        for row in _export_query(conn):
            yield _LINE % (
                d(row[0]),
                d(row[2]),
                d(row[5]),
                row[7],
                row[9],
                d(row[10]),
                d(row[11]),
                d(row[12]),
                d(row[13]),
                d(row[8]),
                d(iso(row[17])),
                runs.get(row[18], "null"),
                d(row[14]),
                d(row[15]),
                d(row[16]),
                row[3] or "null",
                row[6] or "null",
            )


def _run_dict(row: Any) -> dict[str, Any]:
    return {
        "uid": row.uid,
        "model": row.model,
        "tuner": row.tuner,
        "trial_budget": row.trial_budget,
        "status": row.status,
        "host": row.host,
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at) if row.finished_at is not None else None,
        "info": json.loads(row.info) if row.info else None,
    }


def export_jsonl(engine: Engine, path: str | os.PathLike[str]) -> int:
    """Write every measurement to `path`; returns the number of lines written."""
    n = 0
    tmp = f"{os.fspath(path)}.part"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for line in _export_lines(engine):
                f.write(line)
                n += 1
        os.replace(tmp, path)  # never leave a half-written export under the real name
    except OSError as e:
        raise TuningDBError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


# ---- import ----------------------------------------------------------------------------------


def read_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line number, parsed object) per non-blank line; a string instead of a dict is the error."""
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            yield from _parse_lines(f)
    except OSError as e:
        raise TuningDBError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from None


def _parse_lines(f: TextIO) -> Iterator[tuple[int, dict[str, Any] | str]]:
    lineno = 0
    while True:
        try:
            line = f.readline()
        except UnicodeDecodeError as e:
            yield lineno + 1, f"not UTF-8 text ({e.reason})"
            return
        if not line:
            return
        lineno += 1
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            yield lineno, f"invalid JSON at column {e.colno}: {e.msg}"
            continue
        if not isinstance(obj, dict):
            yield lineno, f"expected a JSON object, got {type(obj).__name__}"
            continue
        yield lineno, obj


def from_line(obj: dict[str, Any], run_id: int | None, seen: set[str] | None = None) -> Measurement:
    """Check one imported line. `seen` holds the workload keys / targets whose description an earlier
    line of this import already supplied: the log keeps the first one, so later copies need no work."""
    for key in ("workload_key", "target", "config", "costs"):
        if key not in obj:
            raise TuningDBError(f"missing field '{key}'")
    seen = set() if seen is None else seen
    workload, fingerprint = obj.get("workload"), obj.get("target_fingerprint")
    wkey, tkey = f"w:{obj['workload_key']}", f"t:{obj['target']}"
    if wkey in seen and isinstance(workload, dict):
        workload = None
    if tkey in seen and isinstance(fingerprint, dict):
        fingerprint = None
    ts = obj.get("recorded_at")
    meas = normalize(
        obj["workload_key"],
        obj["target"],
        obj["config"],
        obj["costs"],
        workload=workload,
        error=obj.get("error"),
        error_kind=obj.get("error_kind"),
        run_id=run_id,
        uid=obj.get("uid"),
        target_fingerprint=fingerprint,
        space_index=obj.get("space_index"),
        builder_version=obj.get("builder_version"),
        runner_version=obj.get("runner_version"),
        compiler_version=obj.get("compiler_version"),
        recorded_at=None if ts is None else parse_time(ts),
    )
    if meas.workload_json is not None:
        seen.add(wkey)
    if meas.fingerprint_json is not None:
        seen.add(tkey)
    return meas


def import_rows(
    engine: Engine, rows: Iterable[tuple[int, dict[str, Any] | str]], *, source: str, strict: bool = False
) -> ImportReport:
    """Import (line number, object-or-error) pairs in one transaction. Bad lines are reported and
    skipped; with `strict` any bad line rolls the whole import back and raises JSONLImportError."""
    report = ImportReport(source=source, strict=strict)
    run_ids: dict[str, int] = {}
    batch: list[Measurement] = []
    cache = IdCache()
    seen: set[str] = set()

    def flush(conn: Connection) -> None:
        if batch and not (strict and report.errors):
            new = ingest(conn, batch, cache)
            report.imported += new
            report.duplicates += len(batch) - new
        batch.clear()

    with write_tx(engine) as conn:
        for lineno, obj in rows:
            report.lines += 1
            if isinstance(obj, str):
                report.errors.append((lineno, obj))
                continue
            try:
                run_id = _run_id(conn, obj.get("run"), run_ids)
                batch.append(from_line(obj, run_id, seen))
            except TuningDBError as e:
                report.errors.append((lineno, str(e)))
            if len(batch) >= CHUNK:
                flush(conn)
        flush(conn)
        if strict and report.errors:
            conn.rollback()
            report.imported = report.duplicates = 0
            first_line, first_msg = report.errors[0]
            raise JSONLImportError(
                f"{source}: line {first_line}: {first_msg}; {len(report.errors)} bad line(s), "
                "nothing imported (strict)",
                report,
            )
    if report.imported >= ANALYZE_AFTER:
        refresh_statistics(engine)
    return report


def refresh_statistics(engine: Engine) -> None:
    """After a bulk load the planner's row statistics are stale; PostgreSQL may then sort a whole
    workload for `best()` instead of walking its index. ANALYZE samples, so this takes well under a
    second even for large logs."""
    with write_tx(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE measurements, configs, workloads, targets")
        else:
            conn.exec_driver_sql("ANALYZE")


def _run_id(conn: Connection, run: Any, cache: dict[str, int]) -> int | None:
    """Find or create the run a line belongs to, by its uid (run ids differ between databases)."""
    if run is None:
        return None
    if not isinstance(run, dict) or not isinstance(run.get("uid"), str) or not run["uid"]:
        raise TuningDBError("'run' must be null or an object with a string 'uid'")
    uid = run["uid"]
    if len(uid) > 32:
        raise TuningDBError(f"'run.uid' is longer than 32 characters: {uid!r}")
    if uid in cache:
        return cache[uid]
    status = run.get("status") or "interrupted"
    if status not in ("running", "finished", "interrupted"):
        raise TuningDBError(f"'run.status' must be running, finished or interrupted, got {status!r}")
    info = run.get("info")
    values = {
        "uid": uid,
        "model": _opt_str(run, "model"),
        "tuner": _opt_str(run, "tuner"),
        "trial_budget": _trial_budget(run.get("trial_budget")),
        "status": status,
        "host": _opt_str(run, "host") or socket.gethostname(),
        "started_at": parse_time(run.get("started_at") or 0.0, "run.started_at"),
        "finished_at": parse_time(run["finished_at"], "run.finished_at") if run.get("finished_at") else None,
        "info": schema.canonical_json(info) if isinstance(info, dict) else None,
    }
    conn.execute(insert_ignore(conn, r), [values])
    cache[uid] = conn.scalar(select(r.c.id).where(r.c.uid == values["uid"]))
    return cache[uid]


def _trial_budget(value: Any) -> int | None:
    """A run's trial budget: an integer the column holds (32-bit), or None when absent or not one."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not 0 <= value < 2**31:
        raise TuningDBError(f"'run.trial_budget' must be in [0, 2**31), got {value}")
    return value


def _opt_str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) else None
