"""tuning_db: the SQL tuning log of AutoRelay (SQLite file by default, PostgreSQL by URL).

It stores workloads, targets and configs as JSON and imports nothing from `autorelay` or `search`.

    db = tuning_db.open()                      # the default SQLite file (or $AUTORELAY_DB)
    db.record(key, "llvm -mcpu=x", {"tile": 8}, [1.2e-3, 1.1e-3], workload={...})
    db.best(key, "llvm -mcpu=x", k=3)          # -> [Record(config=..., mean_cost=...), ...]
    src = db.schedule_source("llvm -mcpu=x")   # for autorelay.build(..., schedules=src)
"""

from __future__ import annotations

from .db import TuningDB, open_db
from .errors import JSONLImportError, SchemaVersionError, TuningDBError
from .features import config_key
from .jsonl import ImportReport
from .plans import PlanRecord
from .queries import IN_PLACE, INTERLEAVED, RETIMED, latest_batch
from .records import Record, RunInfo
from .schema import CURRENT_VERSION as SCHEMA_VERSION
from .settings import Settings
from .source import LookupKind, LookupResult, ScheduleSource, shape_distance

open = open_db

__all__ = [
    "INTERLEAVED",
    "IN_PLACE",
    "RETIMED",
    "SCHEMA_VERSION",
    "ImportReport",
    "JSONLImportError",
    "LookupKind",
    "LookupResult",
    "PlanRecord",
    "Record",
    "RunInfo",
    "ScheduleSource",
    "SchemaVersionError",
    "Settings",
    "TuningDB",
    "TuningDBError",
    "config_key",
    "latest_batch",
    "open",
    "shape_distance",
]
