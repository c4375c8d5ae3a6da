"""The schedule source `autorelay.build(..., schedules=...)` consults at compile time.

`lookup(workload_key, target)` answers in three tiers and always says which one answered:

  * ``exact``       - the workload was tuned on this target: the winner of its interleaved
                      re-measurement, or its fastest config if it was never re-measured
                      (`TuningDB.pick`);
  * ``transferred`` - the nearest tuned workload of the same op family on this target (by shape
                      distance, see `shape_distance`), whose config the optional `validate` callable
                      accepted for the new shape;
  * ``default``     - nothing usable: None, and the compiler falls back to its heuristic.

After each call `source.last_lookup_kind` (a `LookupKind`, which compares equal to the strings above)
and `source.last_result` (a `LookupResult` with the donor workload and distance) tell what happened;
`lookup_with_kind()` returns the `LookupResult` directly; `source.counts` tallies kinds, for a build
report. To find a *neighbour* the source needs the new workload's description
(`{"family", "shapes", "dtypes", ...}`): pass it as `lookup(..., workload=...)`, or give
`schedule_source(target, describe=fn)`, or have it logged with `db.register_workload()`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import exists, select

from . import schema
from .engine import read_tx
from .errors import TuningDBError

if TYPE_CHECKING:
    from .db import TuningDB

Validate = Callable[[str, dict[str, Any]], bool]
Describe = Callable[[str], "dict[str, Any] | None"]
MAX_DONORS = 5  # nearest workloads tried
CONFIGS_PER_DONOR = 3  # best configs of each tried before moving on


class LookupKind(StrEnum):
    EXACT = "exact"
    TRANSFERRED = "transferred"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class LookupResult:
    config: dict[str, Any] | None
    kind: LookupKind
    workload_key: str
    donor_key: str | None = None  # the workload whose config was used (== workload_key for exact)
    distance: float | None = None
    mean_cost: float | None = None  # the donor's measured cost (on its own shape for transfers)


def shape_distance(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """Sum over all tensors and dims of |log2(a_dim) - log2(b_dim)|, or None when not comparable
    (other family, other number of tensors or ranks, other dtypes, or unequal symbolic dims).
    Log ratios make 64->128 as far as 512->1024: a tile that fits one tends to fit the other."""
    if a.get("family") != b.get("family"):
        return None
    sa, sb = a.get("shapes"), b.get("shapes")
    if not isinstance(sa, list) or not isinstance(sb, list) or len(sa) != len(sb):
        return None
    if a.get("dtypes") is not None and b.get("dtypes") is not None and a["dtypes"] != b["dtypes"]:
        return None
    total = 0.0
    for x, y in zip(sa, sb):
        if not isinstance(x, list) or not isinstance(y, list) or len(x) != len(y):
            return None
        for dx, dy in zip(x, y):
            if dx == dy:
                continue
            if not (isinstance(dx, int) and isinstance(dy, int)) or dx <= 0 or dy <= 0:
                return None
            total += abs(math.log2(dx) - math.log2(dy))
    return total


class ScheduleSource:
    """A plain lookup object bound to one target of one tuning log (see the module docstring)."""

    def __init__(
        self, db: TuningDB, target: str, *, validate: Validate | None = None, describe: Describe | None = None
    ) -> None:
        self.db = db
        self.target = schema.canonical_target(target)
        self.validate = validate
        self.describe = describe
        self.last_result: LookupResult | None = None
        self.counts: Counter[str] = Counter()
        self.rejections: list[tuple[str, str, str]] = []  # (workload, donor, why) of refused transfers

    @property
    def last_lookup_kind(self) -> LookupKind | None:
        return self.last_result.kind if self.last_result else None

    def lookup(
        self, workload_key: str, target: str | None = None, *, workload: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The config to compile `workload_key` with on `target`, or None for the heuristic default."""
        return self.lookup_with_kind(workload_key, target, workload=workload).config

    def lookup_with_kind(
        self, workload_key: str, target: str | None = None, *, workload: dict[str, Any] | None = None
    ) -> LookupResult:
        if target is not None and schema.canonical_target(target) != self.target:
            raise TuningDBError(
                f"schedule source for target {self.target!r} was asked about target {target!r}"
            )
        result = self._exact(workload_key) or self._transfer(workload_key, workload)
        if result is None:
            result = LookupResult(None, LookupKind.DEFAULT, workload_key)
        self.last_result = result
        self.counts[result.kind.value] += 1
        return result

    def _exact(self, key: str) -> LookupResult | None:
        rec = self.db.pick(key, self.target)
        if rec is None:
            return None
        return LookupResult(rec.config, LookupKind.EXACT, key, key, 0.0, rec.mean_cost)

    def _transfer(self, key: str, workload: dict[str, Any] | None) -> LookupResult | None:
        desc = workload or (self.describe(key) if self.describe else None) or self._stored(key)
        if not isinstance(desc, dict) or not isinstance(desc.get("family"), str):
            return None
        ranked = sorted(
            (d, k)
            for k, other in self._tuned_of_family(desc["family"])
            if k != key
            for d in [shape_distance(desc, other)]
            if d is not None
        )
        for dist, donor in ranked[:MAX_DONORS]:
            for rec in self.db.best(donor, self.target, k=CONFIGS_PER_DONOR):
                why = self._check(key, rec.config)
                if why is None:
                    return LookupResult(rec.config, LookupKind.TRANSFERRED, key, donor, dist, rec.mean_cost)
                self.rejections.append((key, donor, why))
        return None

    def _check(self, key: str, config: dict[str, Any]) -> str | None:
        """None when the compiler accepts `config` for `key` (or there is no validator), else why not."""
        if self.validate is None:
            return None
        try:
            return None if self.validate(key, config) else "rejected by validate"
        except Exception as e:  # the compiler signals an illegal schedule by raising (ScheduleError)
            return f"{type(e).__name__}: {e}"

    def _stored(self, key: str) -> dict[str, Any] | None:
        w = schema.workloads
        with read_tx(self.db.engine) as conn:
            raw = conn.scalar(select(w.c.workload).where(w.c.key == key))
        return json.loads(raw) if raw else None

    def _tuned_of_family(self, family: str) -> list[tuple[str, dict[str, Any]]]:
        """Workloads of `family` with at least one successful measurement on this target."""
        w, m, t = schema.workloads, schema.measurements, schema.targets
        with read_tx(self.db.engine) as conn:
            tid = conn.scalar(select(t.c.id).where(t.c.name == self.target))
            if tid is None:
                return []
            tuned = exists().where(
                m.c.workload_id == w.c.id, m.c.target_id == tid, m.c.mean_cost.is_not(None)
            )
            rows = conn.execute(select(w.c.key, w.c.workload).where(w.c.family == family, tuned)).all()
        return [(k, json.loads(raw)) for k, raw in rows if raw]


__all__ = ["LookupKind", "LookupResult", "ScheduleSource", "shape_distance"]
