"""Merging logs and pruning them.

Merge streams the other database's measurements through the import pipeline, so it has exactly the
import's guarantees: a measurement already present (same uid) is skipped, nothing is lost, runs are
matched by their uid. Experiment results (`autorelay reproduce`) are copied by uid the same way.
Prune keeps, for every (workload, target), all measurements of its K fastest configs and drops the
rest, then the configs left unmeasured. Failed measurements are kept unless asked otherwise: they
are small, and they are what stops a resumed tuner from building a config that crashes or hangs all
over again.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

from .engine import read_tx, write_tx
from .errors import TuningDBError
from .experiment_results import all_results, copy_missing_results
from .jsonl import ImportReport, export_rows, import_rows

_KEEP = """
WITH per_config AS (
    SELECT workload_id, target_id, config_id, MIN(mean_cost) AS best
    FROM measurements WHERE mean_cost IS NOT NULL
    GROUP BY workload_id, target_id, config_id
), ranked AS (
    SELECT workload_id, target_id, config_id,
           ROW_NUMBER() OVER (PARTITION BY workload_id, target_id ORDER BY best, config_id) AS rk
    FROM per_config
)
"""
_DOOMED = """
FROM measurements WHERE NOT EXISTS (
    SELECT 1 FROM ranked k
    WHERE k.workload_id = measurements.workload_id AND k.target_id = measurements.target_id
      AND k.config_id = measurements.config_id AND k.rk <= :k)
"""
_ORPHAN_CONFIGS = (
    "FROM configs WHERE NOT EXISTS (SELECT 1 FROM measurements mm WHERE mm.config_id = configs.id)"
)


def merge(engine: Engine, other: Engine, *, source: str) -> ImportReport:
    """Copy every measurement and every experiment result of `other` that `engine`'s database lacks."""
    rows = ((i, row) for i, row in enumerate(export_rows(other), start=1))
    report = import_rows(engine, rows, source=source)
    with read_tx(other) as conn:
        results = all_results(conn)
    with write_tx(engine) as conn:
        report.experiment_results = copy_missing_results(conn, results)
    return report


def prune(engine: Engine, keep_best: int, *, dry_run: bool = False,
          keep_errors: bool = True) -> dict[str, int]:
    """Keep the `keep_best` fastest configs per (workload, target) (and every failed measurement,
    unless `keep_errors` is False); return what was (or would be) deleted."""
    if keep_best < 1:
        raise TuningDBError(f"--keep-best must be at least 1, got {keep_best}")
    doomed_sql = _DOOMED + (" AND mean_cost IS NOT NULL" if keep_errors else "")
    with write_tx(engine) as conn:
        doomed = _count(conn, _KEEP + "SELECT COUNT(*) " + doomed_sql, keep_best)
        if dry_run:
            orphans = _count(
                conn,
                _KEEP + "SELECT COUNT(*) FROM configs WHERE id NOT IN ("
                "SELECT config_id FROM measurements WHERE id NOT IN (SELECT id " + doomed_sql + "))",
                keep_best,
            )
            conn.rollback()
            return {"measurements": doomed, "configs": orphans}
        conn.execute(text(_KEEP + "DELETE " + doomed_sql), {"k": keep_best})
        orphans = conn.execute(text("DELETE " + _ORPHAN_CONFIGS)).rowcount
    return {"measurements": doomed, "configs": int(orphans)}


def _count(conn: Connection, sql: str, k: int) -> int:
    return int(conn.execute(text(sql), {"k": k}).scalar() or 0)
