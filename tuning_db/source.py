"""The schedule source `autorelay.build(..., schedules=...)` consults at compile time.

`lookup(workload_key, target)` answers in three tiers and always says which one answered:

  * ``exact``       - the workload was tuned on this target: the winner of its interleaved
                      re-measurement, or its fastest config if it was never re-measured
                      (`TuningDB.pick`);
  * ``transferred`` - the nearest tuned workload of the same op family on this target (by shape
                      distance, see `shape_distance`), whose config the optional `validate` callable
                      accepted for the new shape (never a config of `EXACT_ONLY_TEMPLATES`);
  * ``default``     - nothing usable: config None, and the compiler falls back to its heuristic.

Each answer is a `LookupResult` (`config`, `kind` — a `LookupKind`, which compares equal to the
strings above — the donor workload and distance, and a `detail` such as "tuned for 1 thread");
`source.counts` tallies kinds, for a build report. Workloads tuned for the same target with another
thread count stand in when the asked thread count has none. To find a *neighbour* the source needs
the new workload's description (`{"family", "shapes", "dtypes", ...}`): pass it as
`lookup(..., workload=...)`, or give `schedule_source(target, describe=fn)`, or have it logged with
`db.register_workload()`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import exists, select

from . import schema
from .engine import read_tx
from .errors import TuningDBError
from .schema import target_kind

if TYPE_CHECKING:
    from .db import TuningDB
    from .records import Record

Validate = Callable[[str, dict[str, Any]], bool]
Describe = Callable[[str], "dict[str, Any] | None"]
MAX_DONORS = 5  # nearest workloads tried
CONFIGS_PER_DONOR = 3  # configs of each tried before moving on (`_donor_configs`)
# templates whose configs serve only the workload they were tuned on: a copy's best vector split
# and loop shape follow its exact extents (tuned on Zen 3, a layout transform of 14-wide rows ran
# fastest unvectorized, those of 56-wide rows kept their vectors), and its default is rarely far
# from its best
EXACT_ONLY_TEMPLATES = frozenset({"injective"})


class LookupKind(StrEnum):
    EXACT = "exact"
    TRANSFERRED = "transferred"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class LookupResult:
    """One answer: what `autorelay.build` reads (`config`, `kind`, `detail`) and where it came from."""

    config: dict[str, Any] | None
    kind: LookupKind
    workload_key: str
    donor_key: str | None = None  # the workload whose config was used (== workload_key for exact)
    distance: float | None = None
    mean_cost: float | None = None  # the donor's measured cost (on its own shape for transfers)
    target: str | None = None  # the log target that answered
    detail: str = ""  # e.g. that the schedules were tuned for another thread count
    # a transfer's donor description (`{"family", "shapes", ...}`): the compiler refuses a config
    # tuned at another batch whose batch knobs this workload would not choose
    # (`autorelay.schedule.templates.base.Template.carries_across_batch`)
    donor_workload: dict[str, Any] | None = None


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
    """A lookup object over one tuning log (see the module docstring), for `autorelay.build`.

    `target` is the target it was opened for: a kind alone (``llvm``) serves whatever concrete
    target of that kind a build asks about; a full name (``llvm -mcpu=… -threads=2``) serves that
    target only (asking about another CPU or kind is an error, not a silent default). Either way, a
    workload tuned for the same target with another thread count is used when the asked thread
    count has nothing, and the answer's `detail` says so.
    """

    def __init__(
        self, db: TuningDB, target: str = "llvm", *, validate: Validate | None = None,
        describe: Describe | None = None
    ) -> None:
        self.db = db
        self.target = schema.canonical_target(target)
        self.validate = validate
        self.describe = describe
        self.last_result: LookupResult | None = None
        self.counts: Counter[str] = Counter()
        self.rejections: list[tuple[str, str, str]] = []  # (workload, donor, why) of refused transfers

    def lookup(
        self, workload_key: str, target: str | None = None, *, workload: dict[str, Any] | None = None
    ) -> LookupResult:
        """The config to compile `workload_key` with on `target` (None: the source's own target);
        `config` is None when nothing usable is logged (the compiler's heuristic default)."""
        candidates = self._targets(target)
        result = None
        for tier in (self._exact, lambda k, t: self._transfer(k, t, workload)):
            for t in candidates:
                result = tier(workload_key, t)
                if result is not None:
                    break
            if result is not None:
                break
        if result is None:
            result = LookupResult(None, LookupKind.DEFAULT, workload_key)
        elif result.target != candidates[0]:
            result = replace(result, detail=f"tuned for {_threads_text(result.target)}")
        self.last_result = result
        self.counts[result.kind.value] += 1
        return result

    def pipeline_for(self, model_key: str, target: str | None = None) -> str | None:
        """The pass pipeline of the latest tuning run of the model with this key on this target
        (else on the same target with other threads, nearest thread count first), as `tune` logged
        it; a layout search's run ("plan") gives what it chose: "plan" or the pipeline that beat it."""
        got = self.db.latest_pipeline(model_key, self._targets(target))
        if got is None:
            return None
        pipeline, run_target = got
        if pipeline == "plan":
            rec = self.db.layout_plan(model_key, run_target)
            return rec.winner if rec is not None else None
        return pipeline

    def layout_plan_for(self, model_key: str, target: str | None = None) -> dict[str, Any] | None:
        """The layout plan (JSON) the latest layout search of the model stored for this target, when
        that plan won its search (`layout_plans.py`)."""
        for tgt in self._targets(target):
            rec = self.db.layout_plan(model_key, tgt)
            if rec is not None:
                return rec.plan if rec.chosen else None
        return None

    def _targets(self, target: str | None) -> list[str]:
        """The log targets to consult, best first: the asked one, then it with other threads."""
        asked = schema.canonical_target(target) if target else self.target
        own = self.target
        if " " not in asked and target_kind(asked) == target_kind(own):
            asked = own  # a bare kind asks about whatever target this source was opened for
        if target_kind(asked) != target_kind(own) or (" " in own and _base(own) != _base(asked)):
            raise TuningDBError(f"schedule source for target {own!r} was asked about target {target!r}")
        others = sorted((n for n in self._target_names() if n != asked and _base(n) == _base(asked)),
                        key=lambda n: abs(_thread_count(n) - _thread_count(asked)))
        return [asked, *others]

    def _target_names(self) -> list[str]:
        t = schema.targets
        with read_tx(self.db.engine) as conn:
            return [str(n) for n in conn.scalars(select(t.c.name))]

    def _exact(self, key: str, target: str) -> LookupResult | None:
        rec = self.db.pick(key, target)
        if rec is None:
            return None
        return LookupResult(rec.config, LookupKind.EXACT, key, key, 0.0, rec.mean_cost, target=target)

    def _transfer(self, key: str, target: str, workload: dict[str, Any] | None) -> LookupResult | None:
        desc = workload or (self.describe(key) if self.describe else None) or self._stored(key)
        if not isinstance(desc, dict) or not isinstance(desc.get("family"), str):
            return None
        described = dict(self.tuned_of_family(desc["family"], target))
        ranked = sorted(
            (d, k)
            for k, other in described.items()
            if k != key
            for d in [shape_distance(desc, other)]
            if d is not None
        )
        for dist, donor in ranked[:MAX_DONORS]:
            for rec in self._donor_configs(donor, target):
                if rec.config.get("template") in EXACT_ONLY_TEMPLATES:
                    continue
                why = self._check(key, rec.config)
                if why is None:
                    return LookupResult(rec.config, LookupKind.TRANSFERRED, key, donor, dist, rec.mean_cost,
                                        target=target, donor_workload=described[donor])
                self.rejections.append((key, donor, why))
        return None

    def _donor_configs(self, donor: str, target: str) -> list[Record]:
        """What a donor offers, best first: the config its own builds use (`TuningDB.pick`: the
        winner of its latest re-measurement, alone or in place), then its fastest measured ones;
        `CONFIGS_PER_DONOR` in all. The fastest measurement can be a lucky figure of a config that
        then lost to the donor's default when both were timed fairly. ResNet-18 at batch 8 built
        from an 800-trial plan tune's batch-1 log (2-core AVX-512 host, nchwc16, one process, five
        interleaved passes): 1.03x faster with each donor's pick first than with its fastest
        measurement first (10 of 24 transferred kernels differ); from a per-model tune's log, the
        same within 0.5%."""
        picked = self.db.pick(donor, target)
        out = [picked] if picked is not None else []
        for rec in self.db.best(donor, target, k=CONFIGS_PER_DONOR):
            if all(rec.config != o.config for o in out):
                out.append(rec)
        return out[:CONFIGS_PER_DONOR]

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

    def tuned_of_family(self, family: str, target: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """(key, description) of the workloads of `family` with at least one successful measurement
        on `target` (default: the source's own)."""
        target = schema.canonical_target(target) if target else self.target
        w, m, t = schema.workloads, schema.measurements, schema.targets
        with read_tx(self.db.engine) as conn:
            tid = conn.scalar(select(t.c.id).where(t.c.name == target))
            if tid is None:
                return []
            tuned = exists().where(
                m.c.workload_id == w.c.id, m.c.target_id == tid, m.c.mean_cost.is_not(None)
            )
            rows = conn.execute(select(w.c.key, w.c.workload).where(w.c.family == family, tuned)).all()
        return [(k, json.loads(raw)) for k, raw in rows if raw]


def _base(target: str) -> str:
    """A canonical target name without its `-threads=` option."""
    return " ".join(p for p in target.split() if not p.startswith("-threads="))


def _thread_count(target: str) -> int:
    for p in target.split():
        if p.startswith("-threads=") and p[9:].isdigit():
            return int(p[9:])
    return 1


def _threads_text(target: str | None) -> str:
    n = _thread_count(target or "")
    return f"{n} thread{'s' if n != 1 else ''} ({target})"


__all__ = ["LookupKind", "LookupResult", "ScheduleSource", "shape_distance"]
