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
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from sqlalchemy import Engine, select

from . import schema
from .engine import read_tx, write_tx
from .errors import TuningDBError
from .experiment_results import ExperimentResult, all_results, insert_result
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
    added = present = 0
    errors: list[tuple[int, str]] = []
    lines: Iterable[tuple[int, dict[str, Any] | str]] = read_lines(path)
    with write_tx(engine) as conn:
        have = set(conn.execute(select(schema.experiment_results.c.uid)).scalars())
        for lineno, obj in lines:
            if isinstance(obj, str):
                errors.append((lineno, obj))
                continue
            try:
                r = _row(obj)
                if r.uid in have:
                    present += 1
                    continue
                insert_result(conn, experiment=r.experiment, mode=r.mode, unit=r.unit, machine=r.machine,
                              result=r.result, machine_info=r.machine_info, code_version=r.code_version,
                              uid=r.uid, recorded_at=r.recorded_at)
            except TuningDBError as e:
                errors.append((lineno, str(e)))
                continue
            have.add(r.uid)
            added += 1
    return added, present, errors


__all__ = ["export_results", "import_results"]
