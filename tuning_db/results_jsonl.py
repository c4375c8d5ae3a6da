"""Experiment results (`autorelay reproduce`) as JSON lines: a text file small enough to keep next
to a report in version control, and read back into any log, so an experiment measured over
several sessions (or machines) is redrawn from every unit stored so far.

One line per stored row, with its uid: reading a file twice, or a file whose rows a log already
holds, adds nothing. Bad lines are reported by line number and skipped; nothing else is read
from a line that fails its checks.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any

from sqlalchemy import Engine

from .engine import read_tx, write_tx
from .errors import TuningDBError
from .experiment_results import ExperimentResult, all_results, copy_missing_results
from .jsonl import read_lines

FIELDS = ("uid", "experiment", "mode", "unit", "machine", "machine_info", "code_version", "result",
          "recorded_at")


def export_results(engine: Engine, path: str | os.PathLike[str], experiment: str | None = None) -> int:
    """Write every stored result row (of one experiment, or all) as a JSON line; returns how many."""
    with read_tx(engine) as conn:
        rows = [r for r in all_results(conn) if experiment is None or r.experiment == experiment]
    try:
        with open(path, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(asdict(r), sort_keys=True) + "\n")
    except OSError as e:
        raise TuningDBError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
    return len(rows)


def _row(obj: dict[str, Any]) -> ExperimentResult:
    missing = [k for k in FIELDS if k not in obj]
    if missing:
        raise TuningDBError(f"missing field(s) {', '.join(missing)}")
    if not isinstance(obj["uid"], str) or not obj["uid"]:
        raise TuningDBError(f"bad uid {obj['uid']!r}")
    if not isinstance(obj["recorded_at"], int | float) or not isinstance(obj["machine_info"], dict):
        raise TuningDBError("recorded_at must be a number and machine_info an object")
    return ExperimentResult(**{k: obj[k] for k in FIELDS})


def import_results(engine: Engine, path: str | os.PathLike[str]) -> tuple[int, int, list[tuple[int, str]]]:
    """Read a file `export_results` wrote: (rows added, rows already present, bad lines as
    (line number, message))."""
    errors: list[tuple[int, str]] = []
    rows: list[ExperimentResult] = []
    linenos: list[int] = []
    for lineno, obj in read_lines(path):
        try:
            if isinstance(obj, str):
                raise TuningDBError(obj)
            rows.append(_row(obj))
            linenos.append(lineno)
        except TuningDBError as e:
            errors.append((lineno, str(e)))
    refused: list[int] = []

    def refuse(i: int, e: TuningDBError) -> None:
        refused.append(i)
        errors.append((linenos[i], str(e)))

    with write_tx(engine) as conn:
        added = copy_missing_results(conn, rows, on_error=refuse)
    errors.sort()
    return added, len(rows) - added - len(refused), errors


__all__ = ["export_results", "import_results"]
