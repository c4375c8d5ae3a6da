"""What one measurement is, and how raw input is checked.

`normalize()` is the single gate for both `db.record()` and JSON-lines import/merge: it checks types,
computes mean/std from the repeats, and canonicalises JSON (see `ingest.py` for writing).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import schema
from .errors import TuningDBError

_ERROR_KIND_DEFAULT = "error"


@dataclass(frozen=True, slots=True)
class Record:
    """One measurement as read back from the log."""

    id: int
    uid: str
    workload_key: str
    target: str
    config: dict[str, Any]
    costs: list[float]
    mean_cost: float | None
    std_cost: float | None
    error_kind: str | None
    error: str | None
    run: int | None
    space_index: int | None
    builder_version: str | None
    runner_version: str | None
    compiler_version: str | None
    recorded_at: float


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A tuning run: who tuned what with which budget, and how it ended."""

    id: int
    uid: str
    model: str | None
    tuner: str | None
    trial_budget: int | None
    status: str  # "running" | "finished" | "interrupted"
    host: str | None
    started_at: float
    finished_at: float | None
    info: dict[str, Any] | None
    measurements: int = 0


@dataclass(frozen=True, slots=True)
class Measurement:
    """A checked measurement ready to write; names (not ids) identify its target/workload/config."""

    uid: str
    workload_key: str
    target: str
    config_json: str
    costs: tuple[float, ...]
    mean_cost: float | None
    std_cost: float | None
    error_kind: str | None
    error: str | None
    workload_json: str | None
    family: str | None
    fingerprint_json: str | None
    space_index: int | None
    builder_version: str | None
    runner_version: str | None
    compiler_version: str | None
    recorded_at: float
    run_id: int | None = None


def normalize(
    workload_key: Any,
    target: Any,
    config: Any,
    costs: Any,
    *,
    workload: Any = None,
    error: Any = None,
    error_kind: Any = None,
    run_id: int | None = None,
    uid: Any = None,
    target_fingerprint: Any = None,
    space_index: Any = None,
    builder_version: Any = None,
    runner_version: Any = None,
    compiler_version: Any = None,
    recorded_at: Any = None,
) -> Measurement:
    """Check one measurement's fields; raise TuningDBError naming the first bad one."""
    key = _text("workload_key", workload_key, required=True)
    tgt = schema.canonical_target(_text("target", target, required=True))
    # `type(...) is` first: the ABC isinstance checks are slow, and this runs per imported line
    if type(config) is not dict and not isinstance(config, Mapping):
        raise TuningDBError(f"'config' must be a JSON object (dict), got {type(config).__name__}")
    config_json = _json("config", dict(config))
    if type(costs) is not list and (isinstance(costs, (str, bytes)) or not isinstance(costs, Sequence)):
        raise TuningDBError(f"'costs' must be a list of numbers, got {type(costs).__name__}")
    vals: list[float] = []
    for i, c in enumerate(costs):
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
            raise TuningDBError(f"'costs'[{i}] must be a finite non-negative number, got {c!r}")
        vals.append(float(c))
    err = _text("error", error)
    kind = _text("error_kind", error_kind)
    if kind is not None and err is None:
        err = kind
    if err is not None and kind is None:
        kind = _ERROR_KIND_DEFAULT
    if err is None and not vals:
        raise TuningDBError("'costs' is empty for a successful measurement (pass error=... for failures)")
    mean = std = None
    if err is None:
        mean = math.fsum(vals) / len(vals)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))
    wl_json = family = None
    if workload is not None:
        if type(workload) is not dict and not isinstance(workload, Mapping):
            raise TuningDBError(f"'workload' must be a JSON object (dict), got {type(workload).__name__}")
        wl_json = _json("workload", dict(workload))
        fam = workload.get("family")
        family = fam if isinstance(fam, str) else None
    fp_json = None
    if target_fingerprint is not None:
        if not isinstance(target_fingerprint, Mapping):
            raise TuningDBError("'target_fingerprint' must be a JSON object (dict)")
        fp_json = _json("target_fingerprint", dict(target_fingerprint))
    if space_index is not None and (isinstance(space_index, bool) or not isinstance(space_index, int)):
        raise TuningDBError(f"'space_index' must be an integer, got {space_index!r}")
    if space_index is not None and not 0 <= space_index < 2**63:  # a config's position; the column is 64-bit
        raise TuningDBError(f"'space_index' must be in [0, 2**63), got {space_index}")
    if recorded_at is None:
        recorded_at = time.time()
    elif isinstance(recorded_at, bool) or not isinstance(recorded_at, (int, float)):
        raise TuningDBError(f"'recorded_at' must be a number of seconds, got {recorded_at!r}")
    uid_s = _text("uid", uid) or uuid.uuid4().hex
    if len(uid_s) > 32:
        raise TuningDBError(f"'uid' is longer than 32 characters: {uid_s!r}")
    return Measurement(
        uid=uid_s,
        workload_key=key,
        target=tgt,
        config_json=config_json,
        costs=tuple(vals),
        mean_cost=mean,
        std_cost=std,
        error_kind=kind,
        error=err,
        workload_json=wl_json,
        family=family,
        fingerprint_json=fp_json,
        space_index=space_index,
        builder_version=_text("builder_version", builder_version, limit=64),
        runner_version=_text("runner_version", runner_version, limit=64),
        compiler_version=_text("compiler_version", compiler_version, limit=64),
        recorded_at=float(recorded_at),
        run_id=run_id,
    )


def _text(name: str, value: Any, *, required: bool = False, limit: int = schema.MAX_KEY_LEN) -> str | None:
    if value is None:
        if required:
            raise TuningDBError(f"'{name}' is required")
        return None
    if not isinstance(value, str):
        raise TuningDBError(f"'{name}' must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise TuningDBError(f"'{name}' must not be empty")
    if name not in ("error",) and len(value) > limit:
        raise TuningDBError(f"'{name}' is longer than {limit} characters")
    return value


def _json(name: str, value: Any) -> str:
    try:
        return schema.canonical_json(value)
    except (TypeError, ValueError) as e:
        raise TuningDBError(f"'{name}' is not JSON-serialisable: {e}") from None
